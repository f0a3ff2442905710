"""Big map columns (a load balancer's VIPs: one per forwarded port, 10,000 in one row) kept out of the `ovs` IDL's
conversion.

The IDL turns every element of a column into typed atoms on write (Datum.from_python, then to_json) and again on the
echo of the commit (Datum.from_json): for one 10,000-VIP load balancer that was most of a pass. The NB IDL
(mirror.NbIdl) takes the columns named in BIG_MAPS out of each update2/update3 before the IDL parses it and keeps
their value on the IDL row as a plain dict of strings (`take`, `keep`), applying the update's differences itself;
the writer reads them with `value` and writes them with raw OVSDB operations added to its transaction (`put`,
`change`), built from the dicts as they are. The columns stay monitored: a change made behind the writer's back
arrives like any other, and NbIdl records it as a change of that column.
"""

from __future__ import annotations

import uuid
from typing import Any

from ovs.db.idl import _uuid_name_from_uuid  # (the name the IDL gives a row it inserts: "where" of a new row)

BIG_MAPS: dict[str, frozenset[str]] = {"Load_Balancer": frozenset({"vips"})}  # columns: maps of string to string
_KEPT = "_cloudnet_big"  # the IDL row's attribute holding {column: {key: value}}
VERSIONS = ("update2", "update3")

Taken = dict[tuple[str, uuid.UUID], tuple[str, dict[str, Any]]]  # (table, row) -> (update kind, {column: json})


def is_big(table: str, column: str) -> bool:
    return column in BIG_MAPS.get(table, ())


def take(tables: dict[str, Any], update: Any, version: str) -> Taken:
    """Pop the big columns out of an update2/update3 (`<table-updates>`), as they are; the rest is the IDL's."""
    taken: Taken = {}
    if version not in VERSIONS or not isinstance(update, dict):
        return taken
    for table, columns in BIG_MAPS.items():
        rows = update.get(table)
        if table not in tables or not isinstance(rows, dict):
            continue
        for row_id, row_update in rows.items():
            if not isinstance(row_update, dict) or len(row_update) != 1:
                continue  # (malformed: the IDL reports it)
            ((kind, values),) = row_update.items()
            if kind == "delete" or not isinstance(values, dict):
                continue
            try:
                key = (table, uuid.UUID(row_id))
            except ValueError:
                continue
            taken[key] = (kind, {c: values.pop(c) for c in columns if c in values})
    return taken


def _as_dict(json: Any) -> dict[str, str]:
    if not (isinstance(json, list) and len(json) == 2 and json[0] == "map" and isinstance(json[1], list)):
        raise ValueError(f"not an OVSDB map: {str(json)[:100]}")
    out: dict[str, str] = {}
    for pair in json[1]:
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and isinstance(pair[1], str)):
            raise ValueError(f"not a pair of strings: {str(pair)[:100]}")
        out[pair[0]] = pair[1]
    return out


def keep(tables: dict[str, Any], taken: Taken) -> dict[uuid.UUID, tuple[str, set[str]]]:
    """Put what `take` popped on the rows the IDL now holds (after it parsed the rest of the update); the columns a
    "modify" changed, by row. A value that is not a map of strings is dropped from the row (its `value` is then
    the IDL's, which never got it: a full compare writes it whole)."""
    changed: dict[uuid.UUID, tuple[str, set[str]]] = {}
    for (table, row_id), (kind, values) in taken.items():
        row = tables[table].rows.get(row_id)
        if row is None:
            continue
        if kind != "modify":  # initial, insert: the whole row (a map left out of it is empty)
            kept: dict[str, dict[str, str]] = {c: {} for c in BIG_MAPS[table]}
            row.__dict__[_KEPT] = kept
        else:
            kept = row.__dict__.setdefault(_KEPT, {})
            changed[row_id] = (table, set(values))
        for column, json in values.items():
            try:
                diff = _as_dict(json)
            except ValueError:
                kept.pop(column, None)
                continue
            if kind != "modify":
                kept[column] = diff
                continue
            if column not in kept:  # (its whole value went to the IDL: an update of another kind)
                kept[column] = dict(getattr(row, column))
            current = kept[column]
            for key, val in diff.items():  # (update2: a pair equal to the one held removes it, else it is set)
                if current.get(key) == val:
                    del current[key]
                else:
                    current[key] = val
    return changed


def forget(tables: dict[str, Any], update: Any) -> None:
    """Drop what was kept of the rows of an update of another kind (the IDL parsed their big maps whole)."""
    for table in BIG_MAPS:
        for row_id in update.get(table, {}) if isinstance(update, dict) and table in tables else ():
            try:
                row = tables[table].rows.get(uuid.UUID(row_id))
            except ValueError:
                continue
            if row is not None:
                row.__dict__.pop(_KEPT, None)


def value(row: Any, column: str) -> Any:
    """A column of an IDL row: a big map as kept, anything else as the IDL holds it."""
    kept = row.__dict__.get(_KEPT)
    if kept is not None and column in kept:
        return kept[column]
    return getattr(row, column)


def _where(row: Any) -> list[Any]:
    if row._data is None:  # (inserted by this transaction: named as the IDL names it in its insert)
        return [["_uuid", "==", ["named-uuid", _uuid_name_from_uuid(row.uuid)]]]
    return [["_uuid", "==", ["uuid", str(row.uuid)]]]


def put(txn: Any, row: Any, column: str, new: dict[str, str]) -> None:
    """Set a big map whole (raw operations run after the IDL's own, so a row inserted in `txn` exists by then)."""
    pairs = [[k, v] for k, v in new.items()]
    txn.add_op({"op": "update", "table": row._table.name, "where": _where(row), "row": {column: ["map", pairs]}})


def change(txn: Any, row: Any, column: str, old: dict[str, str], new: dict[str, str]) -> None:
    """Turn a big map NB is known to hold as `old` into `new` by its difference (a mutation: what changed only)."""
    gone = [k for k, v in old.items() if new.get(k) != v]
    added = [[k, v] for k, v in new.items() if old.get(k) != v]
    mutations: list[Any] = []
    if gone:  # (a retargeted key too: an insert leaves a key that is there as it is)
        mutations.append([column, "delete", ["set", gone]])
    if added:
        mutations.append([column, "insert", ["map", added]])
    if mutations:
        txn.add_op({"op": "mutate", "table": row._table.name, "where": _where(row), "mutations": mutations})
