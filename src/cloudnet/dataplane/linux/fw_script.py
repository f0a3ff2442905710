"""nft scripts of the firewall: both tables written whole, or the difference between two sets of parts."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from cloudnet.dataplane.linux import fw_render, nft
from cloudnet.dataplane.linux.fw_render import TABLE, Element, Part

MAPS = frozenset({"ports", "zones", "egress_ports", "ingress_ports", "e_remote", "i_remote"})  # (deleted by key)


def _element_commands(verb: str, elements: Iterable[Element]) -> list[str]:
    grouped: dict[tuple[str, str], list[str]] = defaultdict(list)
    for family, name, text in elements:
        grouped[(family, name)].append(text.split(" : ")[0] if verb == "delete" and name in MAPS else text)
    return [f"{verb} element {family} {TABLE} {name} {{ {', '.join(sorted(texts))} }}"
            for (family, name), texts in sorted(grouped.items())]  # fmt: skip


def _chains(chains: Iterable[tuple[str, tuple[str, ...]]]) -> list[str]:
    body = [fw_render.chain(name, rules) for name, rules in chains]
    return [f"table inet {TABLE} {{\n" + "\n".join(body) + "\n}"] if body else []


def whole(parts: Mapping[str, Part]) -> str:
    """Both tables replaced by the skeleton and `parts`, in one transaction."""
    lines = [f"table {family} {TABLE} {{}}\ndelete table {family} {TABLE}" for family in ("bridge", "inet")]
    lines.append(fw_render.skeleton())
    lines += _chains(c for p in parts.values() for c in p.chains)
    lines += _element_commands("add", (e for p in parts.values() for e in p.elements))
    return "\n".join(lines) + "\n"


def diff(old: Mapping[str, Part], new: Mapping[str, Part]) -> str:
    """The commands that turn the parts `old` into `new` (empty when nothing changed): chains made or refilled
    first, then elements deleted and added, then chains no element points to any more deleted."""
    changed = [k for k in old.keys() | new.keys() if old.get(k) is not new.get(k) and old.get(k) != new.get(k)]
    if not changed:
        return ""
    empty = Part()
    old_chains = {n: r for k in changed for n, r in old.get(k, empty).chains}
    new_chains = {n: r for k in changed for n, r in new.get(k, empty).chains}
    gone: set[Element] = set().union(*(old.get(k, empty).elements for k in changed))
    added: set[Element] = set().union(*(new.get(k, empty).elements for k in changed))
    gone, added = gone - added, added - gone
    refill = {n: r for n, r in new_chains.items() if old_chains.get(n) != r}
    lines = [f"flush chain inet {TABLE} {n}" for n in sorted(refill) if n in old_chains]
    lines += _chains(sorted(refill.items()))
    lines += _element_commands("delete", gone) + _element_commands("add", added)
    lines += [f"delete chain inet {TABLE} {n}" for n in sorted(old_chains.keys() - new_chains.keys())]
    return "\n".join(lines) + "\n"


def listed(namespace: str, what: str, name: str) -> list[Any]:
    """The elements of a set or map of ours (`what`: "map bridge", "set inet", ...), as nft's JSON gives them
    (none when the table is not there)."""
    kind, family = what.split()
    answer = nft.listing(namespace, f"list {kind} {family} {TABLE} {name}") or {}
    for item in answer.get("nftables", []):
        if kind in item:
            return list(item[kind].get("elem", []))
    return []
