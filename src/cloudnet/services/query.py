"""Neutron list semantics, independent of HTTP: filters, sorting, keyset pagination, fields.

A resource declares its attributes once (`Attr`): how a filter value is converted and which SQL
expression it compares against. Attributes that live in other tables (fixed_ips, tags, ...) give a
custom `filter` that builds the condition themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Select, and_, false, literal, or_
from sqlalchemy.sql import ColumnElement

from cloudnet.errors import BadRequest, InvalidInput, not_found

Convert = Callable[[str], Any]


def to_bool(value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "1", "yes", "on"):
        return True
    if v in ("false", "0", "no", "off"):
        return False
    raise InvalidInput(f"'{value}' cannot be converted to boolean")


def to_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise InvalidInput(f"'{value}' is not an integer") from None
    if not -(2**63) <= number < 2**63:  # what the databases store
        raise InvalidInput(f"'{value}' is out of range")
    return number


def to_time(value: str) -> datetime:
    """A timestamp as Neutron shows them (2026-01-02T03:04:05Z), as stored: naive UTC."""
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        raise InvalidInput(f"'{value}' is not a timestamp") from None
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(UTC).replace(tzinfo=None)
    return parsed


@dataclass(frozen=True)
class Attr:
    column: ColumnElement[Any] | None = None
    convert: Convert = str
    # For attributes not stored as one column: values -> condition.
    filter: Callable[[list[str]], ColumnElement[bool]] | None = None
    sortable: bool = True


@dataclass
class ListQuery:
    filters: dict[str, list[str]] = field(default_factory=dict)
    fields: list[str] = field(default_factory=list)
    sort_keys: list[str] = field(default_factory=list)
    sort_dirs: list[str] = field(default_factory=list)
    limit: int | None = None
    marker: str | None = None
    page_reverse: bool = False


TAG_FILTERS = ("tags", "tags-any", "not-tags", "not-tags-any")


def apply_filters(stmt: Select[Any], attrs: dict[str, Attr], filters: dict[str, list[str]]) -> Select[Any]:
    unknown = [name for name in filters if name not in attrs]
    if unknown:
        raise BadRequest(f"{unknown} is invalid attribute for filtering")
    for name, values in filters.items():
        attr = attrs[name]
        if attr.filter is not None:
            stmt = stmt.where(attr.filter(values))
            continue
        if attr.column is None:
            raise BadRequest(f"['{name}'] is invalid attribute for filtering")
        converted = [None if v == "" and attr.convert is not str else attr.convert(v) for v in values]
        conds = [attr.column.is_(None) if v is None else attr.column == v for v in converted]
        stmt = stmt.where(or_(*conds) if conds else false())
    return stmt


def sort_columns(
    attrs: dict[str, Attr], id_column: ColumnElement[Any], q: ListQuery
) -> list[tuple[ColumnElement[Any], bool]]:
    """[(column, ascending)], always ending with id so that the order is total (needed by markers)."""
    keys = q.sort_keys
    dirs = q.sort_dirs or ["asc"] * len(keys)
    if len(dirs) != len(keys):
        raise BadRequest("The number of sort_keys and sort_dirs must be same")
    out: list[tuple[ColumnElement[Any], bool]] = []
    for key, direction in zip(keys, dirs, strict=True):
        attr = attrs.get(key)
        if attr is None or attr.column is None or not attr.sortable:
            raise BadRequest(f"{key} is an invalid attribute for sort_keys")
        if direction not in ("asc", "desc"):
            raise BadRequest(f"{direction} is invalid value for sort_dirs, valid value is 'asc' and 'desc'")
        out.append((attr.column, direction == "asc"))
    if not any(col is id_column for col, _ in out):
        out.append((id_column, out[-1][1] if out else True))
    return out


def apply_order_and_page(
    stmt: Select[Any],
    order: Sequence[tuple[ColumnElement[Any], bool]],
    q: ListQuery,
    marker_values: Sequence[Any] | None,
) -> Select[Any]:
    """ORDER BY, keyset condition after (or before, with page_reverse) the marker, LIMIT n+1.

    NULL sorts before every value (ascending), on both backends, so that markers on nullable columns work.
    """
    reverse = q.page_reverse
    if marker_values is not None:
        branches = []
        for i, (col, asc) in enumerate(order):
            equal_prefix = [_equal(order[j][0], marker_values[j]) for j in range(i)]
            branches.append(and_(*equal_prefix, _after(col, marker_values[i], asc != reverse)))
        stmt = stmt.where(or_(*branches))
    stmt = stmt.order_by(*[_order(col, asc != reverse) for col, asc in order])
    if q.limit is not None:
        stmt = stmt.limit(q.limit + 1)
    return stmt


def _nullable(col: ColumnElement[Any]) -> bool:
    return bool(getattr(col, "nullable", False))


def _order(col: ColumnElement[Any], ascending: bool) -> Any:
    if not _nullable(col):
        return col.asc() if ascending else col.desc()
    return col.asc().nulls_first() if ascending else col.desc().nulls_last()


def _equal(col: ColumnElement[Any], value: Any) -> ColumnElement[bool]:
    return col.is_(None) if value is None else col == literal(value, col.type)


def _after(col: ColumnElement[Any], value: Any, ascending: bool) -> ColumnElement[bool]:
    """Rows strictly after `value` in the scan order (a bound literal: `col > True` is no SQLAlchemy expression)."""
    if value is None:
        return col.is_not(None) if ascending else false()
    bound = literal(value, col.type)
    if ascending:
        return col > bound
    return or_(col < bound, col.is_(None)) if _nullable(col) else col < bound


@dataclass
class Page:
    """One page of a list, in display order; `has_more` is about the paging direction."""

    items: list[dict[str, Any]]
    has_more: bool = False


def fetch_page(
    conn: Any, table: Any, attrs: dict[str, Attr], stmt: Select[Any], q: ListQuery, kind: str
) -> tuple[list[Any], bool]:
    order = sort_columns(attrs, table.c.id, q)
    marker_values = None
    if q.marker:
        # Looked up through the caller's visibility: another project's id is no marker.
        marker_row = conn.execute(
            stmt.with_only_columns(*[col for col, _ in order]).where(table.c.id == q.marker)
        ).first()
        if marker_row is None:
            raise not_found(kind, q.marker)
        marker_values = tuple(marker_row)
    stmt = apply_filters(stmt, attrs, q.filters)
    stmt = apply_order_and_page(stmt, order, q, marker_values)
    rows = list(conn.execute(stmt).all())
    has_more = q.limit is not None and len(rows) > q.limit
    if has_more:
        rows = rows[: q.limit]
    if q.page_reverse:
        rows.reverse()
    return rows, has_more
