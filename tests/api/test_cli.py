"""The `cloudnet` CLI end to end against the live API server (both database backends).

Commands run in-process with `--url <server>` (or CLOUDNET_URL) inside typer's CliRunner isolation;
what they print is parsed per format and what they did is checked through the API (`api`).
"""

from __future__ import annotations

import csv
import io
import json
import socket
from datetime import timedelta
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import update

from cloudnet.store import tables
from cloudnet.store.db import Store
from tests.support.cli import Cli, csv_dicts, show_table, table_dicts
from tests.support.server import RunningServer


@pytest.fixture
def cli(server: RunningServer) -> Cli:
    return Cli(server.url)


# -- the README walk-through ------------------------------------------------------------------------


def test_readme_walkthrough(cli: Cli, api: httpx.Client) -> None:
    """README.md "Walk-through", command for command, with the URL from CLOUDNET_URL."""
    env = {"CLOUDNET_URL": cli.url}

    def cloudnet(*args: str) -> str:
        return cli.ok(*args, env=env, url=False).stdout

    net = show_table(cloudnet("network", "create", "demo"))
    assert (net["name"], net["status"], net["admin_state_up"]) == ("demo", "ACTIVE", "True")
    v4 = show_table(
        cloudnet(
            *("subnet", "create", "demo-v4", "--network", "demo", "--subnet-range", "10.10.0.0/24"),
            *("--dns-nameserver", "10.10.0.53"),
        )
    )
    assert (v4["cidr"], v4["gateway_ip"], v4["network_id"]) == ("10.10.0.0/24", "10.10.0.1", net["id"])
    assert v4["dns_nameservers"] == "10.10.0.53"
    v6 = show_table(cloudnet("subnet", "create", "demo-v6", "--network", "demo", "--subnet-range", "fd00:10::/64"))
    assert (v6["cidr"], v6["ip_version"], v6["gateway_ip"]) == ("fd00:10::/64", "6", "fd00:10::1")
    web = show_table(
        cloudnet("port", "create", "web", "--network", "demo", "--fixed-ip", "subnet=demo-v4,ip-address=10.10.0.80")
    )
    assert web["fixed_ips"] == f"subnet_id={v4['id']}, ip_address=10.10.0.80"
    db = show_table(cloudnet("port", "create", "db", "--network", "demo"))  # next free address of each subnet

    networks = table_dicts(cloudnet("network", "list"))
    assert networks == [{"ID": net["id"], "Name": "demo", "Subnets": ", ".join(sorted([v4["id"], v6["id"]]))}]
    subnets = table_dicts(cloudnet("subnet", "list", "--network", "demo"))
    assert sorted(subnets, key=lambda r: r["Name"]) == [
        {"ID": v4["id"], "Name": "demo-v4", "Network": net["id"], "Subnet": "10.10.0.0/24"},
        {"ID": v6["id"], "Name": "demo-v6", "Network": net["id"], "Subnet": "fd00:10::/64"},
    ]
    ports = {row["Name"]: row for row in table_dicts(cloudnet("port", "list", "--network", "demo"))}
    assert sorted(ports) == ["db", "web"]
    assert ports["web"]["ID"] == web["id"]
    assert ports["web"]["MAC Address"] == web["mac_address"]
    assert ports["web"]["Fixed IP Addresses"] == f"subnet_id={v4['id']}, ip_address=10.10.0.80"
    assert ports["web"]["Status"] == "DOWN"
    db_ips = api.get(f"/ports/{db['id']}").json()["port"]["fixed_ips"]
    assert [ip["subnet_id"] for ip in db_ips] == [v4["id"], v6["id"]]
    assert db_ips[0]["ip_address"] == "10.10.0.2"
    assert db_ips[1]["ip_address"].startswith("fd00:10::")
    # Two addresses: one line each in the table cell.
    assert ports["db"]["Fixed IP Addresses"] == "\n".join(
        f"subnet_id={ip['subnet_id']}, ip_address={ip['ip_address']}" for ip in db_ips
    )
    shown = json.loads(cloudnet("port", "show", "web", "-f", "json"))
    assert shown == api.get(f"/ports/{web['id']}").json()["port"]
    assert shown["fixed_ips"] == [{"subnet_id": v4["id"], "ip_address": "10.10.0.80"}]

    # "Give the network a way out".
    public = show_table(
        cloudnet(
            *("network", "create", "public", "--external"),
            *("--provider-network-type", "flat", "--provider-physical-network", "physnet1"),
        )
    )
    assert (public["router:external"], public["provider:network_type"]) == ("True", "flat")
    public_v4 = show_table(
        cloudnet("subnet", "create", "public-v4", "--network", "public", "--subnet-range", "192.0.2.0/24", "--no-dhcp")
    )
    assert public_v4["enable_dhcp"] == "False"
    edge = show_table(cloudnet("router", "create", "edge"))
    assert cloudnet("router", "set", "edge", "--external-gateway", "public") == ""
    assert cloudnet("router", "add", "subnet", "edge", "demo-v4") == ""

    router = api.get(f"/routers/{edge['id']}").json()["router"]
    assert router["external_gateway_info"]["network_id"] == public["id"]
    [gateway_ip] = router["external_gateway_info"]["external_fixed_ips"]
    assert gateway_ip["subnet_id"] == public_v4["id"]
    [interface] = api.get(
        "/ports", params={"device_id": edge["id"], "device_owner": "network:router_interface"}
    ).json()["ports"]
    assert interface["fixed_ips"] == [{"subnet_id": v4["id"], "ip_address": "10.10.0.1"}]


# -- global options, connection errors --------------------------------------------------------------


def test_url_may_end_with_v2(cli: Cli) -> None:
    created = json.loads(cli.ok("--url", cli.url + "/v2.0/", "network", "create", "n", "-f", "json", url=False).stdout)
    assert [n["id"] for n in cli.json("network", "list")] == [created["id"]]


def test_unreachable_url_is_one_error_line(cli: Cli) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Nothing listens there any more.
    url = f"http://127.0.0.1:{port}"
    line = cli.fail("--url", url, "network", "list", url=False)
    assert line.startswith(f"Error: cannot reach cloudnet at {url}: ")
    line = cli.fail("network", "create", "x", env={"CLOUDNET_URL": url}, url=False)
    assert line.startswith(f"Error: cannot reach cloudnet at {url}: ")


def test_url_without_scheme_is_one_error_line(cli: Cli) -> None:
    line = cli.fail("--url", "127.0.0.1:9", "network", "list", url=False)
    assert line == "Error: cloudnet URL must start with http:// or https://, got '127.0.0.1:9'"


@pytest.fixture
def token_cli(tokens: dict[str, dict[str, object]], server: RunningServer) -> Cli:
    """A CLI against a server started with a tokens file (alice and bob projects, admin-token)."""
    return Cli(server.url)


def test_token_from_option_or_environment(token_cli: Cli, server: RunningServer) -> None:
    created = json.loads(token_cli.ok("--token", "alice-token", "network", "create", "a", "-f", "json").stdout)
    assert created["project_id"] == "alice"
    env = {"CLOUDNET_TOKEN": "bob-token"}
    assert json.loads(token_cli.ok("network", "list", "-f", "json", env=env).stdout) == []
    bobs = json.loads(token_cli.ok("network", "create", "b", "-f", "json", env=env).stdout)
    assert bobs["project_id"] == "bob"
    # Bob does not see alice's network, by name or by id.
    assert token_cli.fail("network", "show", created["id"], env=env) == f"Error: No network found for '{created['id']}'"
    line = token_cli.fail("--token", "wrong", "network", "list")
    assert line == "Error: The request you have made requires authentication. (401 HTTPUnauthorized)"
    admin = httpx.get(server.url + "/v2.0/networks", headers={"X-Auth-Token": "admin-token"}).json()["networks"]
    assert sorted((n["name"], n["project_id"]) for n in admin) == [("a", "alice"), ("b", "bob")]


# -- networks ---------------------------------------------------------------------------------------


def test_network_create_with_every_option(cli: Cli, api: httpx.Client) -> None:
    shown = cli.json(
        *("network", "create", "ext", "--mtu", "9000", "--external", "--shared", "--disable"),
        *("--provider-network-type", "vlan", "--provider-physical-network", "physnet1", "--provider-segment", "100"),
        *("--description", "uplink", "--tag", "a", "--tag", "b", "--project", "p1"),
    )
    stored = api.get(f"/networks/{shown['id']}").json()["network"]
    assert shown == stored
    assert stored["name"] == "ext"
    assert stored["mtu"] == 9000
    assert stored["router:external"] is True
    assert stored["shared"] is True
    assert stored["admin_state_up"] is False
    assert stored["provider:network_type"] == "vlan"
    assert stored["provider:physical_network"] == "physnet1"
    assert stored["provider:segmentation_id"] == 100
    assert stored["description"] == "uplink"
    assert sorted(stored["tags"]) == ["a", "b"]
    assert stored["project_id"] == "p1"


def test_network_create_defaults(cli: Cli) -> None:
    shown = cli.json("network", "create", "plain")
    assert shown["mtu"] == 1500
    assert shown["router:external"] is False
    assert shown["shared"] is False
    assert shown["admin_state_up"] is True
    assert shown["provider:network_type"] == "local"
    assert shown["tags"] == []


def test_network_provider_flat_and_conflicts(cli: Cli) -> None:
    flat = cli.json(
        *("network", "create", "flat1", "--provider-network-type", "flat", "--provider-physical-network", "phys")
    )
    assert (flat["provider:network_type"], flat["provider:physical_network"]) == ("flat", "phys")
    line = cli.fail(
        *("network", "create", "flat2", "--provider-network-type", "flat", "--provider-physical-network", "phys")
    )
    assert line == ("Error: Unable to create the flat network. Physical network phys is in use. (409 FlatNetworkInUse)")
    cli.ok(*("network", "create", "v1", "--provider-network-type", "vlan"),
           *("--provider-physical-network", "phys", "--provider-segment", "7"))  # fmt: skip
    line = cli.fail(*("network", "create", "v2", "--provider-network-type", "vlan"),
                    *("--provider-physical-network", "phys", "--provider-segment", "7"))  # fmt: skip
    assert line == (
        "Error: Unable to create the network. The VLAN 7 on physical network phys is in use. (409 VlanIdInUse)"
    )
    line = cli.fail("network", "create", "v3", "--provider-network-type", "vlan", "--provider-physical-network", "p")
    assert line.startswith("Error: Invalid input for ")
    assert "segmentation_id required for VLAN provider network" in line
    assert line.endswith("(400 HTTPBadRequest)")
    # Rejected by the CLI before any request.
    result = cli.run("network", "create", "v4", "--provider-network-type", "vxlan")
    assert result.exit_code == 2
    assert "vxlan" in result.stderr
    assert sorted(n["name"] for n in cli.json("network", "list")) == ["flat1", "v1"]


def test_network_list_filters_and_formats(cli: Cli) -> None:
    ext = cli.json("network", "create", "public", "--external")
    internal = cli.json("network", "create", "private")
    cli.ok("subnet", "create", "pub4", "--network", "public", "--subnet-range", "203.0.113.0/24")

    assert [n["id"] for n in cli.json("network", "list", "--external")] == [ext["id"]]
    assert [n["id"] for n in cli.json("network", "list", "--internal")] == [internal["id"]]
    assert [n["id"] for n in cli.json("network", "list", "--name", "private")] == [internal["id"]]
    assert cli.json("network", "list", "--name", "nothing") == []

    rows = csv_dicts(cli.ok("network", "list", "--external", "--long", "-f", "csv").stdout)
    assert len(rows) == 1
    row = rows[0]
    assert list(row) == [
        "ID", "Name", "Subnets", "Project", "Status", "State", "Shared", "External", "MTU", "Network Type",
        "Port Security", "Tags",
    ]  # fmt: skip
    [subnet] = cli.json("subnet", "list", "--network", "public")
    assert row == {
        "ID": ext["id"],
        "Name": "public",
        "Subnets": subnet["id"],
        "Project": "admin",
        "Status": "ACTIVE",
        "State": "UP",
        "Shared": "False",
        "External": "True",
        "MTU": "1500",
        "Network Type": "local",
        "Port Security": "True",
        "Tags": "",
    }

    listed = yaml.safe_load(cli.ok("network", "list", "-f", "yaml").stdout)
    assert sorted(n["name"] for n in listed) == ["private", "public"]
    assert {n["id"]: n["router:external"] for n in listed} == {ext["id"]: True, internal["id"]: False}

    table = table_dicts(cli.ok("network", "list", "--long").stdout)
    assert {r["Name"]: r["External"] for r in table} == {"public": "True", "private": "False"}
    assert {r["Name"]: r["State"] for r in table} == {"public": "UP", "private": "UP"}


def test_network_show_by_name_or_id_in_every_format(cli: Cli, api: httpx.Client) -> None:
    net = cli.json("network", "create", "blue", "--mtu", "1400", "--tag", "x")
    stored = api.get(f"/networks/{net['id']}").json()["network"]
    assert cli.json("network", "show", "blue") == stored
    assert cli.json("network", "show", net["id"]) == stored
    assert yaml.safe_load(cli.ok("network", "show", "blue", "-f", "yaml").stdout) == stored
    rows = list(csv.reader(io.StringIO(cli.ok("network", "show", net["id"], "-f", "csv").stdout)))
    assert rows[0] == ["Field", "Value"]
    as_csv = dict(rows[1:])
    assert list(as_csv) == sorted(stored)
    assert as_csv["id"] == net["id"]
    assert as_csv["mtu"] == "1400"
    assert as_csv["tags"] == "x"
    assert as_csv["router:external"] == "False"
    assert as_csv["provider:segmentation_id"] == ""
    table = show_table(cli.ok("network", "show", "blue", "-f", "TABLE").stdout)
    assert table["id"] == net["id"]
    assert table["name"] == "blue"
    assert table["mtu"] == "1400"
    assert list(table) == sorted(stored)


def test_names_that_look_like_paths_or_markup(cli: Cli, api: httpx.Client) -> None:
    for name in ("a/b", "what?x=1", "%2e%2e", ".", "..", "[bold]x[/bold]", "two words", "ünïcode"):
        net = cli.json("network", "create", name)
        assert net["name"] == name
        assert cli.json("network", "show", name)["id"] == net["id"]
        assert show_table(cli.ok("network", "show", name).stdout)["name"] == name
        cli.ok("network", "set", name, "--description", f"d{name}")
        assert api.get(f"/networks/{net['id']}").json()["network"]["description"] == f"d{name}"
    cli.ok("network", "delete", "..", ".")
    assert sorted(n["name"] for n in api.get("/networks").json()["networks"]) == sorted(
        ["a/b", "what?x=1", "%2e%2e", "[bold]x[/bold]", "two words", "ünïcode"]
    )


def test_empty_names_and_ids(cli: Cli, api: httpx.Client) -> None:
    assert cli.fail("network", "show", "") == "Error: No network found for ''"
    assert cli.fail("port", "list", "--network", "") == "Error: No network found for ''"
    unnamed = cli.json("network", "create", "")
    assert unnamed["name"] == ""
    # "" is Neutron's default name: it is looked up as one.
    assert cli.json("network", "show", "")["id"] == unnamed["id"]
    assert cli.fail("security-group", "rule", "delete", "") == "Error: A security group rule id cannot be empty"
    assert cli.fail("security-group", "rule", "show", "") == "Error: A security group rule id cannot be empty"
    cli.ok("network", "delete", "")
    assert api.get("/networks").json()["networks"] == []


def test_network_not_found_and_ambiguous(cli: Cli) -> None:
    assert cli.fail("network", "show", "nope") == "Error: No network found for 'nope'"
    first = cli.json("network", "create", "twin")
    second = cli.json("network", "create", "twin")
    assert cli.fail("network", "show", "twin") == "Error: More than one network named 'twin'; use its id"
    assert cli.fail("network", "set", "twin", "--mtu", "1400") == (
        "Error: More than one network named 'twin'; use its id"
    )
    assert cli.fail("network", "delete", "twin") == "Error: More than one network named 'twin'; use its id"
    assert cli.json("network", "show", second["id"])["id"] == second["id"]
    cli.ok("network", "delete", first["id"])
    # One left: the name resolves again.
    assert cli.json("network", "show", "twin")["id"] == second["id"]


def test_network_set(cli: Cli, api: httpx.Client) -> None:
    net = cli.json("network", "create", "n")
    result = cli.ok("network", "set", "n", "--name", "renamed", "--mtu", "1400", "--description", "d", "--disable")
    assert result.stdout == ""
    stored = api.get(f"/networks/{net['id']}").json()["network"]
    assert (stored["name"], stored["mtu"], stored["description"], stored["admin_state_up"]) == (
        "renamed", 1400, "d", False,
    )  # fmt: skip
    cli.ok("network", "set", net["id"], "--enable", "--external", "--shared")
    stored = api.get(f"/networks/{net['id']}").json()["network"]
    assert (stored["admin_state_up"], stored["router:external"], stored["shared"]) == (True, True, True)
    cli.ok("network", "set", "renamed", "--internal", "--no-share")
    stored = api.get(f"/networks/{net['id']}").json()["network"]
    assert (stored["router:external"], stored["shared"]) == (False, False)
    assert stored["revision_number"] > net["revision_number"]

    line = cli.fail("network", "set", "renamed")
    assert line == "Error: Nothing to change for network renamed; give at least one option"
    line = cli.fail("network", "set", "renamed", "--mtu", "9999")
    assert line.startswith("Error: Invalid input for mtu.")
    assert line.endswith("(400 HTTPBadRequest)")
    assert cli.fail("network", "set", "renamed", "oops") == "Error: KEY=VALUE 'oops': expected KEY=VALUE"
    assert api.get(f"/networks/{net['id']}").json()["network"]["mtu"] == 1400


def test_network_set_config_entries(cli: Cli, api: httpx.Client) -> None:
    net = cli.json("network", "create", "n")
    cli.ok("network", "set", "n", "user.owner=ops", "--set", "user.note=a=b")
    config = api.get(f"/networks/{net['id']}").json()["network"]["config"]
    assert config == {"user.note": "a=b", "user.owner": "ops"}
    # An SNAT address needs an uplink (a router with an external gateway): one clear line says so.
    error = cli.fail("network", "set", "n", "ipv4.nat.address=203.0.113.7")
    assert error.startswith("Error: Network ") and "has no uplink" in error
    assert api.get(f"/networks/{net['id']}").json()["network"]["config"] == config


def test_network_delete(cli: Cli, api: httpx.Client) -> None:
    a = cli.json("network", "create", "a")
    b = cli.json("network", "create", "b")
    c = cli.json("network", "create", "c")
    result = cli.ok("network", "delete", "a", b["id"])
    assert result.stdout == ""
    assert [n["id"] for n in api.get("/networks").json()["networks"]] == [c["id"]]
    assert api.get(f"/networks/{a['id']}").status_code == 404
    assert cli.fail("network", "delete", "a") == "Error: No network found for 'a'"


def test_delete_many_goes_on_past_failures(cli: Cli, api: httpx.Client) -> None:
    cli.ok("router", "create", "r1")
    cli.ok("router", "create", "r2")
    result = cli.run("router", "delete", "r1", "missing", "r2")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "Error: missing: No router found for 'missing'",
        "Error: Failed to delete 1 of 3 routers",
    ]
    assert api.get("/routers").json()["routers"] == []


def test_network_in_use_is_a_conflict(cli: Cli, api: httpx.Client) -> None:
    net = cli.json("network", "create", "busy")
    cli.ok("subnet", "create", "s", "--network", "busy", "--subnet-range", "10.1.0.0/24")
    cli.ok("port", "create", "p", "--network", "busy")
    line = cli.fail("network", "delete", "busy")
    assert line == (
        f"Error: Unable to complete operation on network {net['id']}. "
        "There are one or more ports still in use on the network. (409 NetworkInUse)"
    )
    assert api.get(f"/networks/{net['id']}").status_code == 200
    cli.ok("port", "delete", "p")
    cli.ok("network", "delete", "busy")
    assert api.get(f"/networks/{net['id']}").status_code == 404
    assert api.get("/subnets").json()["subnets"] == []


# -- subnets ----------------------------------------------------------------------------------------


def test_subnet_create_with_pools_dns_routes(cli: Cli, api: httpx.Client) -> None:
    net = cli.json("network", "create", "n")
    sub = cli.json(
        *("subnet", "create", "s4", "--network", "n", "--subnet-range", "10.2.0.0/24"),
        *("--gateway", "10.2.0.254", "--allocation-pool", "start=10.2.0.10,end=10.2.0.19"),
        *("--allocation-pool", "start=10.2.0.100,end=10.2.0.109"),
        *("--dns-nameserver", "10.2.0.53", "--dns-nameserver", "10.2.0.54"),
        *("--host-route", "destination=10.9.0.0/16,gateway=10.2.0.1"),
        *("--no-dhcp", "--description", "four"),
    )
    stored = api.get(f"/subnets/{sub['id']}").json()["subnet"]
    assert sub == stored
    assert stored["network_id"] == net["id"]
    assert stored["ip_version"] == 4
    assert stored["gateway_ip"] == "10.2.0.254"
    assert stored["allocation_pools"] == [
        {"start": "10.2.0.10", "end": "10.2.0.19"},
        {"start": "10.2.0.100", "end": "10.2.0.109"},
    ]
    assert stored["dns_nameservers"] == ["10.2.0.53", "10.2.0.54"]
    assert stored["host_routes"] == [{"destination": "10.9.0.0/16", "nexthop": "10.2.0.1"}]
    assert stored["enable_dhcp"] is False
    assert stored["description"] == "four"

    rows = csv_dicts(cli.ok("subnet", "list", "--long", "-f", "csv").stdout)
    assert rows == [
        {
            "ID": sub["id"],
            "Name": "s4",
            "Network": net["id"],
            "Subnet": "10.2.0.0/24",
            "Project": "admin",
            "DHCP": "False",
            "Name Servers": "10.2.0.53, 10.2.0.54",
            "Allocation Pools": "10.2.0.10-10.2.0.19, 10.2.0.100-10.2.0.109",
            "Host Routes": "destination=10.9.0.0/16,gateway=10.2.0.1",
            "IP Version": "4",
            "Gateway": "10.2.0.254",
        }
    ]
    # The first address of a port comes from the first pool.
    port = cli.json("port", "create", "p", "--network", "n")
    assert port["fixed_ips"] == [{"subnet_id": sub["id"], "ip_address": "10.2.0.10"}]


def test_subnet_ipv6_without_gateway(cli: Cli, api: httpx.Client) -> None:
    cli.ok("network", "create", "n")
    sub = cli.json(
        *("subnet", "create", "s6", "--network", "n", "--subnet-range", "fd00:2::/64", "--gateway", "none"),
        *("--allocation-pool", "start=fd00:2::10,end=fd00:2::20", "--dns-nameserver", "fd00:2::53"),
    )
    stored = api.get(f"/subnets/{sub['id']}").json()["subnet"]
    assert stored["ip_version"] == 6
    assert stored["gateway_ip"] is None
    assert stored["allocation_pools"] == [{"start": "fd00:2::10", "end": "fd00:2::20"}]
    assert stored["dns_nameservers"] == ["fd00:2::53"]
    shown = yaml.safe_load(cli.ok("subnet", "show", "s6", "-f", "yaml").stdout)
    assert shown == stored
    assert show_table(cli.ok("subnet", "show", "s6").stdout)["gateway_ip"] == ""
    assert [s["id"] for s in cli.json("subnet", "list", "--ip-version", "6")] == [sub["id"]]
    assert cli.json("subnet", "list", "--ip-version", "4") == []
    assert cli.fail("subnet", "list", "--ip-version", "5") == "Error: --ip-version 5: expected 4 or 6"


def test_subnet_create_errors(cli: Cli, api: httpx.Client) -> None:
    net = cli.json("network", "create", "n")
    cli.ok("subnet", "create", "a", "--network", "n", "--subnet-range", "10.3.0.0/24")
    line = cli.fail("subnet", "create", "b", "--network", "n", "--subnet-range", "10.3.0.128/25")
    assert line == (
        "Error: Invalid input for operation: Requested subnet with cidr: 10.3.0.128/25 for network: "
        f"{net['id']} overlaps with another subnet. (400 InvalidInput)"
    )
    assert cli.fail("subnet", "create", "b", "--network", "nope", "--subnet-range", "10.4.0.0/24") == (
        "Error: No network found for 'nope'"
    )
    assert cli.fail("subnet", "create", "b", "--network", "n", "--subnet-range", "10.4.0.0/33") == (
        "Error: --subnet-range '10.4.0.0/33': not a valid CIDR"
    )
    assert cli.fail("subnet", "create", "b", "--network", "n", "--subnet-range", "10.4.0.0/24", "--gateway", "gw") == (
        "Error: --gateway 'gw': expected an IP address or 'none'"
    )
    assert cli.fail(
        *("subnet", "create", "b", "--network", "n", "--subnet-range", "10.4.0.0/24"),
        *("--allocation-pool", "start=10.4.0.5"),
    ) == ("Error: --allocation-pool 'start=10.4.0.5': missing end")
    assert cli.fail(
        *("subnet", "create", "b", "--network", "n", "--subnet-range", "10.4.0.0/24"),
        *("--host-route", "dest=10.0.0.0/8,gateway=10.4.0.1"),
    ).startswith("Error: --host-route 'dest=10.0.0.0/8,gateway=10.4.0.1': unknown key 'dest'")
    line = cli.fail(
        *("subnet", "create", "b", "--network", "n", "--subnet-range", "10.4.0.0/24"),
        *("--allocation-pool", "start=10.5.0.1,end=10.5.0.9"),
    )
    assert line == (
        "Error: The allocation pool 10.5.0.1-10.5.0.9 spans beyond the subnet cidr 10.4.0.0/24. "
        "(400 OutOfBoundsAllocationPool)"
    )
    assert [s["name"] for s in api.get("/subnets").json()["subnets"]] == ["a"]


def test_subnet_set(cli: Cli, api: httpx.Client) -> None:
    cli.ok("network", "create", "n")
    sub = cli.json(
        *("subnet", "create", "s", "--network", "n", "--subnet-range", "10.6.0.0/24"),
        *("--dns-nameserver", "10.6.0.2", "--host-route", "destination=10.7.0.0/16,gateway=10.6.0.254"),
        *("--allocation-pool", "start=10.6.0.10,end=10.6.0.20"),
    )

    def stored() -> dict[str, Any]:
        return dict(api.get(f"/subnets/{sub['id']}").json()["subnet"])

    assert cli.ok("subnet", "set", "s", "--dns-nameserver", "10.6.0.3", "--name", "s2").stdout == ""
    assert stored()["dns_nameservers"] == ["10.6.0.2", "10.6.0.3"]
    assert stored()["name"] == "s2"
    cli.ok("subnet", "set", "s2", "--no-dns-nameservers", "--dns-nameserver", "10.6.0.4")
    assert stored()["dns_nameservers"] == ["10.6.0.4"]
    cli.ok("subnet", "set", sub["id"], "--host-route", "destination=10.8.0.0/16,gateway=10.6.0.254")
    assert stored()["host_routes"] == [
        {"destination": "10.7.0.0/16", "nexthop": "10.6.0.254"},
        {"destination": "10.8.0.0/16", "nexthop": "10.6.0.254"},
    ]
    cli.ok("subnet", "set", "s2", "--no-host-route")
    assert stored()["host_routes"] == []
    cli.ok("subnet", "set", "s2", "--allocation-pool", "start=10.6.0.100,end=10.6.0.110")
    assert stored()["allocation_pools"] == [
        {"start": "10.6.0.10", "end": "10.6.0.20"},
        {"start": "10.6.0.100", "end": "10.6.0.110"},
    ]
    cli.ok("subnet", "set", "s2", "--gateway", "10.6.0.1", "--no-dhcp", "--description", "d")
    current = stored()
    assert (current["gateway_ip"], current["enable_dhcp"], current["description"]) == ("10.6.0.1", False, "d")
    cli.ok("subnet", "set", "s2", "--gateway", "none", "--dhcp")
    current = stored()
    assert (current["gateway_ip"], current["enable_dhcp"]) == (None, True)
    assert cli.fail("subnet", "set", "s2") == "Error: Nothing to change for subnet s2; give at least one option"
    assert cli.fail("subnet", "set", "nope", "--name", "x") == "Error: No subnet found for 'nope'"


def test_subnet_delete(cli: Cli, api: httpx.Client) -> None:
    cli.ok("network", "create", "n")
    a = cli.json("subnet", "create", "a", "--network", "n", "--subnet-range", "10.10.0.0/24")
    b = cli.json("subnet", "create", "b", "--network", "n", "--subnet-range", "10.11.0.0/24")
    port = cli.json("port", "create", "p", "--network", "n", "--fixed-ip", "subnet=a")
    assert cli.fail("subnet", "delete", "a") == (
        f"Error: Unable to complete operation on subnet {a['id']}: "
        "One or more ports have an IP allocation from this subnet. (409 SubnetInUse)"
    )
    cli.ok("port", "delete", port["id"])
    cli.ok("subnet", "delete", "a", b["id"])
    assert api.get("/subnets").json()["subnets"] == []
    assert api.get("/networks").json()["networks"][0]["subnets"] == []


# -- ports ------------------------------------------------------------------------------------------


@pytest.fixture
def lan(cli: Cli) -> dict[str, Any]:
    """A network `lan` with an IPv4 subnet `lan4` (10.0.5.0/24) and an IPv6 one `lan6`."""
    net = cli.json("network", "create", "lan")
    v4 = cli.json("subnet", "create", "lan4", "--network", "lan", "--subnet-range", "10.0.5.0/24")
    v6 = cli.json("subnet", "create", "lan6", "--network", "lan", "--subnet-range", "fd00:5::/64")
    return {"network": net, "v4": v4, "v6": v6}


def test_port_create_with_every_option(cli: Cli, api: httpx.Client, lan: dict[str, Any]) -> None:
    sg = cli.json("security-group", "create", "web")
    port = cli.json(
        *("port", "create", "p1", "--network", "lan", "--fixed-ip", "subnet=lan4,ip-address=10.0.5.50"),
        *("--fixed-ip", "subnet=lan6"),
        *("--mac-address", "fa:16:3e:00:00:01", "--device-id", "vm-1", "--device-owner", "compute:nova"),
        *("--vnic-type", "direct", "--host", "host-1", "--binding-profile", "pci_slot=0000:03:00.1"),
        *("--security-group", "web", "--disable", "--description", "d", "--tag", "t1"),
    )
    stored = api.get(f"/ports/{port['id']}").json()["port"]
    assert port == stored
    assert stored["network_id"] == lan["network"]["id"]
    assert stored["fixed_ips"][0] == {"subnet_id": lan["v4"]["id"], "ip_address": "10.0.5.50"}
    assert stored["fixed_ips"][1]["subnet_id"] == lan["v6"]["id"]
    assert stored["fixed_ips"][1]["ip_address"].startswith("fd00:5::")
    assert stored["mac_address"] == "fa:16:3e:00:00:01"
    assert (stored["device_id"], stored["device_owner"]) == ("vm-1", "compute:nova")
    assert stored["binding:vnic_type"] == "direct"
    assert stored["binding:host_id"] == "host-1"
    assert stored["binding:profile"] == {"pci_slot": "0000:03:00.1"}
    assert stored["security_groups"] == [sg["id"]]
    assert stored["admin_state_up"] is False
    assert stored["description"] == "d"
    assert stored["tags"] == ["t1"]


def test_port_create_defaults_and_no_security_group(cli: Cli, api: httpx.Client, lan: dict[str, Any]) -> None:
    port = cli.json("port", "create", "p", "--network", lan["network"]["id"])
    assert sorted(ip["subnet_id"] for ip in port["fixed_ips"]) == sorted([lan["v4"]["id"], lan["v6"]["id"]])
    assert len(port["security_groups"]) == 1  # the project's default group
    default = api.get(f"/security-groups/{port['security_groups'][0]}").json()["security_group"]
    assert default["name"] == "default"
    bare = cli.json("port", "create", "bare", "--network", "lan", "--no-security-group")
    assert bare["security_groups"] == []
    line = cli.fail("port", "create", "x", "--network", "lan", "--security-group", "web", "--no-security-group")
    assert line == "Error: --security-group and --no-security-group cannot be used together"


def test_port_fixed_ip_resolves_subnets_on_the_port_network(cli: Cli, api: httpx.Client, lan: dict[str, Any]) -> None:
    # Another network has a subnet with the same name: no ambiguity, only the port's network counts.
    cli.ok("network", "create", "other")
    cli.ok("subnet", "create", "lan4", "--network", "other", "--subnet-range", "10.0.6.0/24")
    port = cli.json("port", "create", "p", "--network", "lan", "--fixed-ip", "subnet=lan4")
    assert [ip["subnet_id"] for ip in port["fixed_ips"]] == [lan["v4"]["id"]]
    # An address alone picks its subnet.
    port = cli.json("port", "create", "q", "--network", "lan", "--fixed-ip", "ip-address=10.0.5.77")
    assert port["fixed_ips"] == [{"subnet_id": lan["v4"]["id"], "ip_address": "10.0.5.77"}]
    assert cli.fail("port", "create", "r", "--network", "lan", "--fixed-ip", "subnet=nope") == (
        "Error: No subnet found for 'nope'"
    )
    assert cli.fail("port", "create", "r", "--network", "lan", "--fixed-ip", "ip=10.0.5.9").startswith(
        "Error: --fixed-ip 'ip=10.0.5.9': unknown key 'ip'"
    )


def test_port_taken_address_is_a_conflict(cli: Cli, api: httpx.Client, lan: dict[str, Any]) -> None:
    cli.ok("port", "create", "a", "--network", "lan", "--fixed-ip", "ip-address=10.0.5.20")
    line = cli.fail("port", "create", "b", "--network", "lan", "--fixed-ip", "ip-address=10.0.5.20")
    assert line.startswith("Error: ")
    assert "10.0.5.20" in line
    assert line.endswith("(409 IpAddressAlreadyAllocated)")
    raw = api.post(
        "/ports", json={"port": {"network_id": lan["network"]["id"], "fixed_ips": [{"ip_address": "10.0.5.20"}]}}
    )
    assert raw.status_code == 409
    assert line == f"Error: {raw.json()['NeutronError']['message']} (409 IpAddressAlreadyAllocated)"
    assert [p["name"] for p in api.get("/ports").json()["ports"]] == ["a"]


def test_port_list_filters(cli: Cli, api: httpx.Client, lan: dict[str, Any]) -> None:
    cli.ok("network", "create", "other")
    other4 = cli.json("subnet", "create", "other4", "--network", "other", "--subnet-range", "10.0.7.0/24")
    a = cli.json("port", "create", "a", "--network", "lan", "--fixed-ip", "ip-address=10.0.5.11", "--host", "h1")
    b = cli.json("port", "create", "b", "--network", "lan", "--fixed-ip", "subnet=lan4",
                 "--device-id", "vm-b", "--device-owner", "compute:nova")  # fmt: skip
    c = cli.json("port", "create", "c", "--network", "other", "--fixed-ip", "ip-address=10.0.7.11", "--host", "h1")

    def ids(*args: str) -> list[str]:
        return sorted(p["id"] for p in cli.json("port", "list", *args))

    assert ids() == sorted([a["id"], b["id"], c["id"]])
    assert ids("--network", "lan") == sorted([a["id"], b["id"]])
    assert ids("--network", "other") == [c["id"]]
    assert ids("--fixed-ip", "ip-address=10.0.5.11") == [a["id"]]
    assert ids("--fixed-ip", "ip-address=10.0.7.11") == [c["id"]]
    assert ids("--fixed-ip", "subnet=other4") == [c["id"]]
    assert ids("--fixed-ip", f"subnet={other4['id']},ip-address=10.0.7.11") == [c["id"]]
    assert ids("--fixed-ip", "subnet=other4,ip-address=10.0.5.11") == []
    assert ids("--host", "h1") == sorted([a["id"], c["id"]])
    assert ids("--host", "h1", "--network", "lan") == [a["id"]]
    assert ids("--device-id", "vm-b") == [b["id"]]
    assert ids("--device-owner", "compute:nova") == [b["id"]]
    assert ids("--fixed-ip", "ip-address=10.9.9.9") == []

    rows = csv_dicts(cli.ok("port", "list", "--fixed-ip", "ip-address=10.0.5.11", "--long", "-f", "csv").stdout)
    assert rows == [
        {
            "ID": a["id"],
            "Name": "a",
            "MAC Address": a["mac_address"],
            "Fixed IP Addresses": f"subnet_id={lan['v4']['id']}, ip_address=10.0.5.11",
            "Status": "DOWN",
            "Network": lan["network"]["id"],
            "Device ID": "",
            "Device Owner": "",
            "Host": "h1",
            "VNIC Type": "normal",
            "Security Groups": a["security_groups"][0],
            "Port Security": "True",
            "Allowed Address Pairs": "",
            "State": "UP",
            "Tags": "",
        }
    ]
    listed = yaml.safe_load(cli.ok("port", "list", "--network", "other", "-f", "yaml").stdout)
    assert listed == [api.get(f"/ports/{c['id']}").json()["port"]]


def test_port_show(cli: Cli, api: httpx.Client, lan: dict[str, Any]) -> None:
    port = cli.json("port", "create", "p", "--network", "lan", "--fixed-ip", "ip-address=10.0.5.30")
    stored = api.get(f"/ports/{port['id']}").json()["port"]
    assert cli.json("port", "show", "p") == stored
    assert yaml.safe_load(cli.ok("port", "show", port["id"], "-f", "yaml").stdout) == stored
    table = show_table(cli.ok("port", "show", "p").stdout)
    assert table["fixed_ips"] == f"subnet_id={lan['v4']['id']}, ip_address=10.0.5.30"
    assert table["binding:profile"] == ""
    assert table["admin_state_up"] == "True"
    assert cli.fail("port", "show", "nope") == "Error: No port found for 'nope'"


def test_port_set(cli: Cli, api: httpx.Client, lan: dict[str, Any]) -> None:
    port = cli.json("port", "create", "p", "--network", "lan", "--fixed-ip", "ip-address=10.0.5.40")
    web = cli.json("security-group", "create", "web")

    def stored() -> dict[str, Any]:
        return dict(api.get(f"/ports/{port['id']}").json()["port"])

    assert cli.ok("port", "set", "p", "--name", "x").stdout == ""
    assert stored()["name"] == "x"
    cli.ok("port", "set", "x", "--fixed-ip", "ip-address=10.0.5.41", "--security-group", "web")
    current = stored()
    assert current["fixed_ips"] == [
        {"subnet_id": lan["v4"]["id"], "ip_address": "10.0.5.40"},
        {"subnet_id": lan["v4"]["id"], "ip_address": "10.0.5.41"},
    ]
    assert current["security_groups"] == sorted([port["security_groups"][0], web["id"]])
    cli.ok("port", "set", "x", "--no-fixed-ip", "--fixed-ip", "subnet=lan6", "--no-security-group")
    current = stored()
    assert [ip["subnet_id"] for ip in current["fixed_ips"]] == [lan["v6"]["id"]]
    assert current["security_groups"] == []
    cli.ok("port", "set", port["id"], "--device-id", "vm-9", "--device-owner", "compute:nova",
           "--host", "h9", "--vnic-type", "direct", "--disable", "--description", "moved")  # fmt: skip
    current = stored()
    assert (current["device_id"], current["device_owner"], current["binding:host_id"]) == (
        "vm-9", "compute:nova", "h9",
    )  # fmt: skip
    assert (current["binding:vnic_type"], current["admin_state_up"], current["description"]) == (
        "direct", False, "moved",
    )  # fmt: skip
    cli.ok("port", "set", "x", "--enable")
    assert stored()["admin_state_up"] is True
    assert cli.fail("port", "set", "x") == "Error: Nothing to change for port x; give at least one option"
    # The server refuses an address outside the subnets: one line, nothing changed.
    line = cli.fail("port", "set", "x", "--fixed-ip", "ip-address=192.0.2.1")
    assert line.endswith("(400 InvalidInput)")
    assert [ip["subnet_id"] for ip in stored()["fixed_ips"]] == [lan["v6"]["id"]]


def test_port_delete(cli: Cli, api: httpx.Client, lan: dict[str, Any]) -> None:
    a = cli.json("port", "create", "a", "--network", "lan")
    b = cli.json("port", "create", "b", "--network", "lan")
    c = cli.json("port", "create", "c", "--network", "lan")
    assert cli.ok("port", "delete", "a", b["id"]).stdout == ""
    assert [p["id"] for p in api.get("/ports").json()["ports"]] == [c["id"]]
    assert api.get(f"/ports/{a['id']}").status_code == 404
    assert cli.fail("port", "delete", a["id"]) == f"Error: No port found for '{a['id']}'"


# -- routers ----------------------------------------------------------------------------------------


def test_router_lifecycle(cli: Cli, api: httpx.Client, lan: dict[str, Any]) -> None:
    public = cli.json("network", "create", "public", "--external")
    pub4 = cli.json("subnet", "create", "pub4", "--network", "public", "--subnet-range", "203.0.113.0/24")
    router = cli.json("router", "create", "r1", "--description", "edge")
    assert (router["name"], router["description"], router["admin_state_up"]) == ("r1", "edge", True)
    assert router["external_gateway_info"] is None

    def stored() -> dict[str, Any]:
        return dict(api.get(f"/routers/{router['id']}").json()["router"])

    assert cli.ok("router", "set", "r1", "--external-gateway", "public").stdout == ""
    gateway = stored()["external_gateway_info"]
    assert gateway["network_id"] == public["id"]
    assert gateway["enable_snat"] is True
    [gw_ip] = gateway["external_fixed_ips"]
    assert gw_ip["subnet_id"] == pub4["id"]

    cli.ok("router", "set", "r1", "--external-gateway", "public", "--disable-snat",
           "--fixed-ip", "subnet=pub4,ip-address=203.0.113.9")  # fmt: skip
    gateway = stored()["external_gateway_info"]
    assert gateway["enable_snat"] is False
    assert gateway["external_fixed_ips"] == [{"subnet_id": pub4["id"], "ip_address": "203.0.113.9"}]

    assert cli.ok("router", "add", "subnet", "r1", "lan4").stdout == ""
    [iface] = api.get("/ports", params={"device_id": router["id"], "device_owner": "network:router_interface"}).json()[
        "ports"
    ]
    assert iface["fixed_ips"] == [{"subnet_id": lan["v4"]["id"], "ip_address": "10.0.5.1"}]
    line = cli.fail("router", "add", "subnet", "r1", "lan4")
    assert line == f"Error: Bad router request: Router already has a port on subnet {lan['v4']['id']}. (400 BadRequest)"
    line = cli.fail("router", "delete", "r1")
    assert line == f"Error: Router {router['id']} still has ports (409 RouterInUse)"

    rows = table_dicts(cli.ok("router", "list", "--long").stdout)
    assert len(rows) == 1
    assert rows[0]["Name"] == "r1"
    assert rows[0]["State"] == "UP"
    assert f"network_id={public['id']}" in rows[0]["External Gateway Info"]
    assert "enable_snat=False" in rows[0]["External Gateway Info"]
    listed = cli.json("router", "list")
    assert listed == [stored()]
    assert show_table(cli.ok("router", "show", "r1").stdout)["id"] == router["id"]

    assert cli.ok("router", "remove", "subnet", "r1", lan["v4"]["id"]).stdout == ""
    assert api.get(f"/ports/{iface['id']}").status_code == 404
    line = cli.fail("router", "remove", "subnet", "r1", "lan4")
    assert line == (
        f"Error: Router {router['id']} has no interface on subnet {lan['v4']['id']} "
        "(404 RouterInterfaceNotFoundForSubnet)"
    )

    cli.ok("router", "set", "r1", "--name", "r2", "--disable", "--description", "d2")
    current = stored()
    assert (current["name"], current["admin_state_up"], current["description"]) == ("r2", False, "d2")
    cli.ok("router", "set", "r2", "--no-external-gateway")
    assert stored()["external_gateway_info"] is None
    assert api.get("/ports", params={"network_id": public["id"]}).json()["ports"] == []

    assert cli.ok("router", "delete", "r2").stdout == ""
    assert api.get(f"/routers/{router['id']}").status_code == 404


def test_router_ports_and_gateway_errors(cli: Cli, api: httpx.Client, lan: dict[str, Any]) -> None:
    router = cli.json("router", "create", "r", "--disable")
    assert router["admin_state_up"] is False
    port = cli.json("port", "create", "rp", "--network", "lan", "--fixed-ip", "ip-address=10.0.5.254")
    cli.ok("router", "add", "port", "r", "rp")
    attached = api.get(f"/ports/{port['id']}").json()["port"]
    assert (attached["device_id"], attached["device_owner"]) == (router["id"], "network:router_interface")
    cli.ok("router", "remove", "port", "r", port["id"])
    assert api.get(f"/ports/{port['id']}").status_code == 404

    line = cli.fail("router", "set", "r", "--external-gateway", "lan")
    assert line == (
        f"Error: Bad router request: Network {lan['network']['id']} is not a valid external network. (400 BadRequest)"
    )
    assert cli.fail("router", "set", "r", "--enable-snat") == (
        "Error: --fixed-ip and --enable-snat/--disable-snat need --external-gateway"
    )
    assert cli.fail("router", "set", "r", "--no-external-gateway", "--external-gateway", "lan") == (
        "Error: --no-external-gateway cannot be combined with other gateway options"
    )
    assert cli.fail("router", "set", "r") == "Error: Nothing to change for router r; give at least one option"
    assert cli.fail("router", "add", "subnet", "r", "nope") == "Error: No subnet found for 'nope'"
    assert cli.fail("router", "add", "subnet", "nope", "lan4") == "Error: No router found for 'nope'"


# -- security groups --------------------------------------------------------------------------------


def test_security_group_lifecycle(cli: Cli, api: httpx.Client) -> None:
    sg = cli.json("security-group", "create", "web", "--description", "web servers")
    stored = api.get(f"/security-groups/{sg['id']}").json()["security_group"]
    assert sg == stored
    assert (sg["name"], sg["description"]) == ("web", "web servers")

    listed = csv_dicts(cli.ok("security-group", "list", "-f", "csv").stdout)
    assert {
        "ID": sg["id"],
        "Name": "web",
        "Description": "web servers",
        "Project": "admin",
        "Stateful": "True",
    } in listed
    shown = yaml.safe_load(cli.ok("security-group", "show", "web", "-f", "yaml").stdout)
    assert shown == stored
    table = show_table(cli.ok("security-group", "show", sg["id"]).stdout)
    assert table["name"] == "web"
    assert table["id"] == sg["id"]

    assert cli.ok("security-group", "set", "web", "--name", "www", "--description", "d").stdout == ""
    current = api.get(f"/security-groups/{sg['id']}").json()["security_group"]
    assert (current["name"], current["description"]) == ("www", "d")
    assert cli.fail("security-group", "set", "www") == (
        "Error: Nothing to change for security group www; give at least one option"
    )

    cli.ok("security-group", "create", "twin")
    cli.ok("security-group", "create", "twin")
    assert cli.fail("security-group", "show", "twin") == (
        "Error: More than one security group named 'twin'; use its id"
    )

    assert cli.ok("security-group", "delete", "www").stdout == ""
    assert api.get(f"/security-groups/{sg['id']}").status_code == 404
    assert cli.fail("security-group", "show", "www") == "Error: No security group found for 'www'"


def test_security_group_in_use_is_a_conflict(cli: Cli, api: httpx.Client, lan: dict[str, Any]) -> None:
    sg = cli.json("security-group", "create", "web")
    port = cli.json("port", "create", "p", "--network", "lan", "--security-group", "web")
    line = cli.fail("security-group", "delete", "web")
    assert line == f"Error: Security Group {sg['id']} in use. (409 SecurityGroupInUse)"
    assert api.get(f"/security-groups/{sg['id']}").status_code == 200
    cli.ok("port", "delete", port["id"])
    cli.ok("security-group", "delete", "web")


def test_security_group_rules(cli: Cli, api: httpx.Client) -> None:
    web = cli.json("security-group", "create", "web")
    admins = cli.json("security-group", "create", "admins")
    defaults = {r["id"] for r in web["security_group_rules"]}

    https = cli.json(
        *("security-group", "rule", "create", "web", "--protocol", "TCP", "--dst-port", "443"),
        *("--remote-ip", "198.51.100.0/24", "--description", "https"),
    )
    stored = api.get(f"/security-group-rules/{https['id']}").json()["security_group_rule"]
    assert https == stored
    assert stored["security_group_id"] == web["id"]
    assert (stored["direction"], stored["ethertype"], stored["protocol"]) == ("ingress", "IPv4", "tcp")
    assert (stored["port_range_min"], stored["port_range_max"]) == (443, 443)
    assert stored["remote_ip_prefix"] == "198.51.100.0/24"
    assert stored["description"] == "https"

    ssh6 = yaml.safe_load(
        cli.ok(
            *("security-group", "rule", "create", web["id"], "--egress", "--protocol", "udp"),
            *("--dst-port", "8000:8080", "--remote-ip", "fd00::/8", "-f", "yaml"),
        ).stdout
    )
    assert (ssh6["direction"], ssh6["ethertype"], ssh6["protocol"]) == ("egress", "IPv6", "udp")
    assert (ssh6["port_range_min"], ssh6["port_range_max"]) == (8000, 8080)

    from_admins = cli.json(
        *("security-group", "rule", "create", "web", "--remote-group", "admins"),
        *("--ethertype", "ipv6", "--protocol", "any"),
    )
    assert from_admins["remote_group_id"] == admins["id"]
    assert from_admins["ethertype"] == "IPv6"
    assert from_admins["protocol"] is None

    line = cli.fail(
        *("security-group", "rule", "create", "web", "--protocol", "tcp", "--dst-port", "443"),
        *("--remote-ip", "198.51.100.0/24"),
    )
    assert line == f"Error: Security group rule already exists. Rule id is {https['id']}. (409 SecurityGroupRuleExists)"
    assert cli.fail("security-group", "rule", "create", "web", "--dst-port", "70000") == (
        "Error: --dst-port '70000': expected 0 <= N <= M <= 65535"
    )
    assert cli.fail(
        "security-group", "rule", "create", "web", "--remote-ip", "10.0.0.0/8", "--remote-group", "admins"
    ) == ("Error: --remote-ip and --remote-group cannot be used together")

    rows = table_dicts(cli.ok("security-group", "rule", "list", "web").stdout)
    assert list(rows[0]) == [
        "ID", "IP Protocol", "Ethertype", "IP Range", "Port Range", "Direction", "Remote Security Group",
    ]  # fmt: skip
    by_id = {r["ID"]: r for r in rows}
    assert set(by_id) == defaults | {https["id"], ssh6["id"], from_admins["id"]}
    assert by_id[https["id"]]["Port Range"] == "443:443"
    assert by_id[https["id"]]["IP Range"] == "198.51.100.0/24"
    assert by_id[ssh6["id"]]["Port Range"] == "8000:8080"
    assert by_id[from_admins["id"]]["Remote Security Group"] == admins["id"]

    every = csv_dicts(cli.ok("security-group", "rule", "list", "-f", "csv").stdout)
    assert {r["ID"]: r["Security Group"] for r in every if r["ID"] == https["id"]} == {https["id"]: web["id"]}
    groups = {g["id"]: g["name"] for g in api.get("/security-groups").json()["security_groups"]}
    assert {r["Security Group"] for r in every} == set(groups)
    assert sorted(groups.values()) in (["admins", "web"], ["admins", "default", "web"])

    shown = cli.json("security-group", "rule", "show", https["id"])
    assert shown == stored

    assert cli.ok("security-group", "rule", "delete", https["id"], ssh6["id"]).stdout == ""
    remaining = {r["id"] for r in cli.json("security-group", "rule", "list", "web")}
    assert remaining == defaults | {from_admins["id"]}
    assert api.get(f"/security-group-rules/{https['id']}").status_code == 404
    line = cli.fail("security-group", "rule", "delete", https["id"])
    assert line == f"Error: Security group rule {https['id']} does not exist (404 SecurityGroupRuleNotFound)"
    line = cli.fail("security-group", "rule", "show", "not-a-rule")
    assert line == "Error: Security group rule not-a-rule does not exist (404 SecurityGroupRuleNotFound)"


def test_network_routes_of_an_external_network(cli: Cli, api: httpx.Client) -> None:
    net = cli.json("network", "create", "pub", "--external", "--route", "198.51.100.0/24")
    assert net["cloudnet:routes"] == ["198.51.100.0/24"]
    cli.ok("network", "set", "pub", "--route", "203.0.113.7/24", "--route", "2001:db8:100::/56")
    stored = api.get(f"/networks/{net['id']}").json()["network"]["cloudnet:routes"]
    assert stored == ["2001:db8:100::/56", "203.0.113.0/24"]
    cli.ok("network", "set", "pub", "--no-route")
    assert api.get(f"/networks/{net['id']}").json()["network"]["cloudnet:routes"] == []
    cli.json("network", "create", "inner")
    assert "only be set on an external network" in cli.fail("network", "set", "inner", "--route", "10.0.0.0/8")


# -- hosts ------------------------------------------------------------------------------------------


def test_host_delete(cli: Cli, api: httpx.Client, store: Store) -> None:
    assert api.put("/hosts/node-1", json={"host": {"agent_version": "1"}}).status_code == 200
    line = cli.fail("host", "delete", "node-1")
    assert line.startswith("Error: Host node-1 is alive") and line.endswith("(409 HostAlive)")
    with store.write() as tx:  # its agent stopped an hour ago
        tx.conn.execute(update(tables.hosts).where(tables.hosts.c.name == "node-1").values(
            heartbeat_at=tx.now - timedelta(hours=1)))  # fmt: skip
    assert cli.ok("host", "delete", "node-1").stdout == ""
    assert api.get("/hosts").json()["hosts"] == []
    assert cli.fail("host", "delete", "node-1") == "Error: Host node-1 could not be found. (404 HostNotFound)"


def test_instance_create_with_and_without_a_namespace(cli: Cli, api: httpx.Client) -> None:
    assert api.put("/hosts/node-1", json={"host": {"agent_version": "1"}}).status_code == 200
    net = api.post("/networks", json={"network": {"name": "inet"}}).json()["network"]
    assert api.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.9.0.0/24"}}).is_success
    own = cli.json("instance", "create", "own", "--netns", "ns-own", "--nets", "network=inet")
    assert own["netns"] == "ns-own" and len(own["nets"]) == 1
    made = cli.json("instance", "create", "made", "--nets", "network=inet")
    assert made["netns"].startswith("cloudnet-ns-")  # cloudnet provides it, and says which
    assert "reserved" in cli.fail("instance", "create", "bad", "--netns", "cloudnet-ns-x")


def test_port_security_options(cli: Cli, api: httpx.Client, lan: dict[str, Any]) -> None:
    """`--enable/--disable-port-security` on networks and ports, `--allowed-address` (added; `--no-allowed-address`
    clears), `--stateful/--stateless` groups, as `openstack` spells them."""
    net = cli.json("network", "create", "bare", "--disable-port-security")
    assert net["port_security_enabled"] is False
    cli.ok("network", "set", "bare", "--enable-port-security")
    assert api.get(f"/networks/{net['id']}").json()["network"]["port_security_enabled"] is True

    port = cli.json("port", "create", "vip", "--network", "lan", "--allowed-address", "ip-address=10.0.5.200",
                    "--allowed-address", "ip-address=10.0.6.0/24,mac-address=fa:16:3e:00:00:07")  # fmt: skip
    assert sorted(p["ip_address"] for p in port["allowed_address_pairs"]) == ["10.0.5.200", "10.0.6.0/24"]
    cli.ok("port", "set", "vip", "--allowed-address", "ip-address=10.0.5.201")
    stored = api.get(f"/ports/{port['id']}").json()["port"]
    assert sorted(p["ip_address"] for p in stored["allowed_address_pairs"]) == ["10.0.5.200", "10.0.5.201",
                                                                                  "10.0.6.0/24"]  # fmt: skip
    # Off with pairs and groups still there: the server's 409, one line; off with both cleared: done.
    line = cli.fail("port", "set", "vip", "--disable-port-security")
    assert line.endswith("(409 AddressPairAndPortSecurityRequired)"), line
    cli.ok("port", "set", "vip", "--disable-port-security", "--no-allowed-address", "--no-security-group")
    stored = api.get(f"/ports/{port['id']}").json()["port"]
    assert (stored["port_security_enabled"], stored["security_groups"], stored["allowed_address_pairs"]) == (
        False, [], [])  # fmt: skip
    assert cli.fail("port", "create", "x", "--network", "lan", "--allowed-address", "mac-address=fa:16:3e:00:00:01") \
        == "Error: --allowed-address 'mac-address=fa:16:3e:00:00:01': missing ip-address"  # fmt: skip
    assert cli.json("port", "create", "open", "--network", "lan", "--disable-port-security")["security_groups"] == []

    group = cli.json("security-group", "create", "udp", "--stateless")
    assert group["stateful"] is False
    cli.ok("security-group", "set", "udp", "--stateful")
    assert api.get(f"/security-groups/{group['id']}").json()["security_group"]["stateful"] is True
