"""Reading a sandbox's NB database through ovn-nbctl (the real client), rows decoded from OVSDB's JSON."""

from __future__ import annotations

import json
from typing import Any

from tests.support.ovn import OvnSandbox


def decode(raw: Any) -> Any:
    if isinstance(raw, list) and len(raw) == 2 and raw[0] in ("map", "set", "uuid"):
        kind, inner = raw
        if kind == "map":
            return {k: decode(v) for k, v in inner}
        if kind == "set":
            return [decode(v) for v in inner]
        return inner
    return raw


def rows(ovn: OvnSandbox, table: str) -> list[dict[str, Any]]:
    data = json.loads(ovn.nbctl("--format=json", "list", table))
    return [dict(zip(data["headings"], [decode(v) for v in row], strict=True)) for row in data["data"]]


def by_name(ovn: OvnSandbox, table: str) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in rows(ovn, table)}


def as_list(value: Any) -> list[Any]:
    """A set column: ovn-nbctl prints a one-element set as the bare value."""
    return value if isinstance(value, list) else [value]


def keyed(ovn: OvnSandbox, table: str) -> dict[str, dict[str, Any]]:
    """Rows cloudnet owns, by their cloudnet:key."""
    return {r["external_ids"]["cloudnet:key"]: r for r in rows(ovn, table) if "cloudnet:key" in r["external_ids"]}
