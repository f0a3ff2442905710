"""openstacksdk, unmodified, as a client of the live API: clouds.yaml with `auth_type: none` (no Keystone).

Requests the SDK makes are observed (not altered) through a response hook on its requests session, so
tests can say what went over the wire, e.g. that a bulk create is one POST.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import openstack
import openstack.connection
import pytest
import requests
import yaml
from openstack import exceptions

from tests.support.server import RunningServer

# The SDK's own deprecation notices (about its internals) are not what these tests are about.
pytestmark = pytest.mark.filterwarnings("ignore::openstack.warnings._RemovedInSDKWarning")


class Wire:
    """Every (method, path?query, JSON body) the SDK sent, recorded from real responses."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    def __call__(self, response: requests.Response, *args: Any, **kwargs: Any) -> None:
        request = response.request
        body = request.body
        if isinstance(body, bytes):
            body = body.decode()
        url = urlsplit(str(request.url))
        target = url.path + (f"?{url.query}" if url.query else "")
        self.calls.append((str(request.method), target, json.loads(body) if body else None))

    def clear(self) -> None:
        self.calls.clear()

    def methods(self, method: str) -> list[tuple[str, Any]]:
        return [(target, body) for m, target, body in self.calls if m == method]


@pytest.fixture
def wire() -> Wire:
    return Wire()


def connect(endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> openstack.connection.Connection:
    """`openstack.connect(cloud="cloudnet")` through a clouds.yaml with no Keystone (auth_type none)."""
    clouds = {
        "clouds": {
            "cloudnet": {
                "auth_type": "none",
                "auth": {"endpoint": endpoint},
                "network_endpoint_override": endpoint,
            }
        }
    }
    path = tmp_path / "clouds.yaml"
    path.write_text(yaml.safe_dump(clouds))
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(path))
    for name in ("OS_CLOUD", "OS_AUTH_URL", "OS_AUTH_TYPE", "OS_ENDPOINT", "OS_NETWORK_API_VERSION"):
        monkeypatch.delenv(name, raising=False)
    return openstack.connect(cloud="cloudnet")


@pytest.fixture
def conn(
    server: RunningServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wire: Wire
) -> Iterator[openstack.connection.Connection]:
    # The unversioned root, as a Keystone catalog lists Neutron: openstacksdk 4.x runs version
    # discovery on the endpoint (GET /), finds v2.0 there and sends everything to <root>/v2.0/.
    # See test_readme_clouds_yaml_with_a_v2_endpoint for the /v2.0 form.
    connection = connect(server.url, tmp_path, monkeypatch)
    connection.session.session.hooks["response"].append(wire)
    yield connection
    connection.close()


@pytest.fixture
def net(conn: openstack.connection.Connection) -> Any:
    return conn.network.create_network(name="sdk-net")


@pytest.fixture
def subnet4(conn: openstack.connection.Connection, net: Any) -> Any:
    return conn.network.create_subnet(network_id=net.id, ip_version=4, cidr="10.20.0.0/24", name="sdk-v4")


def test_version_discovery_then_requests_under_v2(
    conn: openstack.connection.Connection, server: RunningServer, wire: Wire
) -> None:
    created = conn.network.create_network(name="n0")
    assert created.name == "n0"
    assert [(m, target) for m, target, _ in wire.calls] == [("GET", "/"), ("POST", "/v2.0/networks")]
    assert wire.calls[1][2] == {"network": {"name": "n0"}}
    assert conn.network.get_endpoint().rstrip("/") == server.url + "/v2.0"
    # Discovery ran once; later calls go straight to the resource.
    wire.clear()
    assert conn.network.get_network(created.id).name == "n0"
    assert [(m, target) for m, target, _ in wire.calls] == [("GET", f"/v2.0/networks/{created.id}")]


def test_readme_clouds_yaml_with_a_v2_endpoint(
    server: RunningServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, api: httpx.Client
) -> None:
    """README.md's openstacksdk example, whose clouds.yaml points at <url>/v2.0."""
    net = api.post("/networks", json={"network": {"name": "demo"}}).json()["network"]
    sub = api.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.10.0.0/24"}}).json()["subnet"]
    api.post("/ports", json={"port": {"network_id": net["id"], "name": "web"}})
    connection = connect(server.url + "/v2.0", tmp_path, monkeypatch)
    try:
        found = connection.network.find_network("demo")
        assert found is not None and found.id == net["id"]
        fixed_ips = [p.fixed_ips for p in connection.network.ports(network_id=found.id)]
        assert fixed_ips == [[{"subnet_id": sub["id"], "ip_address": "10.10.0.2"}]]
    finally:
        connection.close()


def test_network_create_find_and_delete(conn: openstack.connection.Connection, api: httpx.Client) -> None:
    created = conn.network.create_network(name="sdk-net", mtu=1400, description="d")
    assert created.id and created.name == "sdk-net"
    assert created.mtu == 1400
    assert created.description == "d"
    assert created.is_admin_state_up is True
    assert created.status == "ACTIVE"
    stored = api.get(f"/networks/{created.id}").json()["network"]
    assert stored["name"] == "sdk-net" and stored["mtu"] == 1400

    by_name = conn.network.find_network("sdk-net")
    by_id = conn.network.find_network(created.id)
    assert by_name is not None and by_id is not None
    assert by_name.id == by_id.id == created.id
    assert conn.network.find_network("no-such-network") is None
    with pytest.raises(exceptions.NotFoundException):
        conn.network.find_network("no-such-network", ignore_missing=False)

    conn.network.delete_network(created)
    assert api.get(f"/networks/{created.id}").status_code == 404
    with pytest.raises(exceptions.NotFoundException):
        conn.network.get_network(created.id)


def test_tags(conn: openstack.connection.Connection, net: Any, api: httpx.Client) -> None:
    conn.network.set_tags(net, ["blue", "green"])
    assert sorted(api.get(f"/networks/{net.id}").json()["network"]["tags"]) == ["blue", "green"]
    other = conn.network.create_network(name="other")
    conn.network.set_tags(other, ["green"])
    assert [n.id for n in conn.network.networks(tags="blue")] == [net.id]
    assert sorted(n.id for n in conn.network.networks(tags="green")) == sorted([net.id, other.id])
    assert [n.id for n in conn.network.networks(not_tags="blue")] == [other.id]
    conn.network.set_tags(net, [])
    assert conn.network.get_network(net.id).tags == []


def test_find_with_an_ambiguous_name_raises(conn: openstack.connection.Connection) -> None:
    conn.network.create_network(name="twin")
    conn.network.create_network(name="twin")
    with pytest.raises(exceptions.DuplicateResource):
        conn.network.find_network("twin")


def test_subnets_v4_and_v6(conn: openstack.connection.Connection, net: Any, api: httpx.Client) -> None:
    v4 = conn.network.create_subnet(
        network_id=net.id,
        ip_version=4,
        cidr="10.20.0.0/24",
        name="v4",
        allocation_pools=[{"start": "10.20.0.10", "end": "10.20.0.20"}],
        dns_nameservers=["10.20.0.2"],
        host_routes=[{"destination": "10.30.0.0/16", "nexthop": "10.20.0.254"}],
    )
    assert v4.ip_version == 4
    assert v4.cidr == "10.20.0.0/24"
    assert v4.gateway_ip == "10.20.0.1"
    assert v4.allocation_pools == [{"start": "10.20.0.10", "end": "10.20.0.20"}]
    assert v4.dns_nameservers == ["10.20.0.2"]
    assert v4.host_routes == [{"destination": "10.30.0.0/16", "nexthop": "10.20.0.254"}]

    v6 = conn.network.create_subnet(network_id=net.id, ip_version=6, cidr="fd00:20::/64", name="v6")
    assert v6.ip_version == 6
    assert v6.cidr == "fd00:20::/64"
    assert v6.gateway_ip == "fd00:20::1"

    assert sorted(conn.network.get_network(net.id).subnet_ids) == sorted([v4.id, v6.id])
    assert {s.id for s in conn.network.subnets(network_id=net.id, ip_version=6)} == {v6.id}
    assert conn.network.find_subnet("v6").id == v6.id

    updated = conn.network.update_subnet(v4, name="v4-renamed", dns_nameservers=["10.20.0.3"])
    assert updated.name == "v4-renamed"
    assert api.get(f"/subnets/{v4.id}").json()["subnet"]["dns_nameservers"] == ["10.20.0.3"]

    # A port on a dual-stack network gets one address of each family.
    port = conn.network.create_port(network_id=net.id)
    assert sorted(ip["subnet_id"] for ip in port.fixed_ips) == sorted([v4.id, v6.id])
    conn.network.delete_port(port)

    conn.network.delete_subnet(v6)
    with pytest.raises(exceptions.NotFoundException):
        conn.network.get_subnet(v6.id)
    assert conn.network.get_network(net.id).subnet_ids == [v4.id]


def test_port_lifecycle(conn: openstack.connection.Connection, net: Any, subnet4: Any, api: httpx.Client) -> None:
    port = conn.network.create_port(
        network_id=net.id,
        name="p1",
        fixed_ips=[{"subnet_id": subnet4.id, "ip_address": "10.20.0.50"}],
        binding_vnic_type="normal",
        binding_host_id="host-1",
        binding_profile={"k": "v"},
        device_owner="compute:nova",
        device_id="vm-1",
    )
    assert port.name == "p1"
    assert port.network_id == net.id
    assert port.fixed_ips == [{"subnet_id": subnet4.id, "ip_address": "10.20.0.50"}]
    assert port.mac_address.startswith("fa:16:3e:")
    assert port.binding_host_id == "host-1"
    assert port.binding_profile == {"k": "v"}
    assert port.binding_vnic_type == "normal"
    assert port.device_owner == "compute:nova"
    stored = api.get(f"/ports/{port.id}").json()["port"]
    assert stored["binding:host_id"] == "host-1" and stored["device_id"] == "vm-1"

    found = conn.network.find_port("p1")
    assert found is not None and found.id == port.id
    found_by_id = conn.network.find_port(port.id)
    assert found_by_id is not None and found_by_id.name == "p1"

    updated = conn.network.update_port(port, name="p1-renamed", is_admin_state_up=False, binding_host_id="host-2")
    assert updated.name == "p1-renamed"
    assert updated.is_admin_state_up is False
    assert updated.binding_host_id == "host-2"
    stored = api.get(f"/ports/{port.id}").json()["port"]
    assert (stored["name"], stored["admin_state_up"], stored["binding:host_id"]) == ("p1-renamed", False, "host-2")

    conn.network.delete_port(port)
    assert api.get(f"/ports/{port.id}").status_code == 404
    with pytest.raises(exceptions.NotFoundException) as caught:
        conn.network.get_port(port.id)
    assert isinstance(caught.value, exceptions.ResourceNotFound)
    assert caught.value.status_code == 404
    assert f"Port {port.id} could not be found." in str(caught.value)
    # Deleting again: ignored by default, an error when asked.
    conn.network.delete_port(port.id)
    with pytest.raises(exceptions.NotFoundException):
        conn.network.delete_port(port.id, ignore_missing=False)


def test_list_ports_with_filters(conn: openstack.connection.Connection, net: Any, subnet4: Any) -> None:
    other = conn.network.create_network(name="other")
    conn.network.create_subnet(network_id=other.id, ip_version=4, cidr="10.21.0.0/24")
    a = conn.network.create_port(network_id=net.id, name="a")
    b = conn.network.create_port(network_id=net.id, name="b", device_owner="compute:nova")
    c = conn.network.create_port(network_id=other.id, name="a")

    assert {p.id for p in conn.network.ports(network_id=net.id)} == {a.id, b.id}
    assert {p.id for p in conn.network.ports(name="a")} == {a.id, c.id}
    assert [p.id for p in conn.network.ports(network_id=net.id, name="a")] == [a.id]
    assert [p.id for p in conn.network.ports(device_owner="compute:nova")] == [b.id]
    ip = a.fixed_ips[0]["ip_address"]
    assert [p.id for p in conn.network.ports(fixed_ips=[f"ip_address={ip}"])] == [a.id]
    assert list(conn.network.ports(name="nobody")) == []


def test_bulk_create_ports_is_one_post(
    conn: openstack.connection.Connection, net: Any, subnet4: Any, wire: Wire, api: httpx.Client
) -> None:
    wire.clear()
    created = list(
        conn.network.create_ports(
            [
                {"network_id": net.id, "name": "bulk-1"},
                {"network_id": net.id, "name": "bulk-2", "fixed_ips": [{"ip_address": "10.20.0.77"}]},
                {"network_id": net.id, "name": "bulk-3"},
            ]
        )
    )
    posts = wire.methods("POST")
    assert len(posts) == 1
    target, body = posts[0]
    assert target == "/v2.0/ports"
    assert list(body) == ["ports"]
    assert [p["name"] for p in body["ports"]] == ["bulk-1", "bulk-2", "bulk-3"]
    assert [p.name for p in created] == ["bulk-1", "bulk-2", "bulk-3"]
    assert all(p.id for p in created)
    assert created[1].fixed_ips == [{"subnet_id": subnet4.id, "ip_address": "10.20.0.77"}]
    listed = api.get("/ports", params={"network_id": net.id}).json()["ports"]
    assert sorted(p["id"] for p in listed) == sorted(p.id for p in created)


def test_bulk_create_is_atomic(
    conn: openstack.connection.Connection, net: Any, subnet4: Any, api: httpx.Client
) -> None:
    with pytest.raises(exceptions.ConflictException):
        list(
            conn.network.create_ports(
                [
                    {"network_id": net.id, "name": "ok", "fixed_ips": [{"ip_address": "10.20.0.80"}]},
                    {"network_id": net.id, "name": "clash", "fixed_ips": [{"ip_address": "10.20.0.80"}]},
                ]
            )
        )
    assert api.get("/ports", params={"network_id": net.id}).json()["ports"] == []


def test_conflict_carries_the_server_message(
    conn: openstack.connection.Connection, net: Any, subnet4: Any, api: httpx.Client
) -> None:
    conn.network.create_port(network_id=net.id, fixed_ips=[{"ip_address": "10.20.0.9"}])
    with pytest.raises(exceptions.ConflictException) as caught:
        conn.network.create_port(network_id=net.id, name="dup", fixed_ips=[{"ip_address": "10.20.0.9"}])
    assert caught.value.status_code == 409
    # The message the SDK shows is the NeutronError message, the same text the API returns.
    raw = api.post("/ports", json={"port": {"network_id": net.id, "fixed_ips": [{"ip_address": "10.20.0.9"}]}}).json()[
        "NeutronError"
    ]
    assert raw["message"]
    assert raw["message"] in str(caught.value)
    assert "10.20.0.9" in raw["message"]
    assert [p.name for p in conn.network.ports(network_id=net.id, name="dup")] == []


def test_bad_request_is_bad_request(conn: openstack.connection.Connection, net: Any) -> None:
    with pytest.raises(exceptions.BadRequestException) as caught:
        conn.network.create_subnet(network_id=net.id, ip_version=4, cidr="not-a-cidr")
    assert caught.value.status_code == 400


def test_pagination_returns_every_port_once(
    conn: openstack.connection.Connection, net: Any, subnet4: Any, wire: Wire, api: httpx.Client
) -> None:
    made = list(conn.network.create_ports([{"network_id": net.id, "name": f"pg-{i}"} for i in range(7)]))
    wire.clear()
    seen = [p.id for p in conn.network.ports(network_id=net.id, limit=2)]
    assert sorted(seen) == sorted(p.id for p in made)
    assert len(seen) == len(set(seen)) == 7
    gets = [target for target, _ in wire.methods("GET")]
    # Pages of 2, 2, 2, 1 found through the server's `ports_links` next hrefs; after the last (short)
    # page without a next link the SDK asks once more with the last id as marker and gets [].
    assert len(gets) == 5
    assert all("limit=2" in target for target in gets)
    assert "marker=" not in gets[0]
    markers = [target.split("marker=")[1].split("&")[0] for target in gets[1:]]
    assert len(set(markers)) == 4
    assert markers[-1] == seen[-1]

    # The server's own links, followed by hand, give the same set.
    url: str | None = "/ports"
    params: dict[str, Any] | None = {"network_id": net.id, "limit": 2}
    pages: list[list[str]] = []
    while url is not None:
        body = api.get(url, params=params).json()
        pages.append([p["id"] for p in body["ports"]])
        nexts = [link["href"] for link in body.get("ports_links", []) if link["rel"] == "next"]
        url, params = (nexts[0], None) if nexts else (None, None)
    assert [len(page) for page in pages] == [2, 2, 2, 1]
    assert [i for page in pages for i in page] == seen

    sorted_desc = [p.name for p in conn.network.ports(network_id=net.id, limit=3, sort_key="name", sort_dir="desc")]
    assert sorted_desc == [f"pg-{i}" for i in reversed(range(7))]


def test_extensions(conn: openstack.connection.Connection) -> None:
    aliases = {e.alias for e in conn.network.extensions()}
    for alias in ("security-group", "binding", "external-net", "pagination", "standard-attr-tag"):
        assert alias in aliases
    ext = conn.network.find_extension("external-net")
    assert ext is not None and ext.name == "Neutron external network"
    assert conn.network.find_extension("no-such-extension") is None


def test_router_interfaces(conn: openstack.connection.Connection, net: Any, subnet4: Any, api: httpx.Client) -> None:
    public = conn.network.create_network(name="public", is_router_external=True)
    public_sub = conn.network.create_subnet(network_id=public.id, ip_version=4, cidr="203.0.113.0/24")
    router = conn.network.create_router(name="r1", external_gateway_info={"network_id": public.id})
    assert router.name == "r1"
    assert router.external_gateway_info["network_id"] == public.id
    [gw_ip] = router.external_gateway_info["external_fixed_ips"]
    assert gw_ip["subnet_id"] == public_sub.id

    info = conn.network.add_interface_to_router(router, subnet=subnet4.id)
    assert info["subnet_id"] == subnet4.id
    assert info["id"] == router.id
    port = conn.network.get_port(info["port_id"])
    assert port.device_owner == "network:router_interface"
    assert port.device_id == router.id
    assert port.fixed_ips == [{"subnet_id": subnet4.id, "ip_address": "10.20.0.1"}]
    assert [p.id for p in conn.network.ports(device_id=router.id, device_owner="network:router_interface")] == [port.id]

    # The subnet is in use by the router: it cannot be deleted.
    with pytest.raises(exceptions.ConflictException):
        conn.network.delete_subnet(subnet4, ignore_missing=False)

    removed = conn.network.remove_interface_from_router(router, subnet=subnet4.id)
    assert removed["subnet_id"] == subnet4.id
    assert removed["port_id"] == port.id
    assert api.get(f"/ports/{port.id}").status_code == 404

    updated = conn.network.update_router(router, name="r1-renamed", external_gateway_info={})
    assert updated.name == "r1-renamed"
    assert not updated.external_gateway_info
    conn.network.delete_router(router)
    assert api.get(f"/routers/{router.id}").status_code == 404


def test_security_groups(conn: openstack.connection.Connection, net: Any, api: httpx.Client) -> None:
    sg = conn.network.create_security_group(name="web", description="web servers")
    assert sg.name == "web" and sg.description == "web servers"
    # Like Neutron, a new group allows all egress (one rule per ethertype).
    assert sorted((r["direction"], r["ethertype"]) for r in sg.security_group_rules) == [
        ("egress", "IPv4"),
        ("egress", "IPv6"),
    ]

    rule = conn.network.create_security_group_rule(
        security_group_id=sg.id,
        direction="ingress",
        ethertype="IPv4",
        protocol="tcp",
        port_range_min=80,
        port_range_max=443,
        remote_ip_prefix="198.51.100.0/24",
    )
    assert (rule.protocol, rule.port_range_min, rule.port_range_max) == ("tcp", 80, 443)
    assert rule.remote_ip_prefix == "198.51.100.0/24"
    assert rule.security_group_id == sg.id
    stored = api.get(f"/security-group-rules/{rule.id}").json()["security_group_rule"]
    assert stored["direction"] == "ingress" and stored["port_range_max"] == 443

    with pytest.raises(exceptions.ConflictException):
        conn.network.create_security_group_rule(
            security_group_id=sg.id,
            direction="ingress",
            ethertype="IPv4",
            protocol="tcp",
            port_range_min=80,
            port_range_max=443,
            remote_ip_prefix="198.51.100.0/24",
        )

    assert rule.id in {r.id for r in conn.network.security_group_rules(security_group_id=sg.id)}
    assert conn.network.find_security_group("web").id == sg.id

    port = conn.network.create_port(network_id=net.id, security_groups=[sg.id])
    assert port.security_group_ids == [sg.id]
    with pytest.raises(exceptions.ConflictException):
        conn.network.delete_security_group(sg, ignore_missing=False)
    conn.network.delete_port(port)

    conn.network.delete_security_group_rule(rule)
    assert api.get(f"/security-group-rules/{rule.id}").status_code == 404
    conn.network.delete_security_group(sg)
    assert api.get(f"/security-groups/{sg.id}").status_code == 404
    with pytest.raises(exceptions.NotFoundException):
        conn.network.get_security_group(sg.id)


def test_stateful_groups_and_rules(conn: openstack.connection.Connection, net: Any, api: httpx.Client) -> None:
    sg = conn.network.create_security_group(name="udp", stateful=False)
    assert sg.stateful is False
    assert [g.id for g in conn.network.security_groups(stateful=False)] == [sg.id]
    rule = conn.network.create_security_group_rule(
        security_group_id=sg.id, direction="ingress", ethertype="IPv6", protocol="icmpv6", port_range_min=128
    )
    assert (rule.protocol, rule.port_range_min, rule.port_range_max) == ("ipv6-icmp", 128, None)
    assert conn.network.update_security_group(sg, stateful=True).stateful is True
    assert conn.network.get_security_group(sg.id).stateful is True
    conn.network.update_security_group(sg, stateful=False)

    port = conn.network.create_port(network_id=net.id, security_groups=[sg.id])
    with pytest.raises(exceptions.ConflictException):  # in use: Neutron's SecurityGroupInUse
        conn.network.update_security_group(sg, stateful=True)
    stateful = conn.network.create_security_group(name="web")
    with pytest.raises(exceptions.ConflictException):  # stateful and stateless on one port
        conn.network.update_port(port, security_groups=[sg.id, stateful.id])
    assert conn.network.get_port(port.id).security_group_ids == [sg.id]
    assert api.get(f"/security-groups/{sg.id}").json()["security_group"]["stateful"] is False


def test_port_security_and_allowed_address_pairs(
    conn: openstack.connection.Connection, net: Any, subnet4: Any, api: httpx.Client
) -> None:
    plain = conn.network.create_network(name="no-psec", port_security_enabled=False)
    assert plain.is_port_security_enabled is False
    assert [n.id for n in conn.network.networks(is_port_security_enabled=False)] == [plain.id]
    assert conn.network.update_network(plain, port_security_enabled=True).is_port_security_enabled is True
    assert conn.network.get_network(plain.id).is_port_security_enabled is True

    pairs = [{"ip_address": "10.20.0.200"}, {"ip_address": "10.20.9.0/24", "mac_address": "fa:16:3e:00:00:09"}]
    port = conn.network.create_port(network_id=net.id, allowed_address_pairs=pairs)
    assert port.is_port_security_enabled is True
    expected = [{"ip_address": "10.20.0.200", "mac_address": port.mac_address}, pairs[1]]
    assert sorted(port.allowed_address_pairs, key=str) == sorted(expected, key=str)
    assert sorted(conn.network.get_port(port.id).allowed_address_pairs, key=str) == sorted(expected, key=str)

    # Off with groups and pairs still attached: refused as Neutron refuses it, nothing changed.
    with pytest.raises(exceptions.ConflictException):
        conn.network.update_port(port, port_security_enabled=False)
    with pytest.raises(exceptions.BadRequestException):  # more than max_allowed_address_pair (10)
        conn.network.update_port(port, allowed_address_pairs=[{"ip_address": f"10.20.1.{i}"} for i in range(11)])
    assert conn.network.get_port(port.id).is_port_security_enabled is True

    off = conn.network.update_port(port, port_security_enabled=False, security_groups=[], allowed_address_pairs=[])
    assert (off.is_port_security_enabled, off.security_group_ids, off.allowed_address_pairs) == (False, [], [])
    assert [p.id for p in conn.network.ports(is_port_security_enabled=False)] == [port.id]
    stored = api.get(f"/ports/{port.id}").json()["port"]
    assert (stored["port_security_enabled"], stored["allowed_address_pairs"]) == (False, [])
    on = conn.network.update_port(port, port_security_enabled=True, allowed_address_pairs=pairs[1:])
    assert (on.is_port_security_enabled, on.allowed_address_pairs) == (True, pairs[1:])
