"""`-f value` and `-c/--column` on show and list commands (as `openstack ... -f value -c status` has them), and an
instance's NICs one line each in tables: against the live API server, through the real CLI."""

from __future__ import annotations

import csv
import io
import json

import httpx
import pytest

from tests.support.cli import Cli, show_table, table_dicts
from tests.support.server import RunningServer


@pytest.fixture
def cli(server: RunningServer) -> Cli:
    return Cli(server.url)


def test_show_value_of_one_field(cli: Cli) -> None:
    net = cli.json("network", "create", "blue", "--mtu", "1400")
    assert cli.out("network", "show", "blue", "-f", "value", "-c", "status") == "ACTIVE\n"
    # in the order given, any case of the key
    assert cli.out("network", "show", "blue", "-f", "value", "-c", "MTU", "--column", "id") == f"1400\n{net['id']}\n"
    assert cli.json("network", "show", "blue", "-c", "name", "-c", "mtu") == {"name": "blue", "mtu": 1400}
    assert show_table(cli.out("network", "show", "blue", "-c", "name")) == {"name": "blue"}
    rows = list(csv.reader(io.StringIO(cli.out("network", "show", "blue", "-f", "csv", "-c", "id"))))
    assert rows == [["Field", "Value"], ["id", net["id"]]]


def test_list_value_and_columns(cli: Cli) -> None:
    a = cli.json("network", "create", "a-net")
    b = cli.json("network", "create", "b-net")
    # headers or keys, any case; no header line in value output
    lines = cli.out("network", "list", "-f", "value", "-c", "name", "-c", "ID").splitlines()
    assert sorted(lines) == sorted([f"a-net {a['id']}", f"b-net {b['id']}"])
    assert sorted(cli.out("network", "list", "-f", "value", "-c", "Name").split()) == ["a-net", "b-net"]
    table = table_dicts(cli.out("network", "list", "--long", "-c", "Name", "-c", "State"))
    assert sorted(table, key=lambda r: r["Name"]) == [
        {"Name": "a-net", "State": "UP"},
        {"Name": "b-net", "State": "UP"},
    ]
    narrowed = json.loads(cli.out("network", "list", "--long", "-f", "json", "-c", "name", "-c", "state"))
    assert sorted(narrowed, key=lambda r: r["name"]) == [
        {"name": "a-net", "State": "UP"},
        {"name": "b-net", "State": "UP"},
    ]
    assert len(cli.out("network", "list", "-f", "value").splitlines()) == 2  # every column, no header


def test_every_show_and_list_takes_column(cli: Cli, api: httpx.Client) -> None:
    net = cli.json("network", "create", "n1")
    sub = cli.json("subnet", "create", "s1", "--network", "n1", "--subnet-range", "10.77.0.0/24")
    port = cli.json("port", "create", "p1", "--network", "n1")
    router = cli.json("router", "create", "r1")
    group = cli.json("security-group", "create", "g1")
    for kind, ident in (
        ("network", net),
        ("subnet", sub),
        ("port", port),
        ("router", router),
        ("security-group", group),
    ):
        assert cli.out(kind, "show", ident["id"], "-f", "value", "-c", "id") == f"{ident['id']}\n"
        assert ident["id"] in cli.out(kind, "list", "-f", "value", "-c", "ID").split()
    assert cli.out("subnet", "show", "s1", "-f", "value", "-c", "cidr") == "10.77.0.0/24\n"


def test_unknown_column_is_one_clear_error(cli: Cli) -> None:
    cli.json("network", "create", "blue")
    error = cli.fail("network", "show", "blue", "-f", "value", "-c", "colour")
    assert error.startswith("Error: -c/--column 'colour': no such field (choose from ")
    assert "status" in error and "mtu" in error
    error = cli.fail("network", "list", "-c", "Colour")
    assert error == "Error: -c/--column 'Colour': no such column (choose from ID, Name, Subnets)"


@pytest.mark.parametrize("hostile", ["", " ", "[bold]id[/bold]", "id\nstatus", "../id", "ñ" * 300, "id,status"])
def test_hostile_column_names_are_refused_not_guessed(cli: Cli, hostile: str) -> None:
    """Nothing matches by accident (no prefix, markup or split of what was given); the error is one line."""
    cli.json("network", "create", "blue")
    for args in (("network", "show", "blue"), ("network", "list")):
        error = cli.fail(*args, "-f", "value", "-c", hostile)
        assert error.startswith("Error: -c/--column ")


def test_instance_nics_one_line_each(cli: Cli, api: httpx.Client) -> None:
    """An instance's NICs in a table: one line per NIC (they were one 300-character cell), short enough to read."""
    assert api.put("/hosts/node-1", json={"host": {"agent_version": "1"}}).status_code == 200
    for name, cidr in (("inet", "10.9.0.0/24"), ("jnet", "10.8.0.0/24")):
        net = api.post("/networks", json={"network": {"name": name}}).json()["network"]
        assert api.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": cidr}}).is_success
    inst = cli.json("instance", "create", "two", "--nets", "network=inet", "--nets", "network=jnet")
    first, second = inst["nets"]

    nets = show_table(cli.out("instance", "show", "two"))["nets"].splitlines()
    assert len(nets) == 2
    for line, nic in zip(nets, (first, second), strict=True):
        assert line.startswith(f"{nic['ifname']}: {nic['fixed_ips'][0]['ip_address']} ")
        assert f"port={nic['port_id']}" in line and f"network={nic['network_id']}" in line
        assert len(line) < 140
    # `-f value -c nets` is the same lines; json keeps the API's shape
    assert cli.out("instance", "show", "two", "-f", "value", "-c", "nets").splitlines() == nets
    assert cli.json("instance", "show", "two", "-c", "nets") == {"nets": inst["nets"]}

    [row] = table_dicts(cli.out("instance", "list"))
    assert row["Networks"].splitlines() == [
        f"{nic['network_id']}={nic['fixed_ips'][0]['ip_address']}" for nic in (first, second)
    ]
    assert cli.out("instance", "list", "-f", "value", "-c", "status") == f"{inst['status']}\n"
