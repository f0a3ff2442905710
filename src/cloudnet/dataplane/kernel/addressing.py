"""A port's configuration inside its instance's namespace, whatever device carries it (a veth, a VF): addresses,
routes (its subnets' gateway, host routes, the metadata hop), and the fingerprint of what was applied, so that a
pass can skip an instance whose ports have not changed."""

from __future__ import annotations

import ipaddress
from typing import Any

from pyroute2 import IPRoute

from cloudnet.dataplane.kernel import routes
from cloudnet.wire import guest_net
from cloudnet.wire.guest_net import device_name

DesiredState = dict[str, Any]  # (dataplane.base's: the kernel helpers import nothing above them)
IFA_F_NODAD = 0x02


def metadata_hop(state: DesiredState, network_id: str, subnet_id: str) -> str | None:
    """The metadata port's IPv4 address on this subnet: the next hop towards 169.254.169.254."""
    port = state["networks"].get(network_id, {}).get("metadata_port")
    for f in (port or {}).get("fixed_ips", []):
        if f["subnet_id"] == subnet_id and ":" not in f["ip_address"]:
            return str(f["ip_address"])
    return None


def fingerprint(
    inst: dict[str, Any], position: int, port: dict[str, Any], network: dict[str, Any], state: DesiredState
) -> tuple[Any, ...]:
    """What of the desired state the port's configuration inside `inst` (as its device at `position`) depends
    on; its second item is the device's name."""
    ips = tuple(sorted((f["ip_address"], f["prefixlen"]) for f in port["fixed_ips"]))
    subnets = tuple(
        sorted(
            (s["gateway_ip"] or "", str(s["host_routes"]))
            for s in (state["subnets"].get(f["subnet_id"]) for f in port["fixed_ips"])
            if s
        )
    )
    hops = tuple(metadata_hop(state, port["network_id"], f["subnet_id"]) for f in port["fixed_ips"])
    return (
        inst["netns"],
        device_name(inst, position),
        port["mac_address"],
        network["mtu"],
        port["admin_state_up"],
        ips,
        subnets,
        hops,
        position == 0,  # the first interface carries the default routes
    )


def configure_addresses(
    ipr: IPRoute, idx: int, port: dict[str, Any], extra: list[tuple[str, int]] | None = None, fresh: bool = False
) -> None:
    """The port's addresses on device `idx`, others removed; `fresh`: the device was just made (no
    address of ours yet, so nothing to read)."""
    wanted = {(f["ip_address"], f["prefixlen"]) for f in port["fixed_ips"]} | set(extra or [])
    have = set() if fresh else {
        (a.get("address") or a.get_attr("IFA_ADDRESS"), a["prefixlen"]) for a in ipr.get_addr(index=idx)
    }  # fmt: skip
    for addr, plen in have - wanted:
        if ipaddress.ip_address(addr).is_link_local:  # the kernel's own fe80:: address stays
            continue
        ipr.addr("del", index=idx, address=addr, prefixlen=plen)
    for addr, plen in sorted(wanted - have):
        v6 = ipaddress.ip_address(addr).version == 6
        ipr.addr("add", index=idx, address=addr, prefixlen=plen, **({"flags": IFA_F_NODAD} if v6 else {}))


def configure_routes(
    ipr: IPRoute, idx: int, port: dict[str, Any], state: DesiredState, default: bool, fresh: bool = False
) -> None:
    """The port's routes on device `idx` (its own, tagged: routes.PROTO; wire/guest_net.py says which), and
    none of its own besides; `fresh`: the device was just made (none of its routes can exist yet)."""
    hops = {f["subnet_id"]: hop for f in port["fixed_ips"]
            if (hop := metadata_hop(state, port["network_id"], f["subnet_id"]))}  # fmt: skip
    wanted = [routes.route(dst, gw, idx) for dst, gw in guest_net.port_routes(port["fixed_ips"], state["subnets"],
                                                                                 hops, default)]  # fmt: skip
    routes.converge(ipr, wanted, mine=routes.cloudnets, oifs={idx}, read=not fresh)
