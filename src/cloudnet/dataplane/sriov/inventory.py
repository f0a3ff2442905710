"""SR-IOV inventory: the VFs of each physical function (PF) this host maps to a physical network.

Read from sysfs the way Neutron's SR-IOV agent and kuryr-kubernetes do (networking.md §3.2 A):

    <root>/class/net/<pf>/device/sriov_numvfs          how many VFs the PF has enabled
    <root>/class/net/<pf>/device/virtfn<i>             symlink to the VF's PCI device directory (its
                                                        basename is the PCI slot, 0000:0a:00.1)
    <root>/class/net/<pf>/device/virtfn<i>/vendor      0x8086   } pci_vendor_info "8086:154c"
    <root>/class/net/<pf>/device/virtfn<i>/device      0x154c   }
    <root>/class/net/<pf>/device/virtfn<i>/net/<name>  the VF's netdev, only while it is in this
                                                        (the host's) network namespace

Options: `--sriov physnet2:PF[,physnet3:PF2]` (a physnet may map to several PFs) and
`--sriov-exclude PF:PCI;PCI[,PF2:PCI]` (Neutron's `exclude_devices`).
The report (`inventory_report`) goes into the agent's heartbeat `report["sriov"]`.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
DEFAULT_SYSFS_ROOT = Path("/sys")


@dataclass(frozen=True)
class VirtualFunction:
    pf: str
    index: int
    pci_slot: str
    pci_vendor_info: str  # "vendor:product", e.g. "8086:154c"
    netdev: str | None  # None: not in the host namespace (assigned somewhere, or no driver bound)
    excluded: bool = False

    def as_report(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "pci_slot": self.pci_slot,
            "pci_vendor_info": self.pci_vendor_info,
            "netdev": self.netdev,
            "excluded": self.excluded,
        }


@dataclass
class PhysicalFunction:
    name: str
    physical_network: str
    numvfs: int = 0
    vfs: list[VirtualFunction] = field(default_factory=list)
    error: str | None = None  # why the PF could not be read (missing, unparsable sriov_numvfs)

    def as_report(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "physical_network": self.physical_network,
            "numvfs": self.numvfs,
            "error": self.error,
            "vfs": [vf.as_report() for vf in self.vfs],
        }


def parse_sriov(values: list[str]) -> dict[str, list[str]]:
    """`--sriov physnet2:eth1,physnet3:eth2` (repeatable) into {"physnet2": ["eth1"], "physnet3": ["eth2"]}."""
    out: dict[str, list[str]] = {}
    seen: dict[str, str] = {}
    for value in values:
        for item in value.split(","):
            item = item.strip()
            if not item:
                continue
            physnet, sep, pf = item.partition(":")
            physnet, pf = physnet.strip(), pf.strip()
            if not sep or not physnet or not pf or ":" in pf or "/" in pf:
                raise ValueError(f"--sriov must look like PHYSNET:PF, not {item!r}")
            if pf in seen and seen[pf] != physnet:
                raise ValueError(f"--sriov: PF {pf} is mapped to both {seen[pf]} and {physnet}")
            seen[pf] = physnet
            if pf not in out.setdefault(physnet, []):
                out[physnet].append(pf)
    return out


def _check_pci(slot: str) -> str:
    """A PCI address domain:bus:device.function (0000:0a:00.1); the domain may be left out."""
    parts = slot.split(":")
    if len(parts) == 2:
        parts = ["0000", *parts]
    if len(parts) != 3 or "." not in parts[2]:
        raise ValueError(f"Invalid pci slot {slot}")
    dev, _, fn = parts[2].partition(".")
    try:
        domain, bus, device, function = (int(x, 16) for x in (parts[0], parts[1], dev, fn))
    except ValueError:
        raise ValueError(f"Invalid pci slot {slot}") from None
    if domain > 0xFFFF or bus > 0xFF or device > 0x1F or function > 7:
        raise ValueError(f"Invalid pci slot {slot}")
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


def parse_exclude(values: list[str]) -> dict[str, set[str]]:
    """`--sriov-exclude eth1:0000:07:00.2;0000:07:00.3,eth2:0000:08:00.2` into {pf: {pci slots}}."""
    out: dict[str, set[str]] = {}
    for value in values:
        for item in value.split(","):
            item = item.strip()
            if not item:
                continue
            pf, sep, slots = item.partition(":")
            if not sep or not pf.strip() or not slots.strip():
                raise ValueError(f"--sriov-exclude must look like PF:PCI[;PCI...], not {item!r}")
            target = out.setdefault(pf.strip(), set())
            for slot in slots.split(";"):
                if slot.strip():
                    target.add(_check_pci(slot.strip()))
    return out


def _hex_id(path: Path) -> str:
    try:
        return f"{int(path.read_text().strip(), 16):04x}"
    except (OSError, ValueError):
        return "0000"


def read_pf(sysfs_root: Path, pf: str, physnet: str, excluded: set[str] | None = None) -> PhysicalFunction:
    out = PhysicalFunction(pf, physnet)
    device = sysfs_root / "class" / "net" / pf / "device"
    if not (sysfs_root / "class" / "net" / pf).exists():
        out.error = f"Invalid Device {pf}: Device not found"
        log.warning("SR-IOV: %s", out.error)
        return out
    try:
        out.numvfs = int((device / "sriov_numvfs").read_text().strip() or 0)
    except (OSError, ValueError) as exc:  # the reference's choice: unreadable means no VFs
        out.error = f"Invalid Device {pf}: cannot read sriov_numvfs ({exc})"
        log.warning("SR-IOV: %s", out.error)
        return out
    for i in range(out.numvfs):
        link = device / f"virtfn{i}"
        try:
            slot = _check_pci(os.path.basename(os.readlink(link)))
        except (OSError, ValueError) as exc:
            log.warning("SR-IOV: %s virtfn%d: %s", pf, i, exc)
            continue
        vendor_info = f"{_hex_id(link / 'vendor')}:{_hex_id(link / 'device')}"
        try:
            netdevs = sorted(os.listdir(link / "net"))
        except OSError:
            netdevs = []
        out.vfs.append(
            VirtualFunction(pf, i, slot, vendor_info, netdevs[0] if netdevs else None, slot in (excluded or set()))
        )
    return out


def read_inventory(
    mappings: dict[str, list[str]], exclude: dict[str, set[str]] | None = None, sysfs_root: Path = DEFAULT_SYSFS_ROOT
) -> list[PhysicalFunction]:
    exclude = exclude or {}
    return [
        read_pf(sysfs_root, pf, physnet, exclude.get(pf)) for physnet, pfs in sorted(mappings.items()) for pf in pfs
    ]


def inventory_report(pfs: list[PhysicalFunction]) -> dict[str, Any]:
    """The heartbeat report's `sriov` member: {"pfs": [...], "physical_networks": {physnet: [pf, ...]}}."""
    physnets: dict[str, list[str]] = {}
    for pf in pfs:
        physnets.setdefault(pf.physical_network, []).append(pf.name)
    return {"pfs": [pf.as_report() for pf in pfs], "physical_networks": physnets}


def vf_by_slot(sysfs_root: Path, pf: str, index: int) -> VirtualFunction | None:
    """One VF, read now (its netdev shows only while it is in the host namespace)."""
    found = read_pf(sysfs_root, pf, "")
    return next((vf for vf in found.vfs if vf.index == index), None)
