"""An instance's interfaces as its guest sees them, decided once for the dataplanes that make them and for what
reports them (cloudnet-cni's result, the mdata keys): each interface's name inside the namespace, and the routes
a port gets there: the subnet's default route and the metadata hop on the instance's first interface, and each
subnet's host routes; one route a destination (the last wins), none whose next hop is the port's own address (it
leads nowhere, and the kernel refuses it for IPv6)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

METADATA_ROUTE = "169.254.169.254/32"
VM_DEVICE_PREFIX = "tap"
NIC_NAME_LEN = 14  # Nova's (nova/network/model.py): the tap is "tap" + the port id, cut to 14 characters


def vm_device(port_id: str) -> str:
    """The host device of a VM's NIC, named as Nova names it (`tap` + the port id, 14 characters): the VMM opens
    it, the dataplane made it."""
    return (VM_DEVICE_PREFIX + port_id)[:NIC_NAME_LEN]


def ifname_at(given: str | None, position: int) -> str:
    """An interface's name inside its instance's namespace: the one the runtime gave, else eth<position>."""
    return given or f"eth{position}"


def device_name(inst: Mapping[str, Any], position: int) -> str:
    """The name of the instance's interface at `position`, from the desired state (`ifnames`, in port order)."""
    given = inst.get("ifnames") or []
    return ifname_at(str(given[position]) if position < len(given) and given[position] else None, position)


def port_routes(
    fixed_ips: Iterable[Mapping[str, Any]],
    subnets: Mapping[str, Mapping[str, Any]],
    metadata_hops: Mapping[str, str],
    default: bool,
) -> list[tuple[str, str]]:
    """(destination CIDR, next hop) in the order they are wanted. `subnets` by id (API or desired-state shape:
    gateway_ip, ip_version, host_routes); `metadata_hops`: the metadata port's IPv4 address by subnet id;
    `default`: the interface is the instance's first (it carries the default routes and the metadata hop)."""
    fixed_ips = list(fixed_ips)
    own = {ipaddress.ip_address(f["ip_address"]) for f in fixed_ips}
    wanted: dict[str, tuple[str, str]] = {}
    for f in fixed_ips:
        subnet = subnets.get(f["subnet_id"])
        if not subnet:
            continue
        found: list[tuple[str, str]] = []
        if default and subnet.get("gateway_ip"):
            found.append(("::/0" if subnet["ip_version"] == 6 else "0.0.0.0/0", subnet["gateway_ip"]))
        hop = metadata_hops.get(f["subnet_id"])
        if default and hop:
            found.append((METADATA_ROUTE, hop))
        found += [(r["destination"], r["nexthop"]) for r in subnet.get("host_routes") or []]
        for dst, gw in found:
            dst_net, hop_ip = ipaddress.ip_network(dst, strict=False), ipaddress.ip_address(gw)
            if hop_ip not in own:
                wanted[str(dst_net)] = (str(dst_net), str(hop_ip))
    return list(wanted.values())
