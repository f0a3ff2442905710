"""What a router's NAT tables must hold, computed from the desired state alone: chains and map elements.

Forwards are map elements, looked up by `daddr . dport`. Every map is a hash map, so adding or removing an
element costs the same whatever the number of forwards (an interval map, `flags interval` on a concatenation,
is a pipapo set in the kernel: each change copies the whole set, and `nft` reads every element of it back to
delete one; bench/forward_shapes.py measured both). Port ranges are split into aligned blocks of 1, 16, 256
and 4096 ports, each looked up with the port masked to its block size: a range costs at most ~100 elements
whatever its width (as a CIDR is split into prefixes), and a lookup is one hash probe per block size.

Per IP version, the maps are:
- fwd_<proto>_<size>: listen address . first port of the block -> target address . target port (a single
  port, or many ports to one);
- keep_<proto>_<size>: the same keys -> target address, the port kept (ranges forwarded as they are);
- fwd_default: listen address -> target address (the forward's default target, every other port).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

TABLE = "cloudnet"
FAMILIES = {4: ("ip", "ipv4_addr"), 6: ("ip6", "ipv6_addr")}
PROTOCOLS = ("tcp", "udp")
BLOCKS = (4096, 256, 16, 1)  # port block sizes, largest first
DEFAULT_MAP = "fwd_default"

Elements = dict[str, dict[str, str]]  # map name -> {key: value}, in nft's own notation


def map_names() -> list[str]:
    names = [f"fwd_{proto}_{size}" for proto in PROTOCOLS for size in BLOCKS]
    names += [f"keep_{proto}_{size}" for proto in PROTOCOLS for size in BLOCKS if size > 1]
    return [*sorted(names), DEFAULT_MAP]


def _ranges(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        if part:
            lo, _, hi = part.partition("-")
            out.append((int(lo), int(hi or lo)))
    return out


def blocks(lo: int, hi: int) -> Iterator[tuple[int, int]]:
    """[lo, hi] as aligned blocks (first port, size), largest possible first."""
    port = lo
    while port <= hi:
        size = next(s for s in BLOCKS if port % s == 0 and port + s - 1 <= hi)
        yield port, size
        port += size


def forward_elements(fwd: dict[str, Any]) -> tuple[int, Elements]:
    """The map elements of one forward, and its IP version. No two forwards share a key: a listen address
    belongs to one forward, and a forward's listen ports are distinct per protocol."""
    listen = str(ipaddress.ip_address(fwd["listen_address"]))
    version = ipaddress.ip_address(listen).version
    els: Elements = {}
    default = (fwd.get("config") or {}).get("target_address")
    if default:
        els[DEFAULT_MAP] = {listen: str(ipaddress.ip_address(default))}
    for port in fwd.get("ports") or []:
        proto, target = port["protocol"], str(ipaddress.ip_address(port["target_address"]))
        listen_ranges = _ranges(port["listen_port"])
        target_ports = [p for lo, hi in _ranges(port.get("target_port") or "") for p in range(lo, hi + 1)]
        if len(target_ports) > 1:  # index-wise: one element a port
            listen_ports = [p for lo, hi in listen_ranges for p in range(lo, hi + 1)]
            for p, tp in zip(listen_ports, target_ports, strict=True):
                els.setdefault(f"fwd_{proto}_1", {})[f"{listen} . {p}"] = f"{target} . {tp}"
            continue
        for lo, hi in listen_ranges:
            for first, size in blocks(lo, hi):
                if target_ports:  # many to one
                    els.setdefault(f"fwd_{proto}_{size}", {})[f"{listen} . {first}"] = f"{target} . {target_ports[0]}"
                elif size == 1:  # the port kept, said explicitly
                    els.setdefault(f"fwd_{proto}_1", {})[f"{listen} . {first}"] = f"{target} . {first}"
                else:
                    els.setdefault(f"keep_{proto}_{size}", {})[f"{listen} . {first}"] = target
    return version, els


def merge(parts: Iterable[Elements]) -> Elements:
    out: Elements = {}
    for els in parts:
        for name, items in els.items():
            out.setdefault(name, {}).update(items)
    return out


@dataclass(frozen=True)
class Structure:
    """What the table's chains say (everything but map elements)."""

    version: int
    gateway_if: str | None
    internal: tuple[str, ...]  # CIDRs behind the router
    snat: tuple[tuple[tuple[str, ...], str], ...]  # (source CIDRs, address), most specific first
    default_snat: str | None  # the router's external address
    # Internal CIDRs in the external subnet's address scope: routed out with their own addresses, not SNATed.
    routed: tuple[str, ...] = ()
    # Address scopes (Neutron's L3 agent): per interface, the interfaces a new connection entering it may leave by
    # (its scope's, and the gateway while SNAT takes the others out); empty while the router has one scope.
    scopes: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def family(self) -> str:
        return FAMILIES[self.version][0]

    def maps(self) -> str:
        addr = FAMILIES[self.version][1]
        lines = []
        for name in map_names():
            if name == DEFAULT_MAP:
                lines.append(f"    map {name} {{ type {addr} : {addr}; }}")
            else:
                value = f"{addr} . inet_service" if name.startswith("fwd_") else addr
                lines.append(f"    map {name} {{ type {addr} . inet_service : {value}; }}")
        return "\n".join(lines)

    def chains(self) -> dict[str, tuple[str, list[str]]]:
        """Chain name -> (its hook line, its rules)."""
        ipk = self.family
        dnat = []
        for name in map_names():
            if name == DEFAULT_MAP:
                continue
            _kind, proto, size = name.split("_")
            mask = 0x10000 - int(size)
            port = f"{proto} dport" if size == "1" else f"({proto} dport & {mask:#06x})"
            dnat.append(f"dnat {ipk} to {ipk} daddr . {port} map @{name}")
        dnat.append(f"dnat {ipk} to {ipk} daddr map @{DEFAULT_MAP}")  # after the port-specific ones
        post = []
        gw = self.gateway_if or "-"
        if self.internal:
            inside = ", ".join(self.internal)
            # Hairpin: an instance reaching a forward of its own network (the target included) must see
            # the reply come back through the router, so such connections are masqueraded.
            post.append(f'ct status dnat {ipk} saddr {{ {inside} }} oifname != "{gw}" masquerade')
        if self.gateway_if:
            for sources, address in self.snat:
                post.append(f'oifname "{gw}" {ipk} saddr {{ {", ".join(sources)} }} snat {ipk} to {address}')
            natted = [c for c in self.internal if c not in self.routed]
            if self.default_snat and natted:
                post.append(f'oifname "{gw}" {ipk} saddr {{ {", ".join(natted)} }} snat {ipk} to {self.default_snat}')
        return {
            "prerouting": ("type nat hook prerouting priority dstnat; policy accept;", dnat),
            "output": ("type nat hook output priority -100; policy accept;", dnat),
            "postrouting": ("type nat hook postrouting priority srcnat; policy accept;", post),
            "scope": ("type filter hook forward priority filter; policy accept;", self.scope_rules()),
        }

    def scope_rules(self) -> list[str]:
        """New connections that would cross from one address scope into another are dropped; replies and what a
        forward (floating IP) let in pass, as Neutron's marks and connmarks let them."""
        if not self.scopes:
            return []
        rules = ["ct state != new accept", "ct status dnat accept"]
        for inside, allowed in self.scopes:
            names = ", ".join(f'"{n}"' for n in allowed)
            rules.append(f'iifname "{inside}" oifname != {{ {names} }} drop')
        return rules

    def render(self) -> str:
        """The table's body: its maps and chains."""
        parts = [self.maps()]
        for name, (hook, rules) in self.chains().items():
            body = "\n".join(f"        {r}" for r in rules)
            parts.append(f"    chain {name} {{\n        {hook}\n{body}\n    }}")
        return "\n".join(parts)

    def rewrite_chains(self) -> list[str]:
        """Commands that make the chains say this whatever they said (the maps left as they are)."""
        commands = [f"table {self.family} {TABLE} {{\n{self.maps()}\n}}"]  # (adds what is missing only)
        for name, (hook, rules) in self.chains().items():
            commands.append(f"add chain {self.family} {TABLE} {name} {{ {hook} }}")
            commands.append(f"flush chain {self.family} {TABLE} {name}")
            commands += [f"add rule {self.family} {TABLE} {name} {r}" for r in rules]
        return commands


def element_commands(verb: str, family: str, name: str, items: dict[str, str], chunk: int = 5000) -> list[str]:
    """`add element` (key : value) or `delete element` (keys only) commands, in chunks."""
    texts = sorted(items) if verb == "delete" else sorted(f"{k} : {v}" for k, v in items.items())
    return [f"{verb} element {family} {TABLE} {name} {{ {', '.join(texts[i:i + chunk])} }}"
            for i in range(0, len(texts), chunk)]  # fmt: skip
