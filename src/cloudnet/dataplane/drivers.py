"""The driver selector: the dataplane a host runs, by name, from the agent's configuration. The agent builds its
driver here and sees it only through dataplane.base; a new driver (OVN) is a package of its own and one line in
DRIVERS."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cloudnet.config import AgentConfig
from cloudnet.dataplane.base import Dataplane, PortBinder
from cloudnet.dataplane.linux.driver import LinuxDataplane
from cloudnet.dataplane.ovn import tapdev
from cloudnet.dataplane.ovn.driver import OvnDataplane
from cloudnet.dataplane.sriov import inventory
from cloudnet.dataplane.sriov.driver import SriovDataplane
from cloudnet.ovn import idl

# A driver from the agent's configuration and its heartbeat report (the same dict the agent sends: a driver may
# refresh its own members, e.g. report["sriov"] after each plug or release).
Factory = Callable[[AgentConfig, dict[str, Any]], Dataplane]


def host_report(config: AgentConfig) -> dict[str, Any]:
    """What the heartbeat reports about this host's dataplane: uplinks, and the SR-IOV inventory when VFs are
    mapped."""
    report: dict[str, Any] = {"uplinks": config.uplinks}
    if config.sriov:
        report["sriov"] = inventory.inventory_report(
            inventory.read_inventory(config.sriov, config.sriov_exclude, config.sysfs_root)
        )
    return report


def _binders(config: AgentConfig, report: dict[str, Any]) -> list[PortBinder]:
    if not config.sriov:
        return []
    return [SriovDataplane(config.host, config.state_dir, mappings=config.sriov, exclude=config.sriov_exclude,
                           sysfs_root=config.sysfs_root, report=report)]  # fmt: skip


def _linux(config: AgentConfig, report: dict[str, Any]) -> Dataplane:
    return LinuxDataplane(config.host, config.uplinks, _binders(config, report), park=config.park_pool_devices,
                          step_timeout=config.step_timeout, vm_owner=config.vm_owner)  # fmt: skip


def _ovn(config: AgentConfig, report: dict[str, Any]) -> Dataplane:
    if not config.ovn_sb or not config.ovs_db:
        raise ValueError("the ovn dataplane needs the SB database (--ovn-sb) and this chassis' Open_vSwitch database")
    if config.ovn_sb.startswith("ssl:"):  # (a joined host's: SB over SSL with its certificate)
        if config.key_file is None or config.cert_file is None or config.ca_file is None:
            raise ValueError("an ssl: SB database needs this host's certificate (join with a token)")
        idl.use_ssl(config.key_file, config.cert_file, config.ca_file)
    return OvnDataplane(config.host, config.ovs_db, config.ovn_sb, host_ns=config.ovs_netns, uplinks=config.uplinks,
                        step_timeout=config.step_timeout, availability_zone=config.availability_zone,
                        vm_owner=tapdev.Owner(*config.vm_owner))  # fmt: skip


DRIVERS: dict[str, Factory] = {"linux": _linux, "ovn": _ovn}


def build(config: AgentConfig, report: dict[str, Any]) -> Dataplane:
    """The configured driver (config.dataplane); ValueError naming the known ones for any other name."""
    factory = DRIVERS.get(config.dataplane)
    if factory is None:
        raise ValueError(f"unknown dataplane {config.dataplane!r} (known: {', '.join(sorted(DRIVERS))})")
    return factory(config, report)
