"""What the kernel really holds in one of cloudnet's nftables tables, read back through libnftables' JSON.

A table is compared in three parts: its declarations (chains with their hooks, sets and maps with their types,
and any other object someone added), the rules of each chain, and the elements of each set and map. Rules are
compared as the kernel lists them; what a structure's rules look like once listed is learned by applying it in a
throwaway network namespace of its own (`expected`, `scratch`), once per distinct structure, so that nothing is
assumed about how nft prints what it was given.
"""

from __future__ import annotations

import ipaddress
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, TypeVar

import nftables

from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux import nft
from cloudnet.dataplane.linux.nat_plan import TABLE

SHOWN = 10  # elements named per set and kind of difference (the rest are counted)
T = TypeVar("T")


@dataclass
class TableState:
    decls: dict[str, str] = field(default_factory=dict)  # "chain:NAME", "map:NAME", "set:NAME", ... -> its JSON
    rules: dict[str, list[str]] = field(default_factory=dict)  # chain -> its rules' expressions, in order
    elements: dict[str, dict[str, str]] = field(default_factory=dict)  # set or map -> {key: value ("" in a set)}


def read(namespace: str, family: str) -> TableState | None:
    """The table `family cloudnet` of the namespace as the kernel holds it; None when there is none."""
    document = nft.listing(namespace, f"list table {family} {TABLE}")
    return None if document is None else parse(document)


def parse(document: dict[str, Any]) -> TableState:
    state = TableState()
    for item in document.get("nftables", []):
        ((kind, body),) = item.items()
        if kind in ("metainfo", "table"):
            continue
        if kind == "rule":
            state.rules.setdefault(body["chain"], []).append(_canonical(body.get("expr", [])))
            continue
        decl = {k: v for k, v in body.items() if k not in ("family", "table", "handle", "elem")}
        state.decls[f"{kind}:{body.get('name')}"] = _canonical(decl)
        if kind == "chain":
            state.rules.setdefault(body["name"], [])
        if kind == "map":
            state.elements[body["name"]] = dict(_element(e) for e in body.get("elem", []))
        elif kind == "set" and "dynamic" not in (body.get("flags") or []):  # (a dynamic set's are the packets')
            state.elements[body["name"]] = {_text(e): "" for e in body.get("elem", [])}
    return state


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _element(item: Any) -> tuple[str, str]:
    key, value = item
    return _text(key), _text(value)


def _text(value: Any) -> str:
    """A key or value in nft's notation, as nat_plan writes them ("198.51.100.7 . 80", "10.0.0.5")."""
    if isinstance(value, dict):
        if "elem" in value:  # an element with options (a timeout, a comment): its value is under "val"
            return _text(value["elem"]["val"])
        if "concat" in value:
            return " . ".join(_text(part) for part in value["concat"])
        return _canonical(value)  # (a range or prefix: nothing cloudnet writes, compared as it is)
    if isinstance(value, str):
        try:
            return str(ipaddress.ip_address(value))
        except ValueError:
            return value
    return str(value)


def expected(family: str, body: str) -> TableState:
    """Declarations and rules of a table with this body, as the kernel lists them (no elements)."""
    return _expected(family, body)


@lru_cache(maxsize=256)
def _expected(family: str, body: str) -> TableState:
    def work(ctx: nftables.Nftables) -> TableState:
        command(ctx, f"table {family} {TABLE} {{\n{body}\n}}\n")
        return parse(listing(ctx, family))

    return scratch(work)


def scratch(work: Callable[[nftables.Nftables], T]) -> T:
    """`work` done with a libnftables context of a new, empty network namespace: a sandbox sharing nothing with
    any real table. (A thread of its own unshares it: the namespace goes away with the thread and the context.)"""
    found: list[T] = []
    errors: list[BaseException] = []

    def probe() -> None:
        try:
            netns.unshare()
            found.append(work(nftables.Nftables()))
        except BaseException as exc:  # handed to the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=probe, name="cloudnet-nft-probe", daemon=True)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return found[0]


def command(ctx: nftables.Nftables, script: str) -> None:
    """Run `script` as one transaction of the context; NftError when refused."""
    rc, _out, err = ctx.cmd(script)
    if rc != 0:
        raise nft.NftError(err.strip() or f"nft failed with status {rc}")


def listing(ctx: nftables.Nftables, family: str) -> dict[str, Any]:
    """The table `family cloudnet` of the context's namespace, as nft's JSON document."""
    ctx.set_json_output(True)
    try:
        rc, out, err = ctx.cmd(f"list table {family} {TABLE}")
    finally:
        ctx.set_json_output(False)
    if rc != 0:
        raise nft.NftError(err.strip())
    return json.loads(out)  # type: ignore[no-any-return]


def differences(have: TableState, want: TableState) -> list[str]:
    """How the table's declarations and rules differ from the wanted ones (elements aside)."""
    out = []
    for name in sorted(have.decls.keys() - want.decls.keys()):
        out.append(f"foreign {name.replace(':', ' ', 1)}")
    for name in sorted(want.decls.keys() - have.decls.keys()):
        out.append(f"missing {name.replace(':', ' ', 1)}")
    for name in sorted(want.decls.keys() & have.decls.keys()):
        if want.decls[name] != have.decls[name]:
            out.append(f"{name.replace(':', ' ', 1)} is declared otherwise")
    for chain in sorted(want.rules.keys() & have.rules.keys()):
        extra = len(have.rules[chain]) - len(want.rules[chain])
        if extra > 0 and all(r in have.rules[chain] for r in want.rules[chain]):
            out.append(f"{extra} foreign rule(s) in chain {chain}")
        elif have.rules[chain] != want.rules[chain]:
            out.append(f"the rules of chain {chain} differ")
    return out


def element_differences(have: TableState, want: TableState) -> list[str]:
    """How the elements of the table's sets and maps differ from the wanted ones."""
    out = []
    for name in sorted(have.elements.keys() & want.elements.keys()):
        kernel, wanted = have.elements[name], want.elements[name]
        for label, keys in (
            ("missing", wanted.keys() - kernel.keys()),
            ("stale", kernel.keys() - wanted.keys()),
            ("changed", {k for k in kernel.keys() & wanted.keys() if kernel[k] != wanted[k]}),
        ):
            if keys:
                more = f" and {len(keys) - SHOWN} more" if len(keys) > SHOWN else ""
                out.append(f"{len(keys)} {label} element(s) in {name}: {', '.join(sorted(keys)[:SHOWN])}{more}")
    return out
