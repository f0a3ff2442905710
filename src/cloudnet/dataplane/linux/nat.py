"""A router's NAT in nftables, converged to what the desired state implies (nat_plan) so that no pass can fail
on what the kernel already holds, and no leftover outlives a pass that looks.

What was applied is kept per namespace (the shadow: the tables' structure, beside each forward's elements), with
the ruleset generation the kernel was at right after: every commit in a namespace increments it, so an unchanged
generation proves that nobody changed anything since.
A pass that finds it unchanged sends only the difference from the shadow (a forward change is a few element
commands in one transaction, whatever the number of forwards). Otherwise (a namespace seen for the first time
since the agent started, a failed transaction, a commit by someone else, a check asked for) the tables are read
back and the exact difference is applied: foreign or missing elements and values, and a table whose chains,
rules or maps differ in any way is rewritten whole. If even that fails, both of cloudnet's tables are rewritten
whole, atomically. Tables other than cloudnet's are none of its business.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from cloudnet import metrics
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux import nft, nft_state
from cloudnet.dataplane.linux.nat_plan import (
    FAMILIES,
    TABLE,
    Elements,
    Structure,
    element_commands,
    forward_elements,
    map_names,
    merge,
)

log = logging.getLogger(__name__)
SHOWN = 10  # elements named per map and kind of difference (the rest are counted)
ForwardKey = tuple[str, int, tuple[str, ...]]  # (id, revision_number, its targets no port holds)


@dataclass
class _Shadow:
    identity: tuple[int, int]  # the namespace file's (st_dev, st_ino): a namespace remade under its name differs
    generation: int | None  # the ruleset generation after cloudnet's last commit (None: not known to be ours)
    structures: dict[int, Structure] = field(default_factory=dict)


def _identity(namespace: str) -> tuple[int, int]:
    st = os.stat(netns.path_of(namespace))
    return st.st_dev, st.st_ino


class NatTables:
    """Applies router NAT per namespace. The elements of each forward are computed once per revision of it, so a
    change costs the elements of the forwards that changed, not a pass over all of them."""

    def __init__(self) -> None:
        self._shadows: dict[str, _Shadow] = {}
        self._forwards: dict[str, dict[ForwardKey, tuple[int, Elements]]] = {}
        self._empty: set[str] = set()  # namespaces just made: nothing to read back
        self._elements: dict[str, int] = {}  # namespace -> its forwards' elements (the metric's sum)

    def forget(self, namespace: str, *, new: bool = False) -> None:
        """Drop what is known of the namespace; `new`: it was just made, so it holds no tables at all."""
        nft.forget(namespace)
        self._shadows.pop(namespace, None)
        self._forwards.pop(namespace, None)
        self._counted(namespace, {})
        self._empty.discard(namespace)
        if new:
            self._empty.add(namespace)

    def apply(
        self, namespace: str, structures: dict[int, Structure], forwards: list[dict[str, Any]], *, check: bool = False
    ) -> list[str]:
        """Converge both IP versions' tables. Returns how the kernel differed from what it should have held
        (repaired by now); `check` reads it back even when the generation says nothing changed."""
        known = self._forwards.get(namespace, {})
        wanted = {(f["id"], f["revision_number"], tuple(f.get("idle", ()))): f for f in forwards}
        mine = {k: known[k] if k in known else forward_elements(f) for k, f in wanted.items()}
        shadow = self._trusted(namespace, check)
        found: list[str] = []
        if shadow is not None:
            try:
                self._apply_difference(namespace, shadow, structures, known, mine)
                self._forwards[namespace] = mine
                self._counted(namespace, mine)
                return []
            except nft.NftError as exc:
                log.warning("NAT of %s: a transaction failed (%s); reading the kernel back", namespace, exc)
                found.append(f"the kernel refused a change ({_first_line(exc)}): it held something else")
        desired = {v: merge(els for ver, els in mine.values() if ver == v) for v in (4, 6)}
        found += self._converge(namespace, structures, desired)
        self._forwards[namespace] = mine
        self._counted(namespace, mine)
        return found

    def _counted(self, namespace: str, mine: dict[ForwardKey, tuple[int, Elements]]) -> None:
        self._elements[namespace] = sum(len(items) for _v, els in mine.values() for items in els.values())
        if not self._elements[namespace]:
            del self._elements[namespace]
        metrics.FORWARD_ELEMENTS.set(sum(self._elements.values()))

    def _trusted(self, namespace: str, check: bool) -> _Shadow | None:
        """The shadow, if the kernel provably still holds it; else None (read it back)."""
        if namespace in self._empty:
            self._empty.discard(namespace)
            self._shadows[namespace] = _Shadow(_identity(namespace), nft.generation(namespace))
        shadow = self._shadows.get(namespace)
        if shadow is None or check or shadow.generation is None or shadow.identity != _identity(namespace):
            return None
        return shadow if nft.generation(namespace) == shadow.generation else None

    def _commit(self, namespace: str, commands: list[str], expected: int | None) -> int | None:
        """One transaction; the generation after it if it was the only commit since the generation `expected`
        (the one the caller based its commands on), else None."""
        before, after = nft.commit(namespace, "\n".join(commands) + "\n")
        return after if before == expected and after == before + 1 else None

    def _apply_difference(
        self, namespace: str, shadow: _Shadow, structures: dict[int, Structure],
        known: dict[ForwardKey, tuple[int, Elements]], mine: dict[ForwardKey, tuple[int, Elements]],
    ) -> None:  # fmt: skip
        commands: list[str] = []
        for version, structure in structures.items():
            if shadow.structures.get(version) != structure:
                commands += structure.rewrite_chains()
        gone: dict[tuple[int, str], dict[str, str]] = {}
        new: dict[tuple[int, str], dict[str, str]] = {}
        for key in known.keys() - mine.keys():
            version, els = known[key]
            for name, items in els.items():
                gone.setdefault((version, name), {}).update(items)
        for key in mine.keys() - known.keys():
            version, els = mine[key]
            for name, items in els.items():
                new.setdefault((version, name), {}).update(items)
        for version, name in sorted(gone.keys() | new.keys()):
            old, add = gone.get((version, name), {}), new.get((version, name), {})
            same = {k for k in old.keys() & add.keys() if old[k] == add[k]}  # (a forward changed elsewhere)
            family = FAMILIES[version][0]
            commands += element_commands("delete", family, name, {k: v for k, v in old.items() if k not in same})
            commands += element_commands("add", family, name, {k: v for k, v in add.items() if k not in same})
        if commands:
            expected, shadow.generation = shadow.generation, None  # until the commit is known to be the only one
            shadow.generation = self._commit(namespace, commands, expected)
        shadow.structures = dict(structures)

    def _converge(self, namespace: str, structures: dict[int, Structure], desired: dict[int, Elements]) -> list[str]:
        """Read both tables back, apply the exact difference (a table that differs but for elements is rewritten
        whole); if that transaction fails, rewrite both. Returns the differences found."""
        before = nft.generation(namespace)
        found: list[str] = []
        commands: list[str] = []
        for version, structure in structures.items():
            family = structure.family
            have = nft_state.read(namespace, family)
            want = nft_state.expected(family, structure.render())
            wrong = ["missing"] if have is None else nft_state.differences(have, want)
            if have is None or wrong:
                found += [f"table {family} {TABLE}: {w}" for w in wrong]
                commands += _rewrite(structure, desired[version])
                continue
            for name in map_names():
                changes, described = _element_difference(have.elements.get(name, {}), desired[version].get(name, {}))
                found += [f"{family} {TABLE} map {name}: {d}" for d in described]
                commands += element_commands("delete", family, name, changes[0])
                commands += element_commands("add", family, name, changes[1])
        generation: int | None = before
        if commands:
            try:
                generation = self._commit(namespace, commands, before)
            except nft.NftError as exc:
                log.warning("NAT of %s: repair failed (%s); rewriting cloudnet's tables", namespace, exc)
                found.append(f"repairing failed ({_first_line(exc)}): tables rewritten whole")
                rewrite = [c for version, s in structures.items() for c in _rewrite(s, desired[version])]
                generation = nft.commit(namespace, "\n".join(rewrite) + "\n")[1]  # whatever it held: replaced whole
        elif nft.generation(namespace) != before:
            generation = None  # something was committed while reading: look again next time
        self._shadows[namespace] = _Shadow(_identity(namespace), generation, dict(structures))
        if found:
            log.warning("NAT of %s differed from the desired state (repaired): %s", namespace, "; ".join(found[:20]))
        return found


def _rewrite(structure: Structure, elements: Elements) -> list[str]:
    """Commands replacing the table whole, with its elements, in the transaction they are part of."""
    family = structure.family
    commands = [f"table {family} {TABLE} {{}}", f"delete table {family} {TABLE}",
                f"table {family} {TABLE} {{\n{structure.render()}\n}}"]  # fmt: skip
    for name, items in sorted(elements.items()):
        commands += element_commands("add", family, name, items)
    return commands


def _element_difference(
    kernel: dict[str, str], wanted: dict[str, str]
) -> tuple[tuple[dict[str, str], dict[str, str]], list[str]]:
    """((elements to delete, elements to add), what differed) between a map as the kernel holds it and as wanted."""
    stale = {k: kernel[k] for k in kernel.keys() - wanted.keys()}
    missing = {k: wanted[k] for k in wanted.keys() - kernel.keys()}
    changed = {k for k in kernel.keys() & wanted.keys() if kernel[k] != wanted[k]}
    described = []
    for label, items in (("stale", stale), ("missing", missing)):
        if items:
            shown = ", ".join(f"{k} : {items[k]}" for k in sorted(items)[:SHOWN])
            more = f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
            described.append(f"{len(items)} {label} element(s): {shown}{more}")
    if changed:
        shown = ", ".join(f"{k} : {kernel[k]} (not {wanted[k]})" for k in sorted(changed)[:SHOWN])
        described.append(f"{len(changed)} element(s) with another value: {shown}")
    delete = {**stale, **{k: kernel[k] for k in changed}}
    add = {**missing, **{k: wanted[k] for k in changed}}
    return (delete, add), described


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
