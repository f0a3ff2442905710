"""Statements of the hot paths, compiled once per dialect and run on the driver's own cursor.

SQLAlchemy builds, caches and executes a small statement in 30-150 µs; the SQLite driver runs the same one in
about 2 µs, so for a request of ten statements the library, not the database, is the cost. A `Prepared`
statement is still written as a SQLAlchemy Core construct (the tables stay the one schema), compiled once per
dialect, and then executed straight on the DBAPI cursor of the transaction's connection, with SQLAlchemy's
own conversions of each bound value and result column (datetimes and JSON on SQLite, JSON on PostgreSQL).

Parameters are `bindparam(name)`s given by name; constants in the construct are compiled in. Statements
with expanding parameters (`in_(bindparam(..., expanding=True))`) are not supported: use SQLAlchemy there.
A statement that differs per dialect (an upsert) is given as a function of the dialect name.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import JSON, Connection, Table, Text, bindparam, cast, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import Executable
from sqlalchemy.sql.elements import BindParameter, ClauseElement

Processor = Callable[[Any], Any]


_REQUIRED = object()


@dataclass(frozen=True)
class _Compiled:
    stmt: Executable
    sql: str
    # Positional drivers (SQLite: `?`): (name, default or _REQUIRED, processor) in placeholder order, and a
    # tuple is passed. Named ones (psycopg): a dict, from `defaults` and the values, `binds` applied.
    slots: tuple[tuple[str, Any, Processor | None], ...] | None
    defaults: dict[str, Any]
    binds: tuple[tuple[str, Processor], ...]
    results: tuple[tuple[int, Processor], ...]

    def params(self, values: Mapping[str, Any]) -> tuple[Any, ...] | dict[str, Any]:
        if self.slots is not None:
            out = []
            for name, default, proc in self.slots:
                v = values[name] if default is _REQUIRED else values.get(name, default)
                out.append(proc(v) if proc is not None and v is not None else v)
            return tuple(out)
        p = {**self.defaults, **values} if self.defaults else dict(values)
        for name, proc in self.binds:
            v = p[name]
            if v is not None:
                p[name] = proc(v)
        return p

    def row(self, raw: Sequence[Any]) -> tuple[Any, ...]:
        if not self.results:
            return tuple(raw)
        out = list(raw)
        for i, proc in self.results:
            if out[i] is not None:
                out[i] = proc(out[i])
        return tuple(out)


class Prepared:
    """One statement (a SQLAlchemy Core construct) run on the raw cursor; see the module doc."""

    def __init__(self, stmt: Executable | Callable[[str], Executable], *, binary: bool = False) -> None:
        # binary: psycopg sends the parameters in binary form (long arrays: no per-element quoting).
        self._binary = binary
        self._make = stmt if callable(stmt) and not isinstance(stmt, ClauseElement) else (lambda _name: stmt)
        self._compiled: dict[str, _Compiled] = {}
        self._lock = threading.Lock()

    def _for(self, dialect: Dialect) -> _Compiled:
        c = self._compiled.get(dialect.name)
        if c is None:
            with self._lock:
                c = self._compiled.get(dialect.name) or self._compile(dialect)
                self._compiled[dialect.name] = c
        return c

    def _compile(self, dialect: Dialect) -> _Compiled:
        stmt = self._make(dialect.name)
        assert isinstance(stmt, ClauseElement)
        compiled = stmt.compile(dialect=dialect)
        by_name: dict[str, BindParameter[Any]] = {name: bp for bp, name in compiled.bind_names.items()}
        if any(bp.expanding for bp in by_name.values()):
            raise ValueError("expanding parameters are not supported by Prepared")
        # Constants of the construct (e.g. `device_owner == "x"`) are bound parameters with a value.
        defaults = {k: v for k, v in compiled.params.items() if not by_name[k].required}
        binds = []
        for name, bp in by_name.items():
            proc = bp.type.dialect_impl(dialect).bind_processor(dialect)
            if proc is not None:
                binds.append((name, proc))
        results = []
        for i, col in enumerate(getattr(stmt, "exported_columns", ())):
            proc = col.type.dialect_impl(dialect).result_processor(dialect, None)
            if proc is not None:
                results.append((i, proc))
        slots = None
        if dialect.positional:
            procs = dict(binds)
            slots = tuple((n, defaults.get(n, _REQUIRED), procs.get(n)) for n in compiled.positiontup or ())
        sql = compiled.string
        if self._binary and dialect.name == "postgresql":
            sql = re.sub(r"%\((\w+)\)s", r"%(\1)b", sql)  # psycopg: %b is a parameter sent in binary
        return _Compiled(stmt, sql, slots, defaults, tuple(binds), tuple(results))

    # -- running --------------------------------------------------------------------------------------

    def _execute(self, conn: Connection, values: Mapping[str, Any] | None) -> tuple[Any, _Compiled]:
        c = self._for(conn.dialect)
        dbapi_conn = conn.connection.dbapi_connection
        assert dbapi_conn is not None
        cur = dbapi_conn.cursor()
        params = c.params(values or {})
        try:
            cur.execute(c.sql, params)
        except conn.dialect.loaded_dbapi.Error as exc:
            _raise(conn, c, params, exc, cur)
        return cur, c

    def cursor(self, conn: Connection, values: Mapping[str, Any] | None = None) -> Any:
        """Execute; returns the DBAPI cursor (for the rowcount of a statement without RETURNING)."""
        return self._execute(conn, values)[0]

    def rows(self, conn: Connection, values: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        cur, c = self._execute(conn, values)
        return [c.row(r) for r in cur.fetchall()]

    def first(self, conn: Connection, values: Mapping[str, Any] | None = None) -> tuple[Any, ...] | None:
        rows = self.rows(conn, values)
        return rows[0] if rows else None

    def scalar(self, conn: Connection, values: Mapping[str, Any] | None = None) -> Any:
        row = self.first(conn, values)
        return None if row is None else row[0]

    def rowcount(self, conn: Connection, values: Mapping[str, Any] | None = None) -> int:
        """Rows changed by an UPDATE or DELETE without RETURNING."""
        return int(self._execute(conn, values)[0].rowcount)


def _raise(conn: Connection, c: _Compiled, params: Any, exc: Exception, cursor: Any) -> None:
    """A driver error as SQLAlchemy would raise it (IntegrityError, DataError, ...), so that callers and the
    API's error handlers treat both paths alike; a lost connection is invalidated as SQLAlchemy does."""
    dialect = conn.dialect
    dbapi_conn = conn.connection.dbapi_connection
    disconnect = dialect.is_disconnect(exc, dbapi_conn, cursor)
    if disconnect:
        conn.invalidate(exc)
    raise DBAPIError.instance(
        c.sql, params, exc, dialect.loaded_dbapi.Error, connection_invalidated=disconnect, dialect=dialect
    ) from exc


class BulkInsert:
    """INSERT of any number of rows into `table` (columns as given in each row), optionally ON CONFLICT DO NOTHING
    (`conflict`: the unique columns, [] for any) and RETURNING `returning`.

    One row: a `Prepared` statement. Several rows, SQLite: SQLAlchemy's multi-row VALUES. Several rows,
    PostgreSQL: one array per column, `INSERT ... SELECT unnest(:a), unnest(:b), ...` -- a short statement
    whatever the row count, where multi-row VALUES would make psycopg parse 20,000 placeholders."""

    def __init__(
        self, table: Table, columns: Sequence[str], *, conflict: Sequence[str] | None = None,
        returning: Sequence[str] = (),
    ) -> None:  # fmt: skip
        self.table, self.columns, self.conflict, self.returning = table, tuple(columns), conflict, tuple(returning)
        self._json = {n for n in self.columns if isinstance(table.c[n].type, JSON)}
        self.one = Prepared(self._single)
        self.unnest = Prepared(self._unnest, binary=True)

    def _finish(self, stmt: Any) -> Executable:
        if self.conflict is not None:
            stmt = stmt.on_conflict_do_nothing(index_elements=list(self.conflict) or None)
        if self.returning:
            stmt = stmt.returning(*[self.table.c[c] for c in self.returning])
        return stmt  # type: ignore[no-any-return]

    def _single(self, dialect: str) -> Executable:
        module = postgresql if dialect == "postgresql" else sqlite
        c = self.table.c
        return self._finish(module.insert(self.table).values({n: bindparam(n, type_=c[n].type) for n in self.columns}))

    def _unnest(self, _dialect: str) -> Executable:
        c = self.table.c

        def array(n: str) -> Any:
            if n in self._json:  # sent as text[] (a JSON list value is no nested array), cast to json[]
                return cast(bindparam(n, type_=postgresql.ARRAY(Text)), postgresql.ARRAY(c[n].type))
            return bindparam(n, type_=postgresql.ARRAY(c[n].type))

        arrays = [func.unnest(array(n)) for n in self.columns]
        return self._finish(postgresql.insert(self.table).from_select(list(self.columns), select(*arrays)))

    def run(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
        """Insert; returns the RETURNING rows (of the rows actually inserted)."""
        if not rows:
            return []
        if len(rows) == 1:
            return self.one.rows(conn, rows[0]) if self.returning else self._none(self.one.cursor(conn, rows[0]))
        if conn.dialect.name == "postgresql":
            columns = {n: [json.dumps(r[n]) for r in rows] if n in self._json else [r[n] for r in rows]
                       for n in self.columns}  # fmt: skip
            return self.unnest.rows(conn, columns) if self.returning else self._none(self.unnest.cursor(conn, columns))
        result = conn.execute(self.one._for(conn.dialect).stmt, list(rows))
        return [tuple(r) for r in result] if self.returning else []

    @staticmethod
    def _none(_cursor: Any) -> list[tuple[Any, ...]]:
        return []
