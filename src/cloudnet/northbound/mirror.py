"""What the NB writer remembers between passes, so that a pass compares only what may differ.

Reading a column of an IDL row converts it to Python (tens of microseconds a row), so a pass that compared every row
cloudnet owns cost seconds at 10,000 ports. The NB IDL here records every row it is told changed (inserts, updates,
deletes, from anyone, our own commits' echoes included); the Mirror keeps which NB row holds each cloudnet key and
which rows a pass found equal to their desired spec. A later pass compares a row again only when its spec changed,
the row changed in NB since, or its parent changed (for its link). A pass is full (everything read and compared, as
on start) after the IDL's session reconnected (the IDL then replaces its copy without telling which rows changed),
or when the caller asks for it.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ovs.db.idl import ROW_CREATE, ROW_UPDATE
from ovsdbapp.backend.ovs_idl import connection

from cloudnet.northbound import bigmaps
from cloudnet.northbound.rows import KEY, Row

YIELD_EVERY = 0.005  # seconds of update processing between two yields of the GIL


Changes = dict[uuid.UUID, tuple[str, "set[str] | None"]]  # NB row -> (table, columns changed; None: all of it)


class NbIdl(connection.OvsdbIdl):  # type: ignore[misc]
    """The NB IDL: records the rows it is told changed, and which columns of an update; keeps big maps out of the
    IDL's conversion (bigmaps.py); yields the GIL by time rather than once a row."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if not callable(getattr(connection.OvsdbIdl, "_Idl__parse_update", None)):  # (overridden below)
            raise RuntimeError("this ovs library's IDL has no __parse_update: big maps could not be kept out of it")
        super().__init__(*args, **kwargs)
        self._tables: dict[uuid.UUID, str] = {}
        self._whole: set[uuid.UUID] = set()  # inserted or deleted
        self._inserted: set[uuid.UUID] = set()
        self._deleted: set[uuid.UUID] = set()
        self._columns: dict[uuid.UUID, set[str]] = {}  # updated: the columns that changed
        self._yielded = time.monotonic()
        self.global_changed = threading.Event()  # NB_Global changed (northd's sb_cfg: staging.wait_northd)

    def notify(self, event: str, row: Any, updates: Any = None) -> None:
        self._tables[row.uuid] = row._table.name
        if row._table.name == "NB_Global":
            self.global_changed.set()
        if event == ROW_UPDATE and updates is not None:
            self._columns.setdefault(row.uuid, set()).update(updates._data)
        else:
            self._whole.add(row.uuid)
            (self._inserted if event == ROW_CREATE else self._deleted).add(row.uuid)
        super().notify(event, row, updates)

    def _Idl__parse_update(self, update: Any, version: str, tables: Any = None) -> None:
        """The IDL's parsing of an update (ovs.db.idl.Idl.__parse_update, which its run() calls by that name), with
        the big maps taken out before and kept on the rows after."""
        ours = tables is None or tables is self.tables
        taken = bigmaps.take(self.tables, update, version) if ours else {}
        super()._Idl__parse_update(update, version, tables)
        if not ours:
            return
        if version not in bigmaps.VERSIONS:  # (not taken out: the IDL holds them whole)
            bigmaps.forget(self.tables, update)
        for row_id, (table, columns) in bigmaps.keep(self.tables, taken).items():
            self._tables[row_id] = table
            self._columns.setdefault(row_id, set()).update(columns)

    def cooperative_yield(self) -> None:
        # ovsdbapp sleeps once a row to let other threads run: with thousands of rows in an update and a busy
        # machine that alone took seconds. Once every few milliseconds lets them run as well.
        now = time.monotonic()
        if now - self._yielded >= YIELD_EVERY:
            time.sleep(0)
            self._yielded = time.monotonic()

    def take_changed(self) -> Changes:
        changed: Changes = {row_id: (table, None if row_id in self._whole else self._columns.get(row_id, set()))
                            for row_id, table in self._tables.items()}  # fmt: skip
        self._tables, self._whole, self._inserted, self._deleted, self._columns = {}, set(), set(), set(), {}
        return changed

    def inserted(self) -> set[uuid.UUID]:
        """The rows inserted since the changes were last taken (not yet in a Mirror's index)."""
        return set(self._inserted)

    def forget_insert(self, row_id: uuid.UUID) -> None:
        """Drop the news of a row's insert (the echo of our own commit; updates since are kept)."""
        if row_id in self._inserted and row_id not in self._deleted:
            self._inserted.discard(row_id)
            self._whole.discard(row_id)
            if row_id not in self._columns:
                self._tables.pop(row_id, None)


def touched(dirty: Changes | dict[uuid.UUID, Any], row_id: uuid.UUID, columns: Any) -> bool:
    """Whether the row changed in NB in any of `columns` (or as a whole) since the last pass."""
    if row_id not in dirty:
        return False
    entry = dirty[row_id]
    changed = entry[1] if isinstance(entry, tuple) else entry
    return changed is None or not changed.isdisjoint(columns)


@dataclass(frozen=True)
class Seen:
    """A row a pass found equal to `spec`: its NB uuid, its parent's, and the uuids its references resolved to."""

    spec: Row
    row: uuid.UUID
    parent: uuid.UUID | None
    refs: tuple[tuple[str, frozenset[uuid.UUID]], ...]


@dataclass
class Mirror:
    """Used on the IDL's thread only (ovsdbapp runs commands there), so without locks."""

    index: dict[uuid.UUID, tuple[str, str]] = field(default_factory=dict)  # NB row -> (table, cloudnet key)
    seen: dict[str, Seen] = field(default_factory=dict)
    session: int = -1
    inserted: list[Seen] = field(default_factory=list)  # rows the pass inserts, by their temporary uuids
    recheck: set[str] = field(default_factory=set)  # keys of the rows the last pass wrote to (no longer seen)
    dirty_keys: set[str] = field(default_factory=set)  # keys of the rows changed in NB, as of the last refresh
    # Whether the last pass's writes are known to be in NB (committed, or none): else the next one visits every row
    # (what it took as news may not have been written: a retried or failed transaction)
    settled: bool = False

    def committed(self, idl: Any, real: Any) -> None:
        """After the pass's transaction succeeded: the rows it inserted are as their spec (nobody could change them
        before; changes since are kept as news); `real` maps a temporary uuid to the one the database gave."""
        for seen in self.inserted if isinstance(idl, NbIdl) else []:
            row_id = real(seen.row)
            idl.forget_insert(row_id)
            self.index[row_id] = (seen.spec.table, seen.spec.key)
            refs = tuple((column, frozenset(real(r) for r in rows)) for column, rows in seen.refs)
            parent = real(seen.parent) if seen.parent is not None else None
            self.seen[seen.spec.key] = Seen(seen.spec, row_id, parent, refs)
        self.inserted = []
        self.settled = True

    def refresh(self, idl: Any, tables: dict[str, Any], names: tuple[str, ...], full: bool) -> Changes:
        """Bring the index up to date; the rows that changed since the last pass (all of them, if full)."""
        changed: Changes = idl.take_changed() if isinstance(idl, NbIdl) else {}
        session = idl._session.get_seqno() if hasattr(idl, "_session") else -1
        if full or session != self.session or not isinstance(idl, NbIdl):
            self.session, self.settled = session, False  # (every row is news: this pass visits them all)
            self.index.clear()
            self.seen.clear()
            for name in names:
                for idl_row in tables[name].rows.values():
                    key = idl_row.external_ids.get(KEY)
                    if key is not None:
                        self.index[idl_row.uuid] = (name, key)
            return {row_id: (name, None) for row_id, (name, _key) in self.index.items()}
        self.dirty_keys = set()
        for row_id, (name, columns) in changed.items():
            if row_id in self.index:
                self.dirty_keys.add(self.index[row_id][1])
            if name not in names or (columns is not None and "external_ids" not in columns):
                continue  # (its key did not change)
            idl_row = tables[name].rows.get(row_id)
            key = None if idl_row is None else idl_row.external_ids.get(KEY)
            if key is None:
                self.index.pop(row_id, None)
            else:
                self.index[row_id] = (name, key)
                self.dirty_keys.add(key)
        return changed
