"""One NB transaction that makes the rows cloudnet owns equal to the desired ones, and reports what differed.

The diff runs inside the transaction, on the IDL's replica of NB (ovsdbapp hands a command the IDL transaction on
its own thread; on TRY_AGAIN it runs the command again on the fresher replica), so a batch of changes is one
transaction whatever it holds. A row is cloudnet's when it has `external_ids:cloudnet:key`: such rows that the
database no longer implies (or duplicates of one key) are deleted, changed columns are set back, missing rows are
inserted and linked into their parent. Rows without the key are someone else's and are left alone.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ovsdbapp.backend.ovs_idl.command import BaseCommand

from cloudnet.northbound.rows import KEY, Row

TABLES = ("Logical_Switch", "Logical_Switch_Port", "Logical_Router", "Logical_Router_Port", "Gateway_Chassis",
          "Logical_Router_Static_Route", "NAT", "DHCP_Options", "Port_Group", "Address_Set", "ACL",
          "Load_Balancer")  # fmt: skip
# (parent table, column holding its children)
LINKS = (("Logical_Switch", "ports"), ("Logical_Router", "ports"), ("Logical_Router", "static_routes"),
         ("Logical_Router", "nat"), ("Logical_Router_Port", "gateway_chassis"), ("Logical_Switch", "acls"),
         ("Port_Group", "acls"))  # fmt: skip


@dataclass
class Report:
    """Keys of the rows a pass created or deleted, and the columns it set back on the others."""

    created: list[str] = field(default_factory=list)
    updated: dict[str, list[str]] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.created or self.updated or self.deleted)

    def summary(self, limit: int = 10) -> str:
        def few(items: list[str]) -> str:
            more = f", +{len(items) - limit} more" if len(items) > limit else ""
            return ", ".join(items[:limit]) + more

        changed = [f"{k} ({', '.join(c)})" for k, c in self.updated.items()]
        parts = [f"{len(self.created)} created [{few(self.created)}]" if self.created else "",
                 f"{len(changed)} updated [{few(changed)}]" if changed else "",
                 f"{len(self.deleted)} deleted [{few(self.deleted)}]" if self.deleted else ""]  # fmt: skip
        return "; ".join(p for p in parts if p) or "no difference"


def same(current: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict):
        return dict(current) == wanted
    if isinstance(wanted, list):
        return sorted(current, key=str) == sorted(wanted, key=str)
    return bool(current == wanted)


class ApplyRows(BaseCommand):  # type: ignore[misc]
    """The ovsdbapp command of a pass: its result is the Report."""

    def __init__(self, api: Any, rows: list[Row]) -> None:
        super().__init__(api)
        self.rows = rows

    def run_idl(self, txn: Any) -> None:
        self.result = apply(txn, self.api.tables, self.rows)


def apply(txn: Any, tables: dict[str, Any], rows: list[Row]) -> Report:
    report = Report()
    wanted: dict[str, Row] = {}
    for row in rows:
        wanted.setdefault(row.key, row)
    owned: dict[str, Any] = {}
    stale: list[tuple[str, Any]] = []
    for name in TABLES:
        for idl_row in list(tables[name].rows.values()):
            key = idl_row.external_ids.get(KEY)
            if key is None:
                continue
            spec = wanted.get(key)
            if spec is None or spec.table != name or key in owned:
                stale.append((key, idl_row))
            else:
                owned[key] = idl_row
    parent_of: dict[Any, tuple[Any, str]] = {}
    for table, column in LINKS:
        for parent in tables[table].rows.values():
            for child in getattr(parent, column):
                parent_of[child.uuid] = (parent, column)
    stale_ids = {idl_row.uuid for _key, idl_row in stale}

    resolved: dict[str, tuple[Any, bool]] = {}
    new_children: dict[tuple[Any, str], list[Any]] = defaultdict(list)
    new_parents: dict[Any, Any] = {}
    for spec in wanted.values():
        if spec.parent is not None and spec.parent not in resolved:
            continue  # (its parent was left out)
        idl_row = owned.get(spec.key)
        created = idl_row is None
        if created:
            idl_row = txn.insert(tables[spec.table])
            for column, value in spec.columns.items():
                setattr(idl_row, column, value)
            report.created.append(spec.key)
        else:
            changed = [c for c, v in spec.columns.items() if not same(getattr(idl_row, c), v)]
            for column in changed:
                setattr(idl_row, column, spec.columns[column])
            if changed:
                report.updated[spec.key] = changed
        resolved[spec.key] = (idl_row, created)
        if spec.parent is None:
            continue
        parent, parent_created = resolved[spec.parent]
        link = None if created else parent_of.get(idl_row.uuid)
        if link is not None and link[0].uuid == parent.uuid and link[1] == spec.parent_column:
            continue
        if link is not None and link[0].uuid not in stale_ids:
            link[0].delvalue(link[1], idl_row)
        if parent_created:  # a row inserted in this transaction gets the whole column (its values can't be read)
            new_children[(parent.uuid, spec.parent_column)].append(idl_row)
            new_parents[parent.uuid] = parent
        else:
            parent.addvalue(spec.parent_column, idl_row)
        if not created:
            report.updated.setdefault(spec.key, []).append("parent")
    for (parent_uuid, column), children in new_children.items():
        setattr(new_parents[parent_uuid], column, children)
    _set_refs(wanted, resolved, report)
    for key, idl_row in stale:
        link = parent_of.get(idl_row.uuid)
        if link is not None and link[0].uuid not in stale_ids:
            link[0].delvalue(link[1], idl_row)
        idl_row.delete()
        report.deleted.append(key)
    return report


def _set_refs(wanted: dict[str, Row], resolved: dict[str, tuple[Any, bool]], report: Report) -> None:
    """Point each row's reference columns at the rows of the keys it names (those left out are skipped)."""
    for spec in wanted.values():
        if not spec.refs or spec.key not in resolved:
            continue
        idl_row, created = resolved[spec.key]
        for column, keys in spec.refs.items():
            targets = [resolved[k][0] for k in keys if k in resolved]
            if not created and sorted(str(r.uuid) for r in getattr(idl_row, column)) == sorted(
                str(r.uuid) for r in targets
            ):
                continue
            setattr(idl_row, column, targets)
            if not created:
                report.updated.setdefault(spec.key, []).append(column)
