"""Routes and neighbour entries, converged from the desired state: what is missing is added, what is stale goes.

cloudnet's routes carry a protocol number of their own (PROTO, `ip route` shows "proto 149"), so that in an
instance's namespace they are told from routes anyone else added there; in a router namespace every route but
the kernel's own is cloudnet's. Neighbour entries are the kernel's cache: cloudnet adds none, but entries on a
router's internal legs that name no port of this host (a deleted instance), or a port under another MAC (an
address given to a new port), would send traffic astray and are never collected by the kernel below its garbage
threshold, so they are dropped.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

PROTO = 149  # rtm_protocol of the routes cloudnet adds
RTPROT_KERNEL, RTPROT_RA = 2, 9
RTN_UNICAST = 1
MAIN_TABLE = 254
NUD_PERMANENT, NUD_NOARP = 0x80, 0x40

# (family, destination CIDR, gateway or None, output interface index)
Route = tuple[int, str, str | None, int]


def route(destination: str, gateway: str | None, oif: int) -> Route:
    dst = ipaddress.ip_network(destination, strict=False)
    family = socket.AF_INET6 if dst.version == 6 else socket.AF_INET
    return family, str(dst), str(ipaddress.ip_address(gateway)) if gateway else None, oif


def _key(msg: Any) -> Route:
    family = msg["family"]
    dst = msg.get_attr("RTA_DST") or ("::" if family == socket.AF_INET6 else "0.0.0.0")
    gateway = msg.get_attr("RTA_GATEWAY")
    cidr = str(ipaddress.ip_network(f"{dst}/{msg['dst_len']}", strict=False))
    return family, cidr, str(ipaddress.ip_address(gateway)) if gateway else None, int(msg.get_attr("RTA_OIF") or 0)


def cloudnets(msg: Any) -> bool:
    """A route cloudnet added (in a namespace where others may add routes too)."""
    return bool(msg["proto"] == PROTO)


def not_the_kernels(msg: Any) -> bool:
    """Any route but the kernel's own (in a namespace that is cloudnet's whole)."""
    return msg["proto"] not in (RTPROT_KERNEL, RTPROT_RA)


def converge(
    ipr: IPRoute, wanted: Iterable[Route], *, mine: Callable[[Any], bool], oifs: set[int] | None = None,
    read: bool = True,
) -> list[str]:  # fmt: skip
    """Make the main table hold `wanted` and none of its own routes (`mine`) besides, on the interfaces `oifs`
    (None: all). `read` False: the interfaces were just made, none of their routes can exist yet. Returns what
    differed (empty when nothing was read)."""
    want = set(wanted)
    found: list[str] = []
    have: set[Route] = set()
    if read:
        for family in (socket.AF_INET, socket.AF_INET6):
            for msg in ipr.get_routes(family=family, table=MAIN_TABLE):
                if msg["type"] != RTN_UNICAST or msg.get_attr("RTA_TABLE", MAIN_TABLE) != MAIN_TABLE or not mine(msg):
                    continue
                key = _key(msg)
                if oifs is not None and key[3] not in oifs:
                    continue
                have.add(key)
                if key not in want:
                    found.append(f"stale route {_describe(key)}")
                    _delete(ipr, key)
    for key in sorted(want - have, key=str):
        if read:
            found.append(f"missing route {_describe(key)}")
        family, dst, gateway, oif = key
        ipr.route("replace", dst=dst, gateway=gateway, oif=oif, family=family, proto=PROTO)
    return found


def _delete(ipr: IPRoute, key: Route) -> None:
    family, dst, gateway, oif = key
    try:
        ipr.route("del", dst=dst, gateway=gateway, oif=oif, family=family, table=MAIN_TABLE)
    except NetlinkError as exc:
        if exc.code != 3:  # ESRCH: gone meanwhile
            raise


def _describe(key: Route) -> str:
    _family, dst, gateway, oif = key
    return f"{dst}" + (f" via {gateway}" if gateway else "") + f" (interface {oif})"


def drop_stale_neighbours(ipr: IPRoute, oifs: set[int], known: dict[str, str]) -> list[str]:
    """Delete neighbour entries on `oifs` for addresses not in `known` (address -> MAC) or under another MAC;
    returns what went."""
    dropped = []
    for msg in ipr.get_neighbours():
        address, mac = msg.get_attr("NDA_DST"), msg.get_attr("NDA_LLADDR")
        if msg["ifindex"] not in oifs or not address or msg["state"] & (NUD_PERMANENT | NUD_NOARP):
            continue
        if ipaddress.ip_address(address).is_link_local:
            continue  # (IPv6 neighbour discovery between the legs' own link-local addresses)
        expected = known.get(str(ipaddress.ip_address(address)))
        if expected is not None and (not mac or mac.lower() == expected.lower()):
            continue
        why = "no port of this host has that address" if expected is None else f"its port's MAC is {expected}"
        try:
            ipr.neigh("del", dst=address, ifindex=msg["ifindex"], family=msg["family"])
            dropped.append(f"stale neighbour {address} at {mac or 'no address'} (interface {msg['ifindex']}): {why}")
        except NetlinkError as exc:
            if exc.code != 2:  # ENOENT: gone meanwhile
                raise
    return dropped
