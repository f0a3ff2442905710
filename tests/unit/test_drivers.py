"""The driver selector: the agent's configuration picks the driver and what it composes; nothing else is accepted."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudnet.config import AgentConfig
from cloudnet.dataplane import base, drivers
from cloudnet.dataplane.linux.driver import LinuxDataplane
from cloudnet.dataplane.sriov.driver import SriovDataplane
from tests.support.sriov_tree import add_pf


def test_linux_with_sriov_direct_ports_bound_by_their_binder(tmp_path: Path) -> None:
    add_pf(tmp_path, "pf0", ["vf0", "vf1"])
    config = AgentConfig(host="sel", state_dir=tmp_path / "state", sriov={"physnet2": ["pf0"]}, sysfs_root=tmp_path)
    report = drivers.host_report(config)
    assert [len(pf["vfs"]) for pf in report["sriov"]["pfs"]] == [2]
    dataplane = drivers.build(config, report)
    assert isinstance(dataplane, LinuxDataplane)
    [binder] = dataplane.binders
    assert isinstance(binder, SriovDataplane) and binder.vnic_type == "direct"
    assert isinstance(binder, base.PortBinder)
    assert binder.report is report  # the heartbeat's inventory is refreshed by the binder after each plug


def test_linux_alone(tmp_path: Path) -> None:
    config = AgentConfig(host="sel", state_dir=tmp_path, uplinks={"physnet1": "eth9"})
    report = drivers.host_report(config)
    assert report == {"uplinks": {"physnet1": "eth9"}}
    dataplane = drivers.build(config, report)
    assert isinstance(dataplane, LinuxDataplane) and dataplane.binders == []
    # Each job the interface lists is done by one part of the driver (methods checked, not signatures).
    assert isinstance(dataplane, base.Dataplane)
    jobs = {"networks": base.Networks, "ports": base.Ports, "pool": base.PoolPorts, "metadata": base.MetadataReach,
            "routers": base.Routers}  # fmt: skip
    for attribute, job in jobs.items():
        assert isinstance(getattr(dataplane, attribute), job), attribute
    assert not isinstance(dataplane.routers, base.Ports)  # (the check can fail)


def test_an_unknown_driver_is_refused_with_the_known_ones(tmp_path: Path) -> None:
    config = AgentConfig(host="sel", state_dir=tmp_path, dataplane="../linux")
    with pytest.raises(ValueError, match=r"unknown dataplane '\.\./linux' \(known: linux, ovn\)"):
        drivers.build(config, drivers.host_report(config))
