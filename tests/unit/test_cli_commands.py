"""The commands end to end against an in-memory fake of the Neutron API (httpx.MockTransport)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from cloudnet.cli.main import app

KEYS = {
    "networks": "network",
    "subnets": "subnet",
    "ports": "port",
    "routers": "router",
    "security-groups": "security_group",
    "security-group-rules": "security_group_rule",
}


def not_found(collection: str, ident: str) -> httpx.Response:
    key = KEYS.get(collection, collection)
    label = key.replace("_", " ").capitalize()
    kind = "".join(part.capitalize() for part in key.split("_"))
    error = {"type": f"{kind}NotFound", "message": f"{label} {ident} could not be found.", "detail": ""}
    return httpx.Response(404, json={"NeutronError": error})


class FakeNeutron:
    """Just enough of Neutron v2.0 to drive the CLI; records every request."""

    def __init__(self) -> None:
        self.store: dict[str, dict[str, dict[str, Any]]] = {c: {} for c in KEYS}
        self.requests: list[httpx.Request] = []

    def add(self, collection: str, **fields: Any) -> dict[str, Any]:
        resource = {"id": str(uuid.uuid4()), "name": "", **fields}
        self.store[collection][resource["id"]] = resource
        return resource

    def bodies(self, method: str) -> list[tuple[str, Any]]:
        return [(r.url.path, json.loads(r.content) if r.content else None) for r in self.requests if r.method == method]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        parts = request.url.path.removeprefix("/v2.0/").split("/")
        collection, ident, action = [*parts, None, None][:3]
        items = self.store[collection]
        key = KEYS[collection]
        body = json.loads(request.content) if request.content else None
        if action is not None:
            return httpx.Response(200, json={"id": ident, **body})
        if ident is None and request.method == "GET":
            found = [
                r for r in items.values() if all(str(r.get(k)) == v for k, v in request.url.params.items() if k in r)
            ]
            return httpx.Response(200, json={f"{key}s": found})
        if ident is None and request.method == "POST":
            return httpx.Response(201, json={key: self.add(collection, **body[key])})
        if ident not in items:
            return not_found(collection, ident)
        if request.method == "GET":
            return httpx.Response(200, json={key: items[ident]})
        if request.method == "PUT":
            items[ident].update(body[key])
            return httpx.Response(200, json={key: items[ident]})
        del items[ident]
        return httpx.Response(204)


@pytest.fixture
def fake() -> FakeNeutron:
    return FakeNeutron()


def run(fake: FakeNeutron, *args: str, env: dict[str, str] | None = None) -> Any:
    http = httpx.Client(transport=httpx.MockTransport(fake))
    return CliRunner().invoke(app, list(args), obj=http, env=env)


def test_network_create_sends_neutron_attribute_names(fake: FakeNeutron) -> None:
    result = run(
        fake,
        *("network", "create", "ext", "--mtu", "9000", "--external", "--shared", "--disable"),
        *("--provider-network-type", "vlan", "--provider-physical-network", "physnet1"),
        *("--provider-segment", "100", "--tag", "a", "--tag", "b", "--project", "p1", "-f", "json"),
    )
    assert result.exit_code == 0, result.output
    [(path, body)] = fake.bodies("POST")
    assert path == "/v2.0/networks"
    assert body == {
        "network": {
            "name": "ext",
            "mtu": 9000,
            "shared": True,
            "router:external": True,
            "admin_state_up": False,
            "provider:network_type": "vlan",
            "provider:physical_network": "physnet1",
            "provider:segmentation_id": 100,
            "tags": ["a", "b"],
            "project_id": "p1",
        }
    }
    assert json.loads(result.stdout)["name"] == "ext"


def test_minimal_create_leaves_defaults_to_the_server(fake: FakeNeutron) -> None:
    assert run(fake, "network", "create", "n").exit_code == 0
    assert fake.bodies("POST") == [("/v2.0/networks", {"network": {"name": "n"}})]


def test_url_and_token_come_from_options_or_environment(fake: FakeNeutron) -> None:
    run(fake, "--url", "http://api.example:1234/", "--token", "secret", "network", "list")
    run(fake, "network", "list", env={"CLOUDNET_URL": "http://env.example", "CLOUDNET_TOKEN": "t2"})
    run(fake, "network", "list")
    seen = [(str(r.url), r.headers["X-Auth-Token"]) for r in fake.requests]
    assert seen == [
        ("http://api.example:1234/v2.0/networks", "secret"),
        ("http://env.example/v2.0/networks", "t2"),
        ("http://127.0.0.1:9696/v2.0/networks", "admin"),
    ]


def test_show_by_name_falls_back_to_a_name_query(fake: FakeNeutron) -> None:
    net = fake.add("networks", name="private", mtu=1500)
    result = run(fake, "network", "show", "private", "-f", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == net
    assert [str(r.url) for r in fake.requests] == [
        "http://127.0.0.1:9696/v2.0/networks/private",
        "http://127.0.0.1:9696/v2.0/networks?name=private",
    ]


def test_show_by_id_needs_one_request(fake: FakeNeutron) -> None:
    net = fake.add("networks", name="private")
    assert run(fake, "network", "show", net["id"]).exit_code == 0
    assert len(fake.requests) == 1


def test_unknown_name_is_one_error_line(fake: FakeNeutron) -> None:
    result = run(fake, "network", "show", "nope")
    assert result.exit_code == 1
    assert result.stderr == "Error: No network found for 'nope'\n"
    assert result.stdout == ""


def test_ambiguous_name(fake: FakeNeutron) -> None:
    fake.add("security-groups", name="web")
    fake.add("security-groups", name="web")
    result = run(fake, "security-group", "show", "web")
    assert result.exit_code == 1
    assert result.stderr == "Error: More than one security group named 'web'; use its id\n"


def test_server_error_is_one_line(fake: FakeNeutron) -> None:
    net = fake.add("networks", name="n")

    def conflict(request: httpx.Request) -> httpx.Response:
        if request.method == "DELETE":
            error = {"type": "NetworkInUse", "message": f"Unable to complete operation on network {net['id']}."}
            return httpx.Response(409, json={"NeutronError": {**error, "detail": ""}})
        return fake(request)

    http = httpx.Client(transport=httpx.MockTransport(conflict))
    result = CliRunner().invoke(app, ["network", "delete", "n"], obj=http)
    assert result.exit_code == 1
    assert result.stderr == f"Error: Unable to complete operation on network {net['id']}. (409 NetworkInUse)\n"


def test_connection_refused() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    http = httpx.Client(transport=httpx.MockTransport(refuse))
    result = CliRunner().invoke(app, ["--url", "http://10.9.9.9:9696", "router", "list"], obj=http)
    assert result.exit_code == 1
    assert result.stderr == "Error: cannot reach cloudnet at http://10.9.9.9:9696: Connection refused\n"


def test_network_set_positional_pairs_go_into_config(fake: FakeNeutron) -> None:
    net = fake.add("networks", name="n")
    result = run(fake, "network", "set", "n", "ipv4.nat.address=203.0.113.7", "--set", "a=b", "--mtu", "1400")
    assert result.exit_code == 0, result.output
    assert fake.bodies("PUT") == [
        (
            f"/v2.0/networks/{net['id']}",
            {"network": {"mtu": 1400, "config": {"ipv4.nat.address": "203.0.113.7", "a": "b"}}},
        )
    ]


def test_network_set_flags(fake: FakeNeutron) -> None:
    net = fake.add("networks", name="n")
    assert run(fake, "network", "set", net["id"], "--disable", "--internal", "--no-share").exit_code == 0
    assert fake.bodies("PUT")[0][1] == {"network": {"admin_state_up": False, "router:external": False, "shared": False}}


def test_set_without_changes_is_an_error(fake: FakeNeutron) -> None:
    fake.add("networks", name="n")
    result = run(fake, "network", "set", "n")
    assert result.exit_code == 1
    assert "Nothing to change" in result.stderr
    assert fake.bodies("PUT") == []


def test_bad_pair_is_one_error_line(fake: FakeNeutron) -> None:
    fake.add("networks", name="n")
    result = run(fake, "network", "set", "n", "oops")
    assert result.exit_code == 1
    assert result.stderr == "Error: KEY=VALUE 'oops': expected KEY=VALUE\n"


def test_network_list_filters_and_columns(fake: FakeNeutron) -> None:
    fake.add("networks", name="a", subnets=["s1"], **{"router:external": True})
    result = run(fake, "network", "list", "--external", "--name", "a", "-f", "csv")
    assert result.exit_code == 0, result.output
    assert fake.requests[0].url.params.multi_items() == [("router:external", "true"), ("name", "a")]
    assert result.stdout.splitlines()[0] == "ID,Name,Subnets"


def test_subnet_create(fake: FakeNeutron) -> None:
    net = fake.add("networks", name="private")
    result = run(
        fake,
        *("subnet", "create", "s", "--network", "private", "--subnet-range", "fd00::/64", "--gateway", "none"),
        *("--allocation-pool", "start=fd00::10,end=fd00::20", "--dns-nameserver", "fd00::53"),
        *("--host-route", "destination=fd01::/64,gateway=fd00::1", "--no-dhcp", "--description", "d"),
    )
    assert result.exit_code == 0, result.output
    assert fake.bodies("POST")[0][1] == {
        "subnet": {
            "name": "s",
            "network_id": net["id"],
            "cidr": "fd00::/64",
            "ip_version": 6,
            "gateway_ip": None,
            "allocation_pools": [{"start": "fd00::10", "end": "fd00::20"}],
            "dns_nameservers": ["fd00::53"],
            "host_routes": [{"destination": "fd01::/64", "nexthop": "fd00::1"}],
            "enable_dhcp": False,
            "description": "d",
        }
    }


def test_subnet_set_appends_or_clears(fake: FakeNeutron) -> None:
    routes = [{"destination": "10.1.0.0/16", "nexthop": "10.0.0.1"}]
    sub = fake.add("subnets", name="s", dns_nameservers=["10.0.0.2"], host_routes=routes)
    assert run(fake, "subnet", "set", "s", "--dns-nameserver", "10.0.0.3", "--no-host-route").exit_code == 0
    assert fake.bodies("PUT") == [
        (f"/v2.0/subnets/{sub['id']}", {"subnet": {"dns_nameservers": ["10.0.0.2", "10.0.0.3"], "host_routes": []}})
    ]


def test_port_create_resolves_subnets_on_its_network_and_groups(fake: FakeNeutron) -> None:
    net = fake.add("networks", name="private")
    sub = fake.add("subnets", name="v4", network_id=net["id"])
    fake.add("subnets", name="v4", network_id="elsewhere")
    sg = fake.add("security-groups", name="web")
    result = run(
        fake,
        *("port", "create", "p", "--network", "private", "--fixed-ip", "subnet=v4,ip-address=10.0.0.5"),
        *("--vnic-type", "direct", "--host", "h1", "--binding-profile", "pci_slot=0000:03:00.1"),
        *("--security-group", "web", "--device-owner", "compute:nova", "--tag", "t"),
    )
    assert result.exit_code == 0, result.output
    assert fake.bodies("POST")[0][1] == {
        "port": {
            "name": "p",
            "network_id": net["id"],
            "fixed_ips": [{"subnet_id": sub["id"], "ip_address": "10.0.0.5"}],
            "device_owner": "compute:nova",
            "binding:vnic_type": "direct",
            "binding:host_id": "h1",
            "binding:profile": {"pci_slot": "0000:03:00.1"},
            "security_groups": [sg["id"]],
            "tags": ["t"],
        }
    }


def test_port_create_without_security_groups(fake: FakeNeutron) -> None:
    fake.add("networks", name="private")
    assert run(fake, "port", "create", "p", "--network", "private", "--no-security-group").exit_code == 0
    assert fake.bodies("POST")[0][1]["port"]["security_groups"] == []


def test_port_list_fixed_ip_filter(fake: FakeNeutron) -> None:
    result = run(fake, "port", "list", "--fixed-ip", "ip-address=10.0.0.5", "--host", "h1", "--long")
    assert result.exit_code == 0, result.output
    assert fake.requests[0].url.params.multi_items() == [
        ("binding:host_id", "h1"),
        ("fixed_ips", "ip_address=10.0.0.5"),
    ]


def test_port_set_adds_to_existing(fake: FakeNeutron) -> None:
    net = fake.add("networks", name="private")
    sub = fake.add("subnets", name="v4", network_id=net["id"])
    port = fake.add(
        "ports",
        name="p",
        network_id=net["id"],
        fixed_ips=[{"subnet_id": sub["id"], "ip_address": "10.0.0.5"}],
        security_groups=["sg0"],
    )
    sg = fake.add("security-groups", name="web")
    result = run(fake, "port", "set", "p", "--fixed-ip", "subnet=v4", "--security-group", "web", "--enable")
    assert result.exit_code == 0, result.output
    assert fake.bodies("PUT") == [
        (
            f"/v2.0/ports/{port['id']}",
            {
                "port": {
                    "fixed_ips": [{"subnet_id": sub["id"], "ip_address": "10.0.0.5"}, {"subnet_id": sub["id"]}],
                    "security_groups": ["sg0", sg["id"]],
                    "admin_state_up": True,
                }
            },
        )
    ]


def test_router_gateway_and_interfaces(fake: FakeNeutron) -> None:
    router = fake.add("routers", name="r")
    ext = fake.add("networks", name="public")
    ext_sub = fake.add("subnets", name="pub4", network_id=ext["id"])
    sub = fake.add("subnets", name="private4", network_id="n")
    port = fake.add("ports", name="p")
    for args in (
        ("router", "set", "r", "--external-gateway", "public", "--fixed-ip", "subnet=pub4,ip-address=203.0.113.2"),
        ("router", "set", "r", "--disable-snat", "--external-gateway", "public"),
        ("router", "set", "r", "--no-external-gateway"),
        ("router", "add", "subnet", "r", "private4"),
        ("router", "remove", "port", "r", "p"),
    ):
        result = run(fake, *args)
        assert result.exit_code == 0, (args, result.output)
    assert fake.bodies("PUT") == [
        (
            f"/v2.0/routers/{router['id']}",
            {
                "router": {
                    "external_gateway_info": {
                        "network_id": ext["id"],
                        "external_fixed_ips": [{"subnet_id": ext_sub["id"], "ip_address": "203.0.113.2"}],
                    }
                }
            },
        ),
        (
            f"/v2.0/routers/{router['id']}",
            {"router": {"external_gateway_info": {"network_id": ext["id"], "enable_snat": False}}},
        ),
        (f"/v2.0/routers/{router['id']}", {"router": {"external_gateway_info": {}}}),
        (f"/v2.0/routers/{router['id']}/add_router_interface", {"subnet_id": sub["id"]}),
        (f"/v2.0/routers/{router['id']}/remove_router_interface", {"port_id": port["id"]}),
    ]


def test_router_gateway_options_need_a_network(fake: FakeNeutron) -> None:
    fake.add("routers", name="r")
    result = run(fake, "router", "set", "r", "--enable-snat")
    assert result.exit_code == 1
    assert "need --external-gateway" in result.stderr


def test_security_group_rule_create(fake: FakeNeutron) -> None:
    sg = fake.add("security-groups", name="web")
    result = run(
        fake,
        *("security-group", "rule", "create", "web", "--egress", "--protocol", "TCP"),
        *("--dst-port", "8000:8080", "--remote-ip", "fd00::/8", "--description", "d", "-f", "yaml"),
    )
    assert result.exit_code == 0, result.output
    assert fake.bodies("POST")[0][1] == {
        "security_group_rule": {
            "security_group_id": sg["id"],
            "direction": "egress",
            "ethertype": "IPv6",
            "protocol": "tcp",
            "port_range_min": 8000,
            "port_range_max": 8080,
            "remote_ip_prefix": "fd00::/8",
            "description": "d",
        }
    }


def test_security_group_rule_defaults_and_remote_group(fake: FakeNeutron) -> None:
    sg = fake.add("security-groups", name="web")
    result = run(fake, "security-group", "rule", "create", "web", "--remote-group", "web", "--ethertype", "IPv6")
    assert result.exit_code == 0, result.output
    assert fake.bodies("POST")[0][1] == {
        "security_group_rule": {
            "security_group_id": sg["id"],
            "direction": "ingress",
            "ethertype": "IPv6",
            "remote_group_id": sg["id"],
        }
    }


def test_rule_list_table_and_show(fake: FakeNeutron) -> None:
    sg = fake.add("security-groups", name="web")
    rule = fake.add(
        "security-group-rules",
        security_group_id=sg["id"],
        protocol="tcp",
        ethertype="IPv4",
        port_range_min=22,
        port_range_max=22,
        direction="ingress",
    )
    listed = run(fake, "security-group", "rule", "list", "web")
    assert listed.exit_code == 0, listed.output
    assert rule["id"] in listed.stdout and "22:22" in listed.stdout
    shown = run(fake, "security-group", "rule", "show", rule["id"], "-f", "json")
    assert json.loads(shown.stdout) == rule


def test_delete_many_goes_on_past_failures(fake: FakeNeutron) -> None:
    a = fake.add("routers", name="a")
    b = fake.add("routers", name="b")
    result = run(fake, "router", "delete", "a", "missing", "b")
    assert result.exit_code == 1
    assert fake.store["routers"] == {}
    assert result.stderr.splitlines() == [
        "Error: missing: No router found for 'missing'",
        "Error: Failed to delete 1 of 3 routers",
    ]
    assert [p for p, _ in fake.bodies("DELETE")] == [f"/v2.0/routers/{a['id']}", f"/v2.0/routers/{b['id']}"]


def test_rule_delete_takes_ids(fake: FakeNeutron) -> None:
    rule = fake.add("security-group-rules")
    assert run(fake, "security-group", "rule", "delete", rule["id"]).exit_code == 0
    assert [r.method for r in fake.requests] == ["DELETE"]


def test_serve_builds_the_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    import sys
    import types

    from cloudnet.config import ServerConfig

    seen: list[ServerConfig] = []
    module = types.ModuleType("cloudnet.server")
    module.serve = seen.append  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cloudnet.server", module)
    result = CliRunner().invoke(
        app,
        ["serve", "--state-dir", str(tmp_path), "--db", "sqlite://", "--host", "0.0.0.0", "--port", "9797"],
    )
    assert result.exit_code == 0, result.output
    assert seen == [ServerConfig(state_dir=tmp_path, db_url="sqlite://", host="0.0.0.0", port=9797, default_mtu=1500)]
