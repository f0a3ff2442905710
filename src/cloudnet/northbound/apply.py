"""One NB transaction that makes the rows cloudnet owns equal to the desired ones, and reports what differed.

The diff runs inside the transaction, on the IDL's replica of NB (ovsdbapp hands a command the IDL transaction on
its own thread; on TRY_AGAIN it runs the command again on the fresher replica), so a batch of changes is one
transaction whatever it holds. A row is cloudnet's when it has `external_ids:cloudnet:key`: such rows that the
database no longer implies (or duplicates of one key) are deleted, changed columns are set back, missing rows are
inserted and linked into their parent. Rows without the key are someone else's and are left alone.

Big set columns (a Port_Group's thousands of ports, an Address_Set's addresses) are compared as the IDL holds them
(held()) and written by their difference: the IDL's conversion of such a column into Python costs more than the rest
of a pass. A pass told which specs changed (a hint) visits only the rows that may differ (_scope()).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ovsdbapp.backend.ovs_idl.command import BaseCommand

from cloudnet.northbound import bigmaps
from cloudnet.northbound.mirror import Changes, Mirror, Seen, touched
from cloudnet.northbound.rows import Row

TABLES = ("Logical_Switch", "Logical_Switch_Port", "Logical_Router", "Logical_Router_Port", "Gateway_Chassis",
          "Logical_Router_Static_Route", "NAT", "DHCP_Options", "Port_Group", "Address_Set", "ACL",
          "Load_Balancer", "QoS", "Logical_Router_Policy")  # fmt: skip
MUTATE_OVER = 64  # values: a bigger set or map column whose NB value is known is written by its difference
# (parent table, column holding its children)
LINKS = (("Logical_Switch", "ports"), ("Logical_Router", "ports"), ("Logical_Router", "static_routes"),
         ("Logical_Router", "nat"), ("Logical_Router_Port", "gateway_chassis"), ("Logical_Switch", "acls"),
         ("Port_Group", "acls"), ("Logical_Switch", "qos_rules"), ("Logical_Router", "policies"))  # fmt: skip
PARENTS: dict[str, set[str]] = {}  # parent table -> its columns of children
for _table, _column in LINKS:
    PARENTS.setdefault(_table, set()).add(_column)


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
    """The ovsdbapp command of a pass: its result is the Report. `mirror` carries what earlier passes found (a pass
    without one, or with `full`, reads and compares every row)."""

    def __init__(self, api: Any, rows: list[Row], mirror: Mirror | None = None, full: bool = True,
                 hint: set[str] | None = None) -> None:  # fmt: skip
        super().__init__(api)
        self.rows, self.mirror, self.full, self.hint = rows, mirror if mirror is not None else Mirror(), full, hint

    def run_idl(self, txn: Any) -> None:
        self.result = apply(txn, self.api.tables, self.rows, self.mirror, self.full, self.api.idl, self.hint)

    def post_commit(self, txn: Any) -> None:
        self.mirror.committed(self.api.idl, lambda row_id: txn.get_insert_uuid(row_id) or row_id)


class _Links:
    """Which parent row holds a child, read from the IDL only when a pass needs it (a big set column costs)."""

    def __init__(self, tables: dict[str, Any]) -> None:
        self.tables = tables
        self._all: dict[Any, tuple[Any, str]] | None = None
        self._children: dict[tuple[Any, str], set[Any]] = {}

    def holds(self, parent: Any, column: str, child: Any) -> bool:
        key = (parent.uuid, column)
        if key not in self._children:
            found = held(parent, column)
            self._children[key] = set(found) if found is not None else {r.uuid for r in getattr(parent, column)}
        return child.uuid in self._children[key]

    def parent_of(self, child: Any) -> tuple[Any, str] | None:
        if self._all is None:
            self._all = {}
            for table, column in LINKS:
                for parent in self.tables[table].rows.values():
                    # (a parent inserted in this transaction has nothing to read yet: the IDL raises for it)
                    found = held(parent, column)
                    for row_id in found if found is not None else (r.uuid for r in getattr(parent, column, [])):
                        self._all[row_id] = (parent, column)
        return self._all.get(child.uuid)


def apply(txn: Any, tables: dict[str, Any], rows: list[Row], mirror: Mirror | None = None, full: bool = True,
          idl: Any = None, hint: set[str] | None = None) -> Report:  # fmt: skip
    """`hint`: the keys whose spec may differ from the last pass's (None: any); with it, a pass that is not full
    visits only those rows, the rows changed in NB since and the rows it wrote to last time (scope())."""
    report = Report()
    mirror = mirror if mirror is not None else Mirror()
    dirty = mirror.refresh(idl, tables, TABLES, full)
    wanted: dict[str, Row] = {}
    for row in rows:
        wanted.setdefault(row.key, row)
    scope = None if full or hint is None or not mirror.settled else _scope(mirror, wanted, hint, dirty)
    visit = None if scope is None else scope | {wanted[k].parent for k in scope if k in wanted} - {None}
    owned, stale = _owned(tables, mirror, wanted, visit)
    if (
        scope is not None
        and visit is not None
        and any(k not in owned and k in wanted and (k not in scope or wanted[k].table in PARENTS) for k in visit)
    ):  # (a parent to insert: children outside the scope would be linked to it; one not there: no scope then)
        scope = None
        owned, stale = _owned(tables, mirror, wanted, None)
    links = _Links(tables)
    stale_ids = {idl_row.uuid for _key, idl_row in stale}

    resolved: dict[str, tuple[Any, bool]] = {}
    if scope is not None:  # the parents of the rows visited, as NB holds them
        resolved = {k: (owned[k], False) for k in (visit or set()) - scope if k in owned}
    specs = list(wanted.values()) if scope is None else [spec for spec in wanted.values() if spec.key in scope]

    def target(key: str) -> Any:
        """The NB row of a key a row references: as resolved, or (outside the scope) as last seen."""
        if key in resolved:
            return resolved[key][0]
        seen = None if scope is None or key in scope or key not in wanted else mirror.seen.get(key)
        return None if seen is None else tables[seen.spec.table].rows.get(seen.row)

    known: dict[str, Seen] = {}  # rows whose NB state is what an earlier pass saw
    unchanged: set[str] = set()  # of those, the rows whose spec is the one seen (nothing to write but links, refs)
    new_children: dict[tuple[Any, str], list[Any]] = defaultdict(list)
    new_parents: dict[Any, Any] = {}
    for spec in specs:
        if spec.parent is not None and spec.parent not in resolved:
            continue  # (its parent was left out)
        idl_row = owned.get(spec.key)
        created = idl_row is None
        parent = resolved[spec.parent][0] if spec.parent is not None else None
        seen = None if created else mirror.seen.get(spec.key)
        # NB holds what a pass saw there while the row did not change since in a column cloudnet sets.
        if (
            seen is not None
            and seen.row == idl_row.uuid
            and (idl_row.uuid not in dirty or not touched(dirty, idl_row.uuid, _managed(spec)))
        ):
            known[spec.key] = seen
        same_columns = spec.key in known and seen is not None and (seen.spec is spec or seen.spec == spec)
        if same_columns:
            unchanged.add(spec.key)
        if created:
            idl_row = txn.insert(tables[spec.table])
            for column, value in spec.columns.items():
                _set(txn, idl_row, column, value, created=True)
            report.created.append(spec.key)
        elif spec.key in known and seen is not None and not same_columns:  # (the specs are compared, not NB)
            changed = [c for c, v in spec.columns.items() if c not in seen.spec.columns or
                       not same(seen.spec.columns[c], v)]  # fmt: skip
            for column in changed:
                _write(txn, idl_row, column, seen.spec.columns.get(column), spec.columns[column])
            if changed:
                report.updated[spec.key] = changed
        elif not same_columns:
            changed = []
            for column, value in spec.columns.items():
                found = held(idl_row, column) if isinstance(value, list) and len(value) > MUTATE_OVER else None
                if found is None:
                    if not same(bigmaps.value(idl_row, column), value):
                        _set(txn, idl_row, column, value)
                        changed.append(column)
                elif found != frozenset(value):  # (a big set: compared and written by its values as they are)
                    _write(txn, idl_row, column, list(found), value)
                    changed.append(column)
            if changed:
                report.updated[spec.key] = changed
        resolved[spec.key] = (idl_row, created)
        if parent is None:
            continue
        parent_created = resolved[spec.parent][1]  # type: ignore[index]
        if not created and not parent_created:
            # The link is in the parent's column: known while the parent did not change since it was seen there.
            linked = seen is not None and seen.row == idl_row.uuid and seen.parent == parent.uuid
            if linked and not touched(dirty, parent.uuid, (spec.parent_column,)):
                continue
            if links.holds(parent, spec.parent_column, idl_row):
                continue
        link = None if created else links.parent_of(idl_row)
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
    _set_refs(specs, resolved, target, report, known, unchanged)
    for key, idl_row in stale:
        link = links.parent_of(idl_row)
        if link is not None and link[0].uuid not in stale_ids:
            link[0].delvalue(link[1], idl_row)
        idl_row.delete()
        report.deleted.append(key)
    _remember(mirror, wanted, resolved, target, report, unchanged, scope)
    return report


def _owned(tables: dict[str, Any], mirror: Mirror, wanted: dict[str, Row],
           visit: set[str] | None) -> tuple[dict[str, Any], list[tuple[str, Any]]]:  # fmt: skip
    """The NB row of each key (of those visited), and the rows cloudnet owns that no spec wants (or a second of a
    key)."""
    owned: dict[str, Any] = {}
    stale: list[tuple[str, Any]] = []
    for row_id, (name, key) in list(mirror.index.items()):
        if visit is not None and key not in visit:
            continue
        idl_row = tables[name].rows.get(row_id)
        if idl_row is None:
            del mirror.index[row_id]
            continue
        spec = wanted.get(key)
        if spec is None or spec.table != name or key in owned:
            stale.append((key, idl_row))
        else:
            owned[key] = idl_row
    return owned, stale


def _scope(mirror: Mirror, wanted: dict[str, Row], hint: set[str], dirty: Changes) -> set[str]:
    """What a pass must visit when only the specs of `hint` changed since the last pass: those, the rows changed in
    NB since (each other row is as its spec, which an earlier pass saw there), the rows the last pass wrote to, and
    the children of a row whose column of children changed in NB."""
    keys = hint | mirror.recheck | mirror.dirty_keys
    parents = {mirror.index[row_id][1] for row_id, (table, columns) in dirty.items() if row_id in mirror.index and
               table in PARENTS and (columns is None or not columns.isdisjoint(PARENTS[table]))}  # fmt: skip
    if parents:
        keys |= {spec.key for spec in wanted.values() if spec.parent in parents}
    return keys


def _targets(spec: Row, target: Callable[[str], Any]) -> dict[str, list[Any]]:
    return {column: [r for r in map(target, keys) if r is not None] for column, keys in spec.refs.items()}


def _set_refs(specs: list[Row], resolved: dict[str, tuple[Any, bool]], target: Callable[[str], Any],
              report: Report, known: dict[str, Seen], unchanged: set[str]) -> None:  # fmt: skip
    """Point each row's reference columns at the rows of the keys it names (those left out are skipped)."""
    inserted = set(report.created)
    for spec in specs:
        if not spec.refs or spec.key not in resolved:
            continue
        if spec.key in unchanged and not any(k in inserted for keys in spec.refs.values() for k in keys):
            continue  # (the same keys, resolved to the same rows as when it was seen)
        idl_row, created = resolved[spec.key]
        was = dict(known[spec.key].refs) if spec.key in known else {}
        for column, rows in _targets(spec, target).items():
            ids = frozenset(r.uuid for r in rows)
            # What NB holds: known (no reading it back), else read as it is (the IDL's conversion of a column into
            # rows costs more than all the rest of a pass when it holds thousands)
            now = was[column] if column in was else None if created else held(idl_row, column)
            if now is not None:
                if now == ids:
                    continue
                if len(now) + len(ids) > MUTATE_OVER:
                    by_id = {r.uuid: r for r in rows}
                    for gone in now - ids:
                        idl_row.delvalue(column, gone)
                    for new in ids - now:
                        idl_row.addvalue(column, by_id[new])
                else:
                    setattr(idl_row, column, rows)
            else:
                setattr(idl_row, column, rows)
            if not created:
                report.updated.setdefault(spec.key, []).append(column)


def held(idl_row: Any, column: str) -> frozenset[Any] | None:
    """The values of a set column as NB holds them (a reference as its uuid), straight from the IDL's copy; None when
    this transaction already changed the column (or the row is new): reading it is then the IDL's business."""
    if idl_row._data is None or column in idl_row._changes:
        return None
    if any(column in idl_row._mutations.get(kind, ()) for kind in ("_inserts", "_removes")):
        return None
    if column not in idl_row._table.columns:
        return None
    datum = idl_row._data[column]  # (not .get(): a column at its default is made on demand)
    if datum.type.is_map():
        return None
    return frozenset(atom.value for atom in datum.values)


def _managed(spec: Row) -> tuple[str, ...]:
    return (*spec.columns, *spec.refs)


def _set(txn: Any, idl_row: Any, column: str, value: Any, created: bool = False) -> None:
    """Set a column whole: a big map by a raw operation (bigmaps.py), anything else through the IDL."""
    if not bigmaps.is_big(idl_row._table.name, column):
        setattr(idl_row, column, value)
    elif value or not created:  # (a new row's map is empty unless written)
        bigmaps.put(txn, idl_row, column, value)


def _write(txn: Any, idl_row: Any, column: str, old: Any, new: Any) -> None:
    """Set a column NB is known to hold `old` in: a big set or map by its difference (a mutation carries only what
    changed; a load balancer's VIPs or an address set can hold thousands), anything else whole."""
    if bigmaps.is_big(idl_row._table.name, column):
        if isinstance(old, dict):
            bigmaps.change(txn, idl_row, column, old, new)
        else:
            bigmaps.put(txn, idl_row, column, new)
    elif isinstance(old, list) and isinstance(new, list) and len(old) + len(new) > MUTATE_OVER:
        for gone in set(old) - set(new):
            idl_row.delvalue(column, gone)
        for value in set(new) - set(old):
            idl_row.addvalue(column, value)
    elif isinstance(old, dict) and isinstance(new, dict) and len(old) + len(new) > MUTATE_OVER:
        for gone in old.keys() - new.keys():
            idl_row.delkey(column, gone)
        for key, value in new.items():
            if key not in old or old[key] != value:
                idl_row.setkey(column, key, value)
    else:
        setattr(idl_row, column, new)


def _ref_ids(targets: dict[str, list[Any]]) -> tuple[tuple[str, frozenset[Any]], ...]:
    return tuple((column, frozenset(r.uuid for r in rows)) for column, rows in sorted(targets.items()))


def _remember(mirror: Mirror, wanted: dict[str, Row], resolved: dict[str, tuple[Any, bool]],
              target: Callable[[str], Any], report: Report, unchanged: set[str],
              scope: set[str] | None) -> None:  # fmt: skip
    """Rows this pass found equal to their spec (nothing written to them) need no reading next time unless they or
    their spec change; rows it updated are read again once (after the echo of this commit); rows it inserted are
    known once the commit succeeds (Mirror.committed)."""
    mirror.inserted = []
    mirror.recheck = set(report.updated)
    mirror.settled = not report  # (until the commit succeeds: Mirror.committed)
    for key, (idl_row, created) in resolved.items():
        if scope is not None and key not in scope:
            continue  # (a parent of a row visited, itself not)
        if key in unchanged and key not in report.updated:
            continue  # (what was seen stands)
        if key in report.updated:
            mirror.seen.pop(key, None)
            continue
        spec = wanted[key]
        parent = resolved[spec.parent][0].uuid if spec.parent is not None else None
        seen = Seen(spec, idl_row.uuid, parent, _ref_ids(_targets(spec, target)))
        if created:
            mirror.seen.pop(key, None)
            mirror.inserted.append(seen)
        else:
            mirror.seen[key] = seen
    for key in report.deleted:
        if key not in resolved:
            mirror.seen.pop(key, None)
