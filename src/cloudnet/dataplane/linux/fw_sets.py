"""Set elements of cloudnet's nftables firewall: rules as boxes made disjoint, and the text nft takes for them.

A rule is a box in a concatenated key: fixed values (a group number, a protocol, an ICMP type), at most one range
(destination ports, ICMP codes) and an address prefix. nftables' interval sets refuse an element whose start or end
lies inside another one (tcp 22 from 10.1.0.0/16 after tcp 20-30 from 10.0.0.0/8), so the boxes of one set are
reshaped first: prefixes are either nested or apart, so a box only loses the ranges of the boxes whose prefix
contains its own; the union stays the same and no two elements overlap. The result is canonical (the same rules
give the same elements), so applied and wanted sets are diffed as plain strings.
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from collections.abc import Iterable

from cloudnet.dataplane.security import IPNetwork

Span = tuple[int, int]
NetKey = tuple[int, int, int]  # (IP version, network address as an integer, prefix length)
Box = tuple[tuple[str, ...], Span | None, IPNetwork | None]  # fixed values (as nft text), range, prefix
BITS = {4: 32, 6: 128}


def _merge(spans: Iterable[Span]) -> list[Span]:
    """Overlapping ranges as one (adjacent ones stay apart: a rule added next to another is one element added)."""
    out: list[Span] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _subtract(spans: list[Span], cut: list[Span]) -> list[Span]:
    out = []
    for lo, hi in spans:
        for clo, chi in cut:
            if chi < lo or clo > hi:
                continue
            if clo > lo:
                out.append((lo, clo - 1))
            lo = chi + 1
            if lo > hi:
                break
        if lo <= hi:
            out.append((lo, hi))
    return out


def _key(net: IPNetwork) -> NetKey:
    return net.version, int(net.network_address), net.prefixlen


def disjoint(boxes: Iterable[Box]) -> list[tuple[tuple[str, ...], Span | None, NetKey | None]]:
    """The union of `boxes` as boxes no two of which overlap (see the module docstring)."""
    by_fixed: dict[tuple[str, ...], dict[NetKey | None, list[Span]]] = defaultdict(lambda: defaultdict(list))
    ranged: set[tuple[str, ...]] = set()
    for fixed, span, net in boxes:
        by_fixed[fixed][None if net is None else _key(net)].append(span or (0, 0))
        if span is not None:
            ranged.add(fixed)
    out: list[tuple[tuple[str, ...], Span | None, NetKey | None]] = []
    for fixed, nets in sorted(by_fixed.items()):
        merged = {k: _merge(v) for k, v in nets.items()}
        lengths = {v: sorted({k[2] for k in merged if k is not None and k[0] == v}) for v in BITS}
        for key, spans in sorted(merged.items(), key=lambda kv: kv[0] or (0, 0, -1)):
            if key is not None:
                version, address, length = key
                for shorter in lengths[version]:
                    if shorter >= length or not spans:
                        break
                    host_bits = BITS[version] - shorter
                    outer = merged.get((version, address >> host_bits << host_bits, shorter))
                    if outer is not None:
                        spans = _subtract(spans, outer)
            out += [(fixed, s if fixed in ranged else None, key) for s in spans]
    return out


def net_text(key: NetKey) -> str:
    version, address, length = key
    return f"{ipaddress.ip_address(address) if version == 4 else ipaddress.IPv6Address(address)}/{length}"


def span_text(span: Span) -> str:
    return str(span[0]) if span[0] == span[1] else f"{span[0]}-{span[1]}"


def elements(boxes: Iterable[Box]) -> set[str]:
    """The elements of an interval set holding `boxes`, as nft writes them (`fixed . range . prefix`)."""
    out = set()
    for fixed, span, key in disjoint(boxes):
        parts = list(fixed)
        if span is not None:
            parts.append(span_text(span))
        if key is not None:
            parts.append(net_text(key))
        out.add(" . ".join(parts))
    return out


def split(boxes: Iterable[Box]) -> tuple[set[str], set[str]]:
    """Elements for a pair of sets: single addresses (a hash set: cheap to change at any size) and prefixes (an
    interval set, which nft reads whole to delete an element from)."""
    exact, nets = set(), []
    for fixed, span, net in boxes:
        if span is None and net is not None and net.prefixlen == net.max_prefixlen:
            exact.add(" . ".join((*fixed, str(net.network_address))))
        else:
            nets.append((fixed, span, net))
    return exact, elements(nets)


def raw_addresses(prefix: str, nets: Iterable[IPNetwork]) -> tuple[set[str], set[str]]:
    """Elements `prefix . <address>` (a hash set) and `prefix . <first>-<last>` (an interval set), addresses as
    128-bit integers: the keys of a raw payload field, such as the target of a neighbour advertisement, which nft
    cannot type as an IPv6 address."""
    exact, ranges = set(), set()
    for net in ipaddress.collapse_addresses(n for n in nets if n.version == 6):  # type: ignore[arg-type,misc]
        first, last = int(net.network_address), int(net.broadcast_address)
        if first == last:
            exact.add(f"{prefix} . 0x{first:032x}")
        else:
            ranges.add(f"{prefix} . 0x{first:032x}-0x{last:032x}")
    return exact, ranges
