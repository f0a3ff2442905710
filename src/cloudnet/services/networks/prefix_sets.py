"""Sets of addresses as sorted integer ranges, and the CIDRs that cover them: what subnet pools are made of
(Neutron uses netaddr's IPSet for the same; integers keep an allocation among 10,000 prefixes cheap)."""

from __future__ import annotations

import bisect
import ipaddress
from collections.abc import Iterable, Iterator

Range = tuple[int, int]  # first and last address, inclusive
BITS = {4: 32, 6: 128}


def hexed(n: int) -> str:
    """An address as 32 hex digits: sorts as the number does, IPv6 included."""
    return f"{n:032x}"


def cidr_range(text: str) -> tuple[int, Range]:
    net = ipaddress.ip_network(text)
    return net.version, (int(net.network_address), int(net.broadcast_address))


def merged(ranges: Iterable[Range]) -> list[Range]:
    """The union, sorted, adjacent and overlapping ranges joined."""
    out: list[Range] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def minus(ranges: list[Range], taken: list[Range]) -> list[Range]:
    """`ranges` less `taken` (both sorted and merged)."""
    out: list[Range] = []
    j = 0
    for a, b in ranges:
        while j < len(taken) and taken[j][1] < a:
            j += 1
        k, start = j, a
        while k < len(taken) and taken[k][0] <= b:
            if taken[k][0] > start:
                out.append((start, taken[k][0] - 1))
            start = max(start, taken[k][1] + 1)
            k += 1
        if start <= b:
            out.append((start, b))
    return out


def size(ranges: list[Range]) -> int:
    return sum(b - a + 1 for a, b in ranges)


def overlaps(a: list[Range], b: list[Range]) -> bool:
    """Whether the two (sorted, merged) sets share an address."""
    return size(minus(a, b)) != size(a)


def blocks(first: int, last: int, bits: int) -> Iterator[tuple[int, int]]:
    """The fewest CIDRs covering first..last, in address order, as (network address, prefix length)."""
    while first <= last:
        size = first & -first if first else 1 << bits
        while size > last - first + 1:
            size >>= 1
        yield first, bits - size.bit_length() + 1
        first += size


def cidrs(ranges: Iterable[Range], version: int) -> list[str]:
    bits = BITS[version]
    make = ipaddress.IPv4Network if version == 4 else ipaddress.IPv6Network
    return [str(make((net, plen))) for a, b in ranges for net, plen in blocks(a, b, bits)]


def best_fit(free: list[Range], prefixlen: int, bits: int) -> int | None:
    """Where a /prefixlen goes, as Neutron's allocator picks it: in the smallest free CIDR that holds it (ties: the
    lowest address), at that CIDR's start. None when no free CIDR is big enough."""
    best: tuple[int, int] | None = None  # (-block prefix length, address)
    for a, b in free:
        for net, plen in blocks(a, b, bits):
            if plen <= prefixlen and (best is None or (-plen, net) < best):
                best = (-plen, net)
                if plen == prefixlen:
                    break
    return None if best is None else best[1]


def contains(free: list[Range], want: Range) -> bool:
    """Whether `want` lies wholly inside one range of `free` (sorted, merged)."""
    i = bisect.bisect_right(free, (want[0], 1 << 130)) - 1
    return i >= 0 and free[i][0] <= want[0] and want[1] <= free[i][1]
