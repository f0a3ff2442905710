"""IP address management: next-fit allocation from a subnet's pools, uniqueness kept by the database.

The `ip_allocations` primary key (subnet_id, ip_address) is the source of truth: rows are inserted
with ON CONFLICT DO NOTHING, and an address another server process took first is simply replaced
by the next free one. A per-subnet cursor (a hint, process-local) makes the usual allocation O(1)
instead of a scan over every address already taken: the addresses after it are first inserted
without looking (`next_after_cursor`), and only those found taken are replaced by a scan (`find_free`).
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select

from cloudnet.errors import Conflict
from cloudnet.store import tables as t
from cloudnet.store.prepared import BulkInsert

A = t.ip_allocations
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# Most addresses examined per query while looking for free ones.
MAX_WINDOW = 4096
# Give up on a pool after this many candidates: only reachable for huge, nearly full IPv6 pools.
MAX_SCAN = 1 << 20
# Rounds of "pick free addresses, insert, replace those another transaction took first" before giving
# up. Each lost address is committed by someone else, so a pool that is not exhausted keeps yielding.
MAX_ATTEMPTS = 1000

_cursor: dict[str, int] = {}
# One scan at a time per subnet in this process: each starts after what the previous one picked (the
# cursor), so concurrent requests pick different addresses instead of all racing for the same one.
_scan_locks: dict[str, threading.Lock] = {}

AUTO_ADDRESS_MODES = frozenset({"slaac", "dhcpv6-stateless"})


def eui64(cidr: ipaddress.IPv6Network, mac: str) -> str:
    """The address a host with this MAC forms in a /64 by SLAAC (RFC 4291 appendix A: the universal/local bit
    flipped, ff:fe in the middle)."""
    octets = bytes.fromhex(mac.replace(":", "").replace("-", ""))
    iid = bytes([octets[0] ^ 0x02, *octets[1:3], 0xFF, 0xFE, *octets[3:6]])
    return str(ipaddress.IPv6Address(int(cidr.network_address) | int.from_bytes(iid, "big")))


@dataclass(frozen=True)
class SubnetInfo:
    id: str
    network_id: str
    cidr: ipaddress.IPv4Network | ipaddress.IPv6Network
    gateway_ip: str | None
    pools: tuple[tuple[int, int], ...]
    # SLAAC or DHCPv6-stateless addressing: a port's address is its MAC's EUI-64 in the prefix, what the guest forms
    # itself from the router advertisement (Neutron's automatic addresses).
    auto_address: bool = False

    @classmethod
    def from_row(cls, row: Any) -> SubnetInfo:
        pools = tuple(
            (int(ipaddress.ip_address(p["start"])), int(ipaddress.ip_address(p["end"]))) for p in row.allocation_pools
        )
        auto = getattr(row, "ipv6_address_mode", None) in AUTO_ADDRESS_MODES
        return cls(row.id, row.network_id, ipaddress.ip_network(row.cidr), row.gateway_ip, pools, auto)

    @property
    def version(self) -> int:
        return self.cidr.version

    def contains(self, ip: IPAddress) -> bool:
        return ip.version == self.version and ip in self.cidr

    def reserved(self, ip: IPAddress) -> bool:
        """The network address, or the IPv4 broadcast address: never assignable."""
        if ip == self.cidr.network_address:
            return self.cidr.prefixlen < self.cidr.max_prefixlen - (1 if self.version == 4 else 0)
        return self.version == 4 and ip == self.cidr.broadcast_address and self.cidr.prefixlen < 31


def _candidates(subnet: SubnetInfo) -> Iterator[int]:
    """Every pool address once: first those after the cursor, then wrapping round to the start."""
    pools = sorted(subnet.pools)
    cursor = _cursor.get(subnet.id, -1)
    for lo, hi in pools:
        if hi > cursor:
            yield from range(max(lo, cursor + 1), hi + 1)
    for lo, hi in pools:
        if lo > cursor:
            break
        yield from range(lo, min(hi, cursor) + 1)


def next_after_cursor(subnet: SubnetInfo, count: int, exclude: set[str]) -> list[str]:
    """Up to `count` pool addresses after the cursor, not yet checked against the allocations (usually free:
    insert them and replace whichever turn out taken). Moves the cursor past them."""
    make = ipaddress.IPv4Address if subnet.version == 4 else ipaddress.IPv6Address
    out: list[str] = []
    with _scan_locks.setdefault(subnet.id, threading.Lock()):
        for value in _candidates(subnet):
            text = str(make(value))
            if text != subnet.gateway_ip and text not in exclude:
                out.append(text)
                _cursor[subnet.id] = value
                if len(out) >= count:
                    break
    return out


def find_free(conn: Connection, subnet: SubnetInfo, count: int, exclude: set[str]) -> list[str]:
    """Up to `count` addresses of the pools that are not allocated (nor in `exclude`)."""
    with _scan_locks.setdefault(subnet.id, threading.Lock()):
        return _scan(conn, subnet, count, exclude)


def _scan(conn: Connection, subnet: SubnetInfo, count: int, exclude: set[str]) -> list[str]:
    found: list[str] = []
    window: list[int] = []
    make = ipaddress.IPv4Address if subnet.version == 4 else ipaddress.IPv6Address

    def flush() -> None:
        texts = [str(make(i)) for i in window]
        taken = {
            r[0]
            for r in conn.execute(select(A.c.ip_address).where(A.c.subnet_id == subnet.id, A.c.ip_address.in_(texts)))
        }
        for value, text in zip(window, texts, strict=True):
            if len(found) < count and text not in taken and text not in exclude and text != subnet.gateway_ip:
                found.append(text)
                _cursor[subnet.id] = value
        window.clear()

    # Next-fit usually finds the very next address free: start small, widen while scanning a taken stretch.
    size = min(count + 4, MAX_WINDOW)
    for scanned, value in enumerate(_candidates(subnet), 1):
        window.append(value)
        if len(window) >= size:
            flush()
            if len(found) >= count:
                break
            size = min(size * 2, MAX_WINDOW)
        if scanned >= MAX_SCAN:
            break
    if window and len(found) < count:
        flush()
    return found


_INSERT = BulkInsert(A, ["subnet_id", "ip_address", "network_id", "port_id"], conflict=[],
                     returning=["subnet_id", "ip_address"])  # fmt: skip


def insert_allocations(conn: Connection, rows: list[dict[str, str]]) -> set[tuple[str, str]]:
    """Insert allocation rows; returns the (subnet_id, ip_address) pairs that were already taken."""
    if not rows:
        return set()
    inserted = {(r[0], r[1]) for r in _INSERT.run(conn, rows)}
    return {(r["subnet_id"], r["ip_address"]) for r in rows} - inserted


def already_allocated(ip: str, network_id: str) -> Conflict:
    return Conflict(
        f"IP address {ip} already allocated in subnet on network {network_id}.",
        type="IpAddressAlreadyAllocated",
    )


def generation_failed(network_id: str) -> Conflict:
    return Conflict(
        f"No more IP addresses available on network {network_id}.",
        type="IpAddressGenerationFailure",
    )
