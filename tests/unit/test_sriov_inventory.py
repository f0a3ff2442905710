"""SR-IOV inventory from a sysfs tree built here, and the --sriov / --sriov-exclude options."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudnet.dataplane.sriov import inventory as inv
from tests.support.sriov_tree import add_pf


def test_parse_sriov() -> None:
    assert inv.parse_sriov(["physnet2:eth1,physnet3:eth2", "physnet2:eth3"]) == {
        "physnet2": ["eth1", "eth3"], "physnet3": ["eth2"],
    }  # fmt: skip
    for bad in ("physnet2", ":eth1", "physnet2:", "a:b:c"):
        with pytest.raises(ValueError, match="PHYSNET:PF"):
            inv.parse_sriov([bad])
    with pytest.raises(ValueError, match="mapped to both"):
        inv.parse_sriov(["p1:eth1,p2:eth1"])


def test_parse_exclude() -> None:
    assert inv.parse_exclude(["eth1:0000:07:00.2;0000:07:00.3,eth2:08:00.2"]) == {
        "eth1": {"0000:07:00.2", "0000:07:00.3"}, "eth2": {"0000:08:00.2"},
    }  # fmt: skip
    with pytest.raises(ValueError, match=r"Invalid pci slot 0000:zz:00\.1"):
        inv.parse_exclude(["eth1:0000:zz:00.1"])
    with pytest.raises(ValueError, match="PF:PCI"):
        inv.parse_exclude(["eth1"])


def test_read_inventory(tmp_path: Path) -> None:
    slots = add_pf(tmp_path, "pf0", ["vf0", None, "vf2"])
    add_pf(tmp_path, "pf1", ["w0"], bus=0x0B, vendor="0x15b3", device="0x1018")
    pfs = inv.read_inventory({"physnet2": ["pf0"], "physnet3": ["pf1", "missing"]}, {"pf0": {slots[2]}}, tmp_path)
    report = inv.inventory_report(pfs)
    assert report["physical_networks"] == {"physnet2": ["pf0"], "physnet3": ["pf1", "missing"]}
    pf0, pf1, missing = report["pfs"]
    assert (pf0["name"], pf0["numvfs"], pf0["error"]) == ("pf0", 3, None)
    assert pf0["vfs"] == [
        {"index": 0, "pci_slot": "0000:0a:00.1", "pci_vendor_info": "8086:154c", "netdev": "vf0", "excluded": False},
        {"index": 1, "pci_slot": "0000:0a:00.2", "pci_vendor_info": "8086:154c", "netdev": None, "excluded": False},
        {"index": 2, "pci_slot": "0000:0a:00.3", "pci_vendor_info": "8086:154c", "netdev": "vf2", "excluded": True},
    ]
    assert pf1["vfs"][0]["pci_vendor_info"] == "15b3:1018"
    assert missing["numvfs"] == 0 and missing["error"] == "Invalid Device missing: Device not found"


def test_unreadable_numvfs_means_no_vfs(tmp_path: Path) -> None:
    add_pf(tmp_path, "pf0", ["vf0"])
    (tmp_path / "class/net/pf0/device/sriov_numvfs").write_text("garbage")
    (pf,) = inv.read_inventory({"physnet2": ["pf0"]}, {}, tmp_path)
    assert pf.numvfs == 0 and pf.vfs == [] and "sriov_numvfs" in (pf.error or "")
