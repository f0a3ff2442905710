"""Rendering resources as table, json, yaml or csv (`-f/--format`), like `openstack ... -f`."""

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

Item = Mapping[str, Any]

# Output that is piped should not be wrapped at rich's default 80 columns.
PIPE_WIDTH = 4096


class Format(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"
    csv = "csv"


FormatOption = Annotated[
    Format,
    typer.Option("-f", "--format", case_sensitive=False, help="Output format."),
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


def show_rows(item: Item) -> list[list[str]]:
    return [[key, cell(item[key])] for key in sorted(item)]


def list_table(items: Sequence[Item], columns: Sequence[Column]) -> Table:
    return _table([c.header for c in columns], list_rows(items, columns))


def show_table(item: Item) -> Table:
    return _table(["Field", "Value"], show_rows(item))


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


def render_list(items: Sequence[Item], columns: Sequence[Column], fmt: Format) -> str | Table:
    """What a list command prints: a rich Table for `table`, text for the rest."""
    if fmt is Format.table:
        return list_table(items, columns)
    if fmt is Format.csv:
        return to_csv([c.header for c in columns], list_rows(items, columns))
    return _dump(list(items), fmt)


def render_show(item: Item, fmt: Format) -> str | Table:
    """What a show (or create) command prints for one resource."""
    if fmt is Format.table:
        return show_table(item)
    if fmt is Format.csv:
        return to_csv(["Field", "Value"], show_rows(item))
    return _dump(item, fmt)


def print_list(items: Sequence[Item], columns: Sequence[Column], fmt: Format) -> None:
    _emit(render_list(items, columns, fmt))


def print_show(item: Item, fmt: Format) -> None:
    _emit(render_show(item, fmt))


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
