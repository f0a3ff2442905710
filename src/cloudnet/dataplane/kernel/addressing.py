"""A port's configuration inside its instance's namespace, whatever device carries it (a veth, a VF): addresses,
routes (its subnets' gateway, host routes, the metadata hop), and the fingerprint of what was applied, so that a
pass can skip an instance whose ports have not changed."""

from __future__ import annotations

import ipaddress
from typing import Any

from pyroute2 import IPRoute

from cloudnet.dataplane.kernel import routes

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
    """What of the desired state the port's configuration inside `inst` (as eth<position>) depends on."""
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
        position,
        port["mac_address"],
        network["mtu"],
        port["admin_state_up"],
        ips,
        subnets,
        hops,
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
    """The port's routes on device `idx` (its own, tagged: routes.PROTO), and none of its own besides; `fresh`: the
    device was just made (none of its routes can exist yet). One route a destination: the last wins. A route whose
    next hop is the port's own address is left out: it leads nowhere, and the kernel refuses it for IPv6 (EINVAL,
    "Gateway can not be a local address"), which would fail the whole instance over one subnet's host route."""
    own = {str(ipaddress.ip_address(f["ip_address"])) for f in port["fixed_ips"]}
    wanted: dict[tuple[int, str], routes.Route] = {}
    for f in port["fixed_ips"]:
        subnet = state["subnets"].get(f["subnet_id"])
        if not subnet:
            continue
        found = []
        if default and subnet["gateway_ip"]:
            default_dst = "::/0" if subnet["ip_version"] == 6 else "0.0.0.0/0"
            found.append(routes.route(default_dst, subnet["gateway_ip"], idx))
        hop = metadata_hop(state, port["network_id"], f["subnet_id"])
        if default and hop:
            found.append(routes.route("169.254.169.254/32", hop, idx))
        found += [routes.route(r["destination"], r["nexthop"], idx) for r in subnet["host_routes"]]
        wanted.update({(r[0], r[1]): r for r in found if r[2] not in own})
    routes.converge(ipr, wanted.values(), mine=routes.cloudnets, oifs={idx}, read=not fresh)
