"""A router's NAT in nftables: forwards (DNAT through maps), hairpin, and outbound SNAT.

Lookups go through concatenated `daddr . dport` maps, so a new connection costs the same whatever
the number of forwards. The table's rules change rarely; its map elements change with every forward.
The driver keeps what it last applied (a shadow) per namespace: a forward change becomes a handful of
`add element`/`delete element` commands in one transaction, never a rewrite of everything, and never
an `nft list` on the way.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cloudnet.dataplane.linux import nft

TABLE = "cloudnet"
FAMILIES = {4: ("ip", "ipv4_addr"), 6: ("ip6", "ipv6_addr")}
PROTOCOLS = ("tcp", "udp")


def _ranges(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        if part:
            lo, _, hi = part.partition("-")
            out.append((int(lo), int(hi or lo)))
    return out


def _ports(ranges: Iterable[tuple[int, int]]) -> list[int]:
    return [p for lo, hi in ranges for p in range(lo, hi + 1)]


def _span(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


Elements = dict[str, set[str]]  # map name -> element texts


def forward_elements(fwd: dict[str, Any]) -> tuple[int, Elements]:
    """The map elements of one forward (and its IP version), with LXD's range compression:
    consecutive listen ports become one interval when they all go to one target port, or when no
    target port is given (ports kept); index-wise mappings are one element a port. Single ports go to
    hash maps (O(1) to change whatever their number); only true ranges need interval maps."""
    listen = fwd["listen_address"]
    version = ipaddress.ip_address(listen).version
    els: Elements = {}

    def add(name: str, lo: int, hi: int, value: str) -> None:
        key = f"{name}_range" if lo != hi else name
        els.setdefault(key, set()).add(f"{listen} . {_span(lo, hi)} : {value}")

    default = (fwd.get("config") or {}).get("target_address")
    if default:
        els.setdefault("fwd_default", set()).add(f"{listen} : {default}")
    for port in fwd.get("ports") or []:
        proto, target = port["protocol"], port["target_address"]
        listen_ranges = _ranges(port["listen_port"])
        target_ports = _ports(_ranges(port["target_port"])) if port.get("target_port") else None
        if target_ports is None:
            for lo, hi in listen_ranges:
                add(f"fwd_keep_{proto}", lo, hi, target)
        elif len(target_ports) == 1:
            for lo, hi in listen_ranges:
                add(f"fwd_{proto}", lo, hi, f"{target} . {target_ports[0]}")
        else:
            for p, tp in zip(_ports(listen_ranges), target_ports, strict=True):
                add(f"fwd_{proto}", p, p, f"{target} . {tp}")
    return version, els


@dataclass(frozen=True)
class Structure:
    """What the table's chains say (everything but map elements)."""

    version: int
    gateway_if: str | None
    internal: tuple[str, ...]  # CIDRs behind the router
    snat: tuple[tuple[tuple[str, ...], str], ...]  # (source CIDRs, address), most specific first
    default_snat: str | None  # the router's external address

    def render(self) -> str:
        addr_type = FAMILIES[self.version][1]
        ipk = "ip" if self.version == 4 else "ip6"
        lines = []
        for proto in PROTOCOLS:
            for name, value in ((f"fwd_{proto}", f"{addr_type} . inet_service"), (f"fwd_keep_{proto}", addr_type)):
                lines.append(f"    map {name} {{ type {addr_type} . inet_service : {value}; }}")
                lines.append(f"    map {name}_range {{ type {addr_type} . inet_service : {value}; flags interval; }}")
        lines.append(f"    map fwd_default {{ type {addr_type} : {addr_type}; }}")
        dnat = [
            f"        dnat {ipk} to {ipk} daddr . {proto} dport map @{name}"
            for proto in PROTOCOLS
            for name in (f"fwd_{proto}", f"fwd_{proto}_range", f"fwd_keep_{proto}", f"fwd_keep_{proto}_range")
        ]
        dnat.append(f"        dnat {ipk} to {ipk} daddr map @fwd_default")  # after the port-specific ones
        rules = "\n".join(dnat)
        lines.append(_chain("prerouting", "type nat hook prerouting priority dstnat; policy accept;", rules))
        lines.append(_chain("output", "type nat hook output priority -100; policy accept;", rules))
        post = []
        gw = self.gateway_if or "-"
        if self.internal:
            inside = ", ".join(self.internal)
            # Hairpin: an instance reaching a forward of its own network (the target included) must see
            # the reply come back through the router, so such connections are masqueraded.
            post.append(f'        ct status dnat {ipk} saddr {{ {inside} }} oifname != "{gw}" masquerade')
        if self.gateway_if:
            for sources, address in self.snat:
                post.append(f'        oifname "{gw}" {ipk} saddr {{ {", ".join(sources)} }} snat {ipk} to {address}')
            if self.default_snat and self.internal:
                inside = ", ".join(self.internal)
                post.append(f'        oifname "{gw}" {ipk} saddr {{ {inside} }} snat {ipk} to {self.default_snat}')
        lines.append(
            _chain("postrouting", "type nat hook postrouting priority srcnat; policy accept;", "\n".join(post))
        )
        return "\n".join(lines)


def _chain(name: str, hook: str, body: str) -> str:
    return f"    chain {name} {{\n        {hook}\n{body}\n    }}"


class NatTables:
    """Applies router NAT per namespace, incrementally against what it applied before.

    The shadow is kept per forward (id and revision), so a change costs the elements of the forwards
    that changed, not a pass over all of them.
    """

    def __init__(self) -> None:
        self._structures: dict[tuple[str, int], Structure] = {}
        # namespace -> forward key -> (version, elements)
        self._forwards: dict[str, dict[tuple[str, int], tuple[int, Elements]]] = {}

    def forget(self, namespace: str) -> None:
        nft.forget(namespace)
        self._forwards.pop(namespace, None)
        for key in [k for k in self._structures if k[0] == namespace]:
            del self._structures[key]

    def apply(self, namespace: str, structures: dict[int, Structure], forwards: list[dict[str, Any]]) -> int:
        """Converge both families' tables; returns how many map elements were added or deleted."""
        applied = self._forwards.get(namespace, {})
        wanted_keys = {(f["id"], f["revision_number"]): f for f in forwards}
        rebuild = [v for v in (4, 6) if self._structures.get((namespace, v)) != structures[v]]
        if rebuild:  # chains changed: replace those tables whole, with all their elements
            elements = {k: applied[k] if k in applied else forward_elements(f) for k, f in wanted_keys.items()}
            script = []
            for version in rebuild:
                family = FAMILIES[version][0]
                script += [f"table {family} {TABLE} {{}}", f"delete table {family} {TABLE}",
                           f"table {family} {TABLE} {{\n{structures[version].render()}\n}}"]  # fmt: skip
                merged: Elements = {}
                for v, els in elements.values():
                    if v == version:
                        for name, values in els.items():
                            merged.setdefault(name, set()).update(values)
                script += [_element_cmd("add", family, n, vals) for n, vals in sorted(merged.items()) if vals]
            # Forwards of families whose tables stay must still be diffed below.
            kept = {k: e for k, e in elements.items() if e[0] not in rebuild}
            applied = {k: e for k, e in applied.items() if e[0] not in rebuild and k in kept}
            changes = self._diff_commands(applied, kept)
            nft.run(namespace, "\n".join(script + changes[0]) + "\n")
            for version in rebuild:
                self._structures[(namespace, version)] = structures[version]
            self._forwards[namespace] = elements
            return changes[1] + sum(len(vals) for v, els in elements.values() if v in rebuild for vals in els.values())
        new = {k: forward_elements(f) for k, f in wanted_keys.items() if k not in applied}
        target = {k: applied[k] if k in applied else new[k] for k in wanted_keys}
        commands, count = self._diff_commands(applied, target)
        if commands:
            nft.run(namespace, "\n".join(commands) + "\n")
        self._forwards[namespace] = target
        return count

    @staticmethod
    def _diff_commands(
        before: dict[tuple[str, int], tuple[int, Elements]], after: dict[tuple[str, int], tuple[int, Elements]]
    ) -> tuple[list[str], int]:
        """delete/add element commands for forwards that went away or appeared (a changed forward is both)."""
        gone: dict[tuple[int, str], set[str]] = {}
        added: dict[tuple[int, str], set[str]] = {}
        for key in before.keys() - after.keys():
            version, els = before[key]
            for name, values in els.items():
                gone.setdefault((version, name), set()).update(values)
        for key in after.keys() - before.keys():
            version, els = after[key]
            for name, values in els.items():
                added.setdefault((version, name), set()).update(values)
        commands = []
        count = 0
        for (version, name), values in sorted(gone.items()):
            values = values - added.get((version, name), set())
            if values:
                commands.append(_element_cmd("delete", FAMILIES[version][0], name, values, keys_only=True))
                count += len(values)
        for (version, name), values in sorted(added.items()):
            values = values - gone.get((version, name), set())
            if values:
                commands.append(_element_cmd("add", FAMILIES[version][0], name, values))
                count += len(values)
        return commands, count


def _element_cmd(verb: str, family: str, name: str, values: Iterable[str], keys_only: bool = False) -> str:
    items = sorted(v.split(" : ")[0] if keys_only else v for v in values)
    return f"{verb} element {family} {TABLE} {name} {{ {', '.join(items)} }}"
