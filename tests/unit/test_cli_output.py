"""Rendering of resources in each output format."""

from __future__ import annotations

import csv
import io
import json

import pytest
import yaml
from rich.console import Console
from rich.table import Table

from cloudnet.cli.errors import CliError
from cloudnet.cli.output import (
    Column,
    Format,
    cell,
    list_rows,
    render_list,
    render_show,
    select_columns,
    show_rows,
    up_down,
)

NETWORKS = [
    {"id": "n1", "name": "alpha", "subnets": ["s1", "s2"], "admin_state_up": True, "mtu": 1500},
    {"id": "n2", "name": "beta", "subnets": [], "admin_state_up": False, "mtu": 9000},
]
COLUMNS = [
    Column("ID", "id"),
    Column("Name", "name"),
    Column("Subnets", "subnets"),
    Column("State", lambda n: up_down(n.get("admin_state_up"))),
]
PORT = {
    "id": "p1",
    "name": "web",
    "fixed_ips": [{"subnet_id": "s1", "ip_address": "10.0.0.5"}, {"subnet_id": "s2", "ip_address": "fd00::5"}],
    "binding:profile": {"pci_slot": "0000:03:00.1"},
    "description": None,
    "admin_state_up": True,
}


def render_text(table: Table) -> str:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(table)
    return console.file.getvalue()


def test_cell_formats_scalars_lists_and_dicts() -> None:
    assert cell(None) == ""
    assert cell(True) == "True"
    assert cell(1500) == "1500"
    assert cell(["s1", "s2"]) == "s1, s2"
    assert cell([]) == ""
    assert cell({"a": 1, "b": "x", "skip": None}) == "a=1, b=x"
    assert cell([{"ip_address": "10.0.0.5"}, {"ip_address": "10.0.0.6"}]) == "ip_address=10.0.0.5\nip_address=10.0.0.6"


def test_up_down() -> None:
    assert (up_down(True), up_down(False), up_down(None)) == ("UP", "DOWN", "")


def test_list_rows_use_columns_and_getters() -> None:
    assert list_rows(NETWORKS, COLUMNS) == [["n1", "alpha", "s1, s2", "UP"], ["n2", "beta", "", "DOWN"]]


def test_missing_key_is_an_empty_cell() -> None:
    assert list_rows([{"id": "x"}], [Column("Name", "name")]) == [[""]]


def test_list_table() -> None:
    rendered = render_list(NETWORKS, COLUMNS, Format.table)
    assert isinstance(rendered, Table)
    text = render_text(rendered)
    for expected in ("ID", "Name", "Subnets", "State", "alpha", "s1, s2", "DOWN"):
        assert expected in text


def test_table_cells_are_not_rich_markup() -> None:
    text = render_text(render_list([{"id": "[bold]x[/bold]"}], [Column("ID", "id")], Format.table))
    assert "[bold]x[/bold]" in text


def test_list_json_is_the_full_resources() -> None:
    assert json.loads(render_list(NETWORKS, COLUMNS, Format.json)) == NETWORKS


def test_list_yaml_is_the_full_resources() -> None:
    assert yaml.safe_load(render_list(NETWORKS, COLUMNS, Format.yaml)) == NETWORKS


def test_list_csv_has_header_and_column_rows() -> None:
    rendered = render_list(NETWORKS, COLUMNS, Format.csv)
    assert isinstance(rendered, str)
    assert list(csv.reader(io.StringIO(rendered))) == [
        ["ID", "Name", "Subnets", "State"],
        ["n1", "alpha", "s1, s2", "UP"],
        ["n2", "beta", "", "DOWN"],
    ]


def test_empty_list() -> None:
    assert json.loads(render_list([], COLUMNS, Format.json)) == []
    assert render_list([], COLUMNS, Format.csv) == "ID,Name,Subnets,State\n"
    assert "Name" in render_text(render_list([], COLUMNS, Format.table))


def test_show_rows_are_sorted_fields() -> None:
    rows = show_rows(PORT)
    assert [field for field, _ in rows] == sorted(PORT)
    assert dict(rows)["fixed_ips"] == "subnet_id=s1, ip_address=10.0.0.5\nsubnet_id=s2, ip_address=fd00::5"
    assert dict(rows)["binding:profile"] == "pci_slot=0000:03:00.1"
    assert dict(rows)["description"] == ""


def test_show_table() -> None:
    text = render_text(render_show(PORT, Format.table))
    for expected in ("Field", "Value", "binding:profile", "10.0.0.5", "fd00::5"):
        assert expected in text


def test_show_json_and_yaml_are_the_full_resource() -> None:
    assert json.loads(render_show(PORT, Format.json)) == PORT
    assert yaml.safe_load(render_show(PORT, Format.yaml)) == PORT


def test_show_yaml_keeps_field_order() -> None:
    rendered = render_show({"name": "b", "id": "a"}, Format.yaml)
    assert rendered == "name: b\nid: a\n"


def test_show_csv_is_field_value_rows() -> None:
    rendered = render_show({"name": "web", "tags": ["a", "b"]}, Format.csv)
    assert list(csv.reader(io.StringIO(rendered))) == [["Field", "Value"], ["name", "web"], ["tags", "a, b"]]


def test_csv_quotes_multiline_and_commas() -> None:
    rendered = render_show(PORT, Format.csv)
    rows = {field: value for field, value in csv.reader(io.StringIO(rendered))}
    assert rows["fixed_ips"] == "subnet_id=s1, ip_address=10.0.0.5\nsubnet_id=s2, ip_address=fd00::5"


def test_json_keeps_non_ascii() -> None:
    assert "ñ" in render_show({"name": "año"}, Format.json)


def test_value_format_has_no_header() -> None:
    assert render_list(NETWORKS, COLUMNS, Format.value, ["name", "State"]) == "alpha UP\nbeta DOWN\n"
    assert render_show(PORT, Format.value, ["name", "id"]) == "web\np1\n"
    assert render_list([], COLUMNS, Format.value) == ""


def test_columns_narrow_every_format_in_the_order_given() -> None:
    assert render_list(NETWORKS, COLUMNS, Format.csv, ["state", "ID"]) == "State,ID\nUP,n1\nDOWN,n2\n"
    assert json.loads(render_list(NETWORKS, COLUMNS, Format.json, ["id"])) == [{"id": "n1"}, {"id": "n2"}]
    assert yaml.safe_load(render_show(PORT, Format.yaml, ["name"])) == {"name": "web"}
    assert [c.header for c in select_columns(COLUMNS, None)] == ["ID", "Name", "Subnets", "State"]


def test_unknown_column_names_the_choices() -> None:
    with pytest.raises(CliError, match=r"'nope': no such column \(choose from ID, Name, Subnets, State\)"):
        select_columns(COLUMNS, ["nope"])
    with pytest.raises(CliError, match="'i': no such field"):  # no prefix matching
        render_show(PORT, Format.value, ["i"])


def test_views_render_a_field_in_tables_only() -> None:
    views = {"fixed_ips": lambda ips: "\n".join(f["ip_address"] for f in ips)}
    assert dict(show_rows(PORT, views))["fixed_ips"] == "10.0.0.5\nfd00::5"
    assert json.loads(render_show(PORT, Format.json, None, views)) == PORT
