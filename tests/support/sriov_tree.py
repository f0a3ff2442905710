"""A fake sysfs with SR-IOV PFs and VFs (there is no SR-IOV hardware on the test machines)."""

from __future__ import annotations

import os
from pathlib import Path


def add_pf(
    root: Path, pf: str, vfs: list[str | None], bus: int = 0x0A, vendor: str = "0x8086", device: str = "0x154c"
) -> list[str]:
    """PF `pf` with one VF per entry of `vfs` (the VF's netdev name, or None: no netdev in the host
    namespace). Returns the VFs' PCI slots."""
    pci = root / "bus" / "pci" / "devices"
    pf_dev = pci / f"0000:{bus:02x}:00.0"
    pf_dev.mkdir(parents=True, exist_ok=True)
    (pf_dev / "sriov_numvfs").write_text(f"{len(vfs)}\n")
    (pf_dev / "net" / pf).mkdir(parents=True, exist_ok=True)
    net = root / "class" / "net" / pf
    net.mkdir(parents=True, exist_ok=True)
    if not (net / "device").exists():
        os.symlink(pf_dev, net / "device")
    slots = []
    for i, netdev in enumerate(vfs):
        slot = f"0000:{bus:02x}:{(i + 1) // 8:02x}.{(i + 1) % 8:x}"
        vf_dev = pci / slot
        vf_dev.mkdir(parents=True, exist_ok=True)
        (vf_dev / "vendor").write_text(f"{vendor}\n")
        (vf_dev / "device").write_text(f"{device}\n")
        (vf_dev / "net").mkdir(exist_ok=True)
        if netdev:
            (vf_dev / "net" / netdev).mkdir(exist_ok=True)
        link = pf_dev / f"virtfn{i}"
        if not link.exists():
            os.symlink(f"../{slot}", link)
        slots.append(slot)
    return slots


def set_netdev(root: Path, slot: str, netdev: str | None) -> None:
    """The VF's netdev appears in (name) or leaves (None) the host namespace, as sysfs would show it."""
    net = root / "bus" / "pci" / "devices" / slot / "net"
    for child in net.iterdir():
        child.rmdir()
    if netdev:
        (net / netdev).mkdir()
