"""Rendering resources as table, json, yaml, csv or value (`-f/--format`), and choosing what to show
(`-c/--column`), like `openstack ... -f value -c status`."""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

import typer
import yaml
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from cloudnet.cli.errors import CliError

Item = Mapping[str, Any]
# How a show table, csv or value output renders a field, by key; json and yaml stay the API's shape.
Views = Mapping[str, Callable[[Any], Any]]

# Output that is piped should not be wrapped at rich's default 80 columns.
PIPE_WIDTH = 4096


class Format(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"
    csv = "csv"
    value = "value"


FormatOption = Annotated[
    Format,
    typer.Option("-f", "--format", case_sensitive=False, help="Output format (value: no headers, for scripts)."),
]
ColumnsOption = Annotated[
    list[str] | None,
    typer.Option(
        "-c",
        "--column",
        metavar="COLUMN",
        help="Show only this column of a list, or field of a resource (repeatable, in this order).",
    ),
]


@dataclass(frozen=True)
class Column:
    """A list column: its header and the resource key (or function) it shows."""

    header: str
    source: str | Callable[[Item], Any]

    def value(self, item: Item) -> Any:
        if callable(self.source):
            return self.source(item)
        return item.get(self.source)

    @property
    def key(self) -> str:
        """Its name in a json/yaml list narrowed by `-c`: the resource key, or the header for a computed one."""
        return self.source if isinstance(self.source, str) else self.header

    def named(self, name: str) -> bool:
        return name.casefold() in (self.header.casefold(), self.key.casefold())


def select_columns(columns: Sequence[Column], names: Sequence[str] | None) -> list[Column]:
    """The columns `-c` names (header or resource key, any case), in the order given; all when none are."""
    if not names:
        return list(columns)
    chosen = []
    for name in names:
        match = next((c for c in columns if c.named(name)), None)
        if match is None:
            choices = ", ".join(c.header for c in columns)
            raise CliError(f"-c/--column {name!r}: no such column (choose from {choices})")
        chosen.append(match)
    return chosen


def select_fields(item: Item, names: Sequence[str] | None) -> dict[str, Any]:
    """The fields `-c` names (exact key, else any case), in the order given; all when none are."""
    if not names:
        return dict(item)
    by_fold = {key.casefold(): key for key in item}
    chosen: dict[str, Any] = {}
    for name in names:
        key = name if name in item else by_fold.get(name.casefold())
        if key is None:
            raise CliError(f"-c/--column {name!r}: no such field (choose from {', '.join(sorted(item))})")
        chosen[key] = item[key]
    return chosen


def cell(value: Any) -> str:
    """One value as text: lists comma-joined (dicts one per line), dicts as key=value."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, Mapping):
        return ", ".join(f"{key}={cell(val)}" for key, val in value.items() if val is not None)
    if isinstance(value, list | tuple):
        separator = "\n" if any(isinstance(v, Mapping) for v in value) else ", "
        return separator.join(cell(v) for v in value)
    return str(value)


def up_down(value: Any) -> str:
    """admin_state_up as `openstack` shows it."""
    if value is None:
        return ""
    return "UP" if value else "DOWN"


def list_rows(items: Sequence[Item], columns: Sequence[Column]) -> list[list[str]]:
    return [[cell(column.value(item)) for column in columns] for item in items]


def show_rows(item: Item, views: Views | None = None, *, order: bool = True) -> list[list[str]]:
    """Field/value rows, sorted by field unless `order=False` (`-c` gave the order); `views` render fields
    that `cell` would show as one long line (an instance's NICs)."""
    views = views or {}
    keys = sorted(item) if order else list(item)
    return [[key, cell(views[key](item[key]) if key in views else item[key])] for key in keys]


def list_table(items: Sequence[Item], columns: Sequence[Column]) -> Table:
    return _table([c.header for c in columns], list_rows(items, columns))


def to_json(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def to_yaml(data: Any) -> str:
    return yaml.safe_dump(_plain(data), sort_keys=False, default_flow_style=False, allow_unicode=True)


def to_csv(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(headers)
    writer.writerows(rows)
    return out.getvalue()


def render_list(
    items: Sequence[Item], columns: Sequence[Column], fmt: Format, names: Sequence[str] | None = None
) -> str | Table:
    """What a list command prints: a rich Table for `table`, text for the rest; `names` are `-c`'s."""
    chosen = select_columns(columns, names)
    if fmt is Format.table:
        return list_table(items, chosen)
    if fmt is Format.csv:
        return to_csv([c.header for c in chosen], list_rows(items, chosen))
    if fmt is Format.value:
        return to_value(list_rows(items, chosen))
    if names:
        return _dump([{c.key: c.value(item) for c in chosen} for item in items], fmt)
    return _dump(list(items), fmt)


def render_show(item: Item, fmt: Format, names: Sequence[str] | None = None, views: Views | None = None) -> str | Table:
    """What a show (or create) command prints for one resource; `names` are `-c`'s."""
    fields = select_fields(item, names)
    rows = show_rows(fields, views, order=not names)
    if fmt is Format.table:
        return _table(["Field", "Value"], rows)
    if fmt is Format.csv:
        return to_csv(["Field", "Value"], rows)
    if fmt is Format.value:
        return to_value([[value] for _, value in rows])
    return _dump(fields, fmt)


def to_value(rows: Sequence[Sequence[str]]) -> str:
    """`-f value`: a row's cells space-separated, one row a line, no header (cliff's value formatter)."""
    return "".join(" ".join(row) + "\n" for row in rows)


def print_list(
    items: Sequence[Item], columns: Sequence[Column], fmt: Format, names: Sequence[str] | None = None
) -> None:
    _emit(render_list(items, columns, fmt, names))


def print_show(item: Item, fmt: Format, names: Sequence[str] | None = None, views: Views | None = None) -> None:
    _emit(render_show(item, fmt, names, views))


def _dump(data: Any, fmt: Format) -> str:
    return to_yaml(data) if fmt is Format.yaml else to_json(data)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> Table:
    table = Table(box=box.SQUARE, show_lines=False)
    for header in headers:
        table.add_column(header, overflow="fold")
    for row in rows:
        # Text, not str: values such as "[fe80::1]" must not be read as rich markup.
        table.add_row(*(Text(value) for value in row))
    return table


def _emit(rendered: str | Table) -> None:
    if isinstance(rendered, str):
        sys.stdout.write(rendered)
        sys.stdout.flush()
        return
    console = Console()
    if not console.is_terminal:
        console = Console(width=PIPE_WIDTH)
    console.print(rendered)


def _plain(data: Any) -> Any:
    # safe_dump refuses Mapping subclasses and tuples; give it plain containers.
    if isinstance(data, Mapping):
        return {str(k): _plain(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_plain(v) for v in data]
    return data
