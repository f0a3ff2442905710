"""/v2.0/hosts: registration and heartbeats, admin-only access, each host's desired state, port status
reports, a dead host's ports reported DOWN, and deleting a dead host with its port pools. The agent is simulated
through the API."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from cloudnet.config import ServerConfig
from cloudnet.store import tables
from cloudnet.store.db import Store
from tests.support.api import create, error

Json = dict[str, Any]


def heartbeat(api: httpx.Client, name: str, version: str = "1.0", report: Json | None = None) -> Json:
    r = api.put(f"/hosts/{name}", json={"host": {"agent_version": version, "report": report or {}}})
    assert r.status_code == 200, r.text
    return dict(r.json()["host"])


def hosts_by_name(api: httpx.Client) -> dict[str, Json]:
    r = api.get("/hosts")
    assert r.status_code == 200, r.text
    return {h["name"]: h for h in r.json()["hosts"]}


def network_with_subnet(api: httpx.Client, cidr: str, **network: Any) -> tuple[Json, Json]:
    net = create(api, "networks", "network", name=f"net-{cidr}", **network)
    sub = create(api, "subnets", "subnet", network_id=net["id"], cidr=cidr)
    return net, sub


def instance(api: httpx.Client, name: str, host: str, *network_ids: str) -> Json:
    return create(api, "instances", "instance", name=name, host=host, netns=f"ns-{name}",
                  nets=[{"network": n} for n in network_ids])  # fmt: skip


def port_ids(inst: Json) -> list[str]:
    return [n["port_id"] for n in inst["nets"]]


def get_port(api: httpx.Client, port_id: str) -> Json:
    r = api.get(f"/ports/{port_id}")
    assert r.status_code == 200, r.text
    return dict(r.json()["port"])


def report(api: httpx.Client, host: str, *items: Json) -> httpx.Response:
    return api.put(f"/hosts/{host}/ports", json={"ports": list(items)})


def active(port_id: str, bridge: str = "cnb-test") -> Json:
    return {"id": port_id, "status": "ACTIVE", "binding:vif_type": "bridge", "binding:vif_details": {"bridge": bridge}}


def events_since(api: httpx.Client, since: int, timeout: float = 0) -> tuple[list[Json], int]:
    r = api.get("/events", params={"since": since, "timeout": timeout})
    assert r.status_code == 200, r.text
    body = r.json()
    return list(body["events"]), int(body["revision"])


def latest_revision(api: httpx.Client) -> int:
    return events_since(api, 2**62)[1]


# -- registration -------------------------------------------------------------------------------


def test_register_list_show_and_heartbeat(api: httpx.Client) -> None:
    assert api.get("/hosts").json()["hosts"] == []
    error(api.get("/hosts/node-1"), 404, "HostNotFound")

    before = latest_revision(api)
    host = heartbeat(api, "node-1", "1.2.3", {"uplinks": {"physnet1": "eth1"}})
    assert host["name"] == "node-1"
    assert host["agent_version"] == "1.2.3"
    assert host["report"] == {"uplinks": {"physnet1": "eth1"}}
    assert host["alive"] is True
    assert host["heartbeat_at"].endswith("Z")
    created, _ = events_since(api, before)
    assert [(e["resource"], e["resource_id"], e["operation"]) for e in created] == [("host", "node-1", "create")]

    listed = hosts_by_name(api)
    assert list(listed) == ["node-1"]
    assert listed["node-1"]["alive"] is True
    assert listed["node-1"]["heartbeat_at"] == host["heartbeat_at"]
    shown = api.get("/hosts/node-1")
    assert shown.status_code == 200, shown.text
    assert shown.json()["host"]["alive"] is True
    assert shown.json()["host"]["agent_version"] == "1.2.3"

    # A plain heartbeat (same version and report) refreshes liveness without publishing an event.
    rev = latest_revision(api)
    again = heartbeat(api, "node-1", "1.2.3", {"uplinks": {"physnet1": "eth1"}})
    assert again["alive"] is True
    assert again["heartbeat_at"] >= host["heartbeat_at"]
    assert events_since(api, rev)[0] == []

    # A changed report is an update that agents and clients can see.
    changed = heartbeat(api, "node-1", "1.2.4", {"uplinks": {"physnet1": "eth2"}})
    assert changed["agent_version"] == "1.2.4"
    assert changed["report"] == {"uplinks": {"physnet1": "eth2"}}
    updates, _ = events_since(api, rev)
    assert [(e["resource"], e["resource_id"], e["operation"]) for e in updates] == [("host", "node-1", "update")]

    heartbeat(api, "node-2")
    assert list(hosts_by_name(api)) == ["node-1", "node-2"]
    error(api.get("/hosts/node-3"), 404, "HostNotFound")


def test_heartbeat_rejects_bad_body(api: httpx.Client) -> None:
    error(api.put("/hosts/node-1", json={"host": {"agent_version": "1", "bogus": 1}}), 400)
    error(api.put("/hosts/node-1", json={"host": {"report": "not-a-map"}}), 400)
    assert api.get("/hosts").json()["hosts"] == []


def test_hosts_api_is_admin_only(users: dict[str, httpx.Client]) -> None:
    admin, alice = users["admin"], users["alice"]
    net, _ = network_with_subnet(alice, "10.0.0.0/24")
    error(alice.put("/hosts/node-1", json={"host": {"agent_version": "1"}}), 403, "PolicyNotAuthorized")
    heartbeat(admin, "node-1")
    port = create(alice, "ports", "port", network_id=net["id"])
    assert admin.put(f"/ports/{port['id']}", json={"port": {"binding:host_id": "node-1"}}).status_code == 200

    error(alice.get("/hosts"), 403, "PolicyNotAuthorized")
    error(alice.get("/hosts/node-1"), 403, "PolicyNotAuthorized")
    error(alice.get("/hosts/node-1/state"), 403, "PolicyNotAuthorized")
    error(report(alice, "node-1", active(port["id"])), 403, "PolicyNotAuthorized")
    assert get_port(alice, port["id"])["status"] == "DOWN"
    # Unchanged by alice's attempt, and still there for the admin.
    assert hosts_by_name(admin)["node-1"]["agent_version"] == "1.0"
    assert admin.get("/hosts/node-1/state").status_code == 200


# -- desired state ------------------------------------------------------------------------------


@pytest.mark.ovn_dataplane  # (one network on two hosts)
def test_desired_state(api: httpx.Client) -> None:
    heartbeat(api, "node-1")
    heartbeat(api, "node-2")
    ext, ext_sub = network_with_subnet(api, "203.0.113.0/24", **{"router:external": True})
    net_a, sub_a = network_with_subnet(api, "10.0.0.0/24")
    net_b, sub_b = network_with_subnet(api, "10.1.0.0/20")
    net_c, sub_c = network_with_subnet(api, "10.2.0.0/24")
    router = create(api, "routers", "router", name="r1", external_gateway_info={"network_id": ext["id"]})
    r = api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub_a["id"]})
    assert r.status_code == 200, r.text
    iface_port = r.json()["port_id"]
    gw_info = api.get(f"/routers/{router['id']}").json()["router"]["external_gateway_info"]
    gw_ports = [p for p in api.get("/ports", params={"device_id": router["id"]}).json()["ports"]
                if p["device_owner"] == "network:router_gateway"]  # fmt: skip
    assert len(gw_ports) == 1 and gw_info["network_id"] == ext["id"]
    other_router = create(api, "routers", "router", name="r2")
    r = api.put(f"/routers/{other_router['id']}/add_router_interface", json={"subnet_id": sub_c["id"]})
    assert r.status_code == 200, r.text

    # Interface order is the order of `nets`, not of creation or of ids.
    mine = instance(api, "vm1", "node-1", net_b["id"], net_a["id"])
    theirs = instance(api, "vm2", "node-2", net_a["id"])
    elsewhere = instance(api, "vm3", "node-2", net_c["id"])

    revision = latest_revision(api)
    r = api.get("/hosts/node-1/state")
    assert r.status_code == 200, r.text
    state = r.json()
    assert state["revision"] == revision
    assert state["host"] == "node-1"

    (inst,) = state["instances"]
    assert inst["id"] == mine["id"]
    assert inst["netns"] == "ns-vm1"
    assert inst["ports"] == port_ids(mine)
    pb, pa = port_ids(mine)
    assert set(state["ports"]) == {pa, pb}
    assert not set(port_ids(theirs) + port_ids(elsewhere)) & set(state["ports"])
    assert state["ports"][pa]["network_id"] == net_a["id"]
    assert state["ports"][pb]["network_id"] == net_b["id"]
    (fa,) = state["ports"][pa]["fixed_ips"]
    assert fa["subnet_id"] == sub_a["id"] and fa["prefixlen"] == 24
    (fb,) = state["ports"][pb]["fixed_ips"]
    assert fb["subnet_id"] == sub_b["id"] and fb["prefixlen"] == 20
    assert state["ports"][pa]["mac_address"] == get_port(api, pa)["mac_address"]

    # The instances' networks, plus the external network the router needs for its gateway; not net C.
    assert set(state["networks"]) == {net_a["id"], net_b["id"], ext["id"]}
    assert state["networks"][ext["id"]]["router_external"] is True
    assert state["networks"][net_a["id"]]["mtu"] == net_a["mtu"]
    assert set(state["subnets"]) == {sub_a["id"], sub_b["id"], ext_sub["id"]}
    assert state["subnets"][sub_a["id"]]["gateway_ip"] == "10.0.0.1"
    assert state["subnets"][sub_b["id"]]["cidr"] == "10.1.0.0/20"

    (rt,) = state["routers"]
    assert rt["id"] == router["id"]
    assert rt["enable_snat"] is True
    assert rt["interfaces"] == [{"port_id": iface_port, "network_id": net_a["id"]}]
    assert rt["gateway"] == {"port_id": gw_ports[0]["id"], "network_id": ext["id"]}
    assert set(rt["ports"]) == {iface_port, gw_ports[0]["id"]}
    (gw_ip,) = rt["ports"][gw_ports[0]["id"]]["fixed_ips"]
    assert gw_ip["subnet_id"] == ext_sub["id"] and gw_ip["prefixlen"] == 24
    assert rt["ports"][iface_port]["fixed_ips"][0]["ip_address"] == "10.0.0.1"

    # node-2 sees its two instances and both routers; a host without instances gets an empty state.
    other = api.get("/hosts/node-2/state").json()
    assert {i["id"] for i in other["instances"]} == {theirs["id"], elsewhere["id"]}
    assert {rt["id"] for rt in other["routers"]} == {router["id"], other_router["id"]}
    assert mine["id"] not in {i["id"] for i in other["instances"]}
    empty = api.get("/hosts/node-9/state").json()
    assert (empty["instances"], empty["ports"], empty["networks"], empty["routers"]) == ([], {}, {}, [])

    # The revision moves with every change, and the state follows it.
    assert api.delete(f"/instances/{mine['id']}").status_code == 204
    after = api.get("/hosts/node-1/state").json()
    assert after["revision"] == latest_revision(api) > revision
    assert (after["instances"], after["ports"], after["routers"]) == ([], {}, [])


# -- port status reports ------------------------------------------------------------------------


def test_a_malformed_report_is_refused_not_a_server_error(api: httpx.Client) -> None:
    """The metrics' read of the raw report (before the service validates it) survives any shape; schemathesis
    found a 500 for {"ports": 0.99}."""
    heartbeat(api, "node-m")
    for body in ({"ports": 0.99}, {"ports": "x"}, {"ports": [1, None, {"status": "ACTIVE"}]}, [], {"ports": {}}):
        r = api.put("/hosts/node-m/ports", json=body)
        assert r.status_code == 400, (body, r.status_code, r.text)


@pytest.mark.ovn_dataplane  # (one network on two hosts)
def test_report_ports(api: httpx.Client) -> None:
    heartbeat(api, "node-1")
    heartbeat(api, "node-2")
    net, _ = network_with_subnet(api, "10.0.0.0/24")
    mine = instance(api, "vm1", "node-1", net["id"], net["id"])
    theirs = instance(api, "vm2", "node-2", net["id"])
    p1, p2 = port_ids(mine)
    (p3,) = port_ids(theirs)
    missing = "5f0e3f2c-0d7e-4c39-9a3e-2b8f8a0c9d11"

    rev = latest_revision(api)
    r = report(api, "node-1", active(p1, "cnb-one"), active(p3), {"id": missing, "status": "ACTIVE"})
    assert r.status_code == 200, r.text
    assert r.json()["updated"] == [p1]
    assert sorted(r.json()["ignored"]) == sorted([p3, missing])
    port = get_port(api, p1)
    assert port["status"] == "ACTIVE"
    assert port["binding:vif_type"] == "bridge"
    assert port["binding:vif_details"] == {"bridge": "cnb-one"}
    assert port["revision_number"] == 1
    # Another host's port is left exactly as it was.
    assert get_port(api, p3)["status"] == "DOWN"
    assert get_port(api, p3)["binding:vif_type"] == "unbound"
    changes, rev2 = events_since(api, rev)
    assert [(e["resource"], e["resource_id"], e["operation"]) for e in changes] == [("port", p1, "update")]
    assert api.get(f"/instances/{mine['id']}").json()["instance"]["status"] == "BUILD"

    # Reporting the same thing again changes nothing and publishes nothing.
    r = report(api, "node-1", active(p1, "cnb-one"))
    assert r.status_code == 200, r.text
    assert r.json() == {"updated": [], "ignored": [], "revision_before": rev2, "revision": rev2}
    assert events_since(api, rev2) == ([], rev2)
    assert get_port(api, p1)["revision_number"] == 1

    # A status alone keeps the binding details; the second port makes the instance ACTIVE.
    r = report(api, "node-1", {"id": p2, "status": "ACTIVE"})
    assert r.json()["updated"] == [p2]
    assert get_port(api, p2)["binding:vif_type"] == "unbound"
    assert api.get(f"/instances/{mine['id']}").json()["instance"]["status"] == "ACTIVE"

    # Bad values are refused as a whole: nothing of the batch is applied.
    rev3 = latest_revision(api)
    error(report(api, "node-1", {"id": p1, "status": "DOWN"}, {"id": p2, "status": "UP"}), 400)
    error(report(api, "node-1", {"id": p1, "status": "DOWN", "bogus": 1}), 400)
    error(api.put("/hosts/node-1/ports", json={"ports": "all"}), 400)
    assert get_port(api, p1)["status"] == "ACTIVE"
    assert events_since(api, rev3) == ([], rev3)

    r = report(api, "node-1", {"id": p1, "status": "DOWN"})
    assert r.json()["updated"] == [p1]
    assert get_port(api, p1)["status"] == "DOWN"
    assert api.get(f"/instances/{mine['id']}").json()["instance"]["status"] == "BUILD"


# -- dead hosts ---------------------------------------------------------------------------------


@pytest.fixture
def fast_api(server_config: ServerConfig, backend: str, request: pytest.FixtureRequest) -> httpx.Client:
    """An admin client of a server that declares a host dead after one second without a heartbeat.

    (`backend` is named so that the test is parametrized by it; the server starts only after the config is set.)"""
    server_config.agent_down_time = 1.0
    client: httpx.Client = request.getfixturevalue("api")
    return client


def wait_for(api: httpx.Client, condition: Callable[[], bool], timeout: float, between: Callable[[], None]) -> None:
    """Re-check `condition` after each change in the revision log (or a short long-poll), until the deadline."""
    deadline = time.monotonic() + timeout
    rev = latest_revision(api)
    while not condition():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        between()
        _, rev = events_since(api, rev, timeout=0.5)


@pytest.mark.ovn_dataplane  # (one network on two hosts)
def test_dead_host_ports_go_down(fast_api: httpx.Client) -> None:
    api = fast_api
    heartbeat(api, "node-1")
    heartbeat(api, "node-2")
    net, _ = network_with_subnet(api, "10.0.0.0/24")
    dying = instance(api, "vm1", "node-1", net["id"])
    living = instance(api, "vm2", "node-2", net["id"])
    (p1,) = port_ids(dying)
    (p2,) = port_ids(living)
    heartbeat(api, "node-1")
    assert report(api, "node-1", active(p1)).json()["updated"] == [p1]
    heartbeat(api, "node-2")
    assert report(api, "node-2", active(p2)).json()["updated"] == [p2]
    assert get_port(api, p1)["status"] == "ACTIVE"
    assert api.get(f"/instances/{dying['id']}").json()["instance"]["status"] == "ACTIVE"

    # node-1 stops heart-beating; node-2 carries on.
    wait_for(api, lambda: get_port(api, p1)["status"] == "DOWN", timeout=20, between=lambda: heartbeat(api, "node-2"))
    heartbeat(api, "node-2")
    hosts = hosts_by_name(api)
    assert hosts["node-1"]["alive"] is False
    assert hosts["node-2"]["alive"] is True
    assert api.get("/hosts/node-1").json()["host"]["alive"] is False
    assert get_port(api, p2)["status"] == "ACTIVE"
    assert api.get(f"/instances/{dying['id']}").json()["instance"]["status"] == "BUILD"
    assert api.get(f"/instances/{living['id']}").json()["instance"]["status"] == "ACTIVE"

    # A new heartbeat brings the host back; its agent then reports the port again.
    back = heartbeat(api, "node-1")
    assert back["alive"] is True
    assert hosts_by_name(api)["node-1"]["alive"] is True
    assert report(api, "node-1", active(p1)).json()["updated"] == [p1]
    assert get_port(api, p1)["status"] == "ACTIVE"


# -- deleting hosts -----------------------------------------------------------------------------

POOL_FREE = "compute:cloudnet-pool"


def silence(store: Store, name: str) -> None:
    """The host's agent stopped an hour ago (far beyond agent_down_time), without waiting for it."""
    with store.write() as tx:
        tx.conn.execute(update(tables.hosts).where(tables.hosts.c.name == name).values(
            heartbeat_at=tx.now - timedelta(hours=1)))  # fmt: skip


def claim(api: httpx.Client, host: str, network_id: str) -> httpx.Response:
    return api.post("/port-pools/claim", json={"claim": {"host": host, "network_id": network_id}})


def pools_of(api: httpx.Client, host: str) -> list[Json]:
    r = api.get("/port-pools")
    assert r.status_code == 200, r.text
    return [p for p in r.json()["port_pools"] if p["host"] == host]


def ready_ids(api: httpx.Client, pool_id: str) -> set[str]:
    r = api.get("/ports", params={"device_owner": POOL_FREE, "tags": f"cloudnet.pool={pool_id}"})
    assert r.status_code == 200, r.text
    return {p["id"] for p in r.json()["ports"]}


def test_delete_host_is_admin_only(users: dict[str, httpx.Client], store: Store) -> None:
    admin, alice = users["admin"], users["alice"]
    heartbeat(admin, "node-1")
    silence(store, "node-1")  # deletable: only the caller is wrong
    error(alice.delete("/hosts/node-1"), 403, "PolicyNotAuthorized")
    error(alice.delete("/hosts/node-9"), 403, "PolicyNotAuthorized")  # no probing for host names either
    assert list(hosts_by_name(admin)) == ["node-1"]


def test_delete_unknown_host(api: httpx.Client) -> None:
    heartbeat(api, "node-1")
    error(api.delete("/hosts/node-2"), 404, "HostNotFound")
    assert list(hosts_by_name(api)) == ["node-1"]


def test_delete_host_frees_its_pools(api: httpx.Client, store: Store) -> None:
    heartbeat(api, "node-1")
    heartbeat(api, "node-2")
    net, _ = network_with_subnet(api, "10.0.0.0/24")
    r = claim(api, "node-1", net["id"])  # makes node-1's pool and fills it
    assert r.status_code == 201, r.text
    in_use = r.json()["port"]
    net2, _ = network_with_subnet(api, "10.0.1.0/24")  # (single-host: another host's pool, another network)
    assert claim(api, "node-2", net2["id"]).status_code == 201
    (pool,) = pools_of(api, "node-1")
    ready = ready_ids(api, pool["id"])
    assert ready
    (other,) = pools_of(api, "node-2")
    other_ready = ready_ids(api, other["id"])

    # Alive: its agent would register it again at the next heartbeat; nothing is deleted.
    message = error(api.delete("/hosts/node-1"), 409, "HostAlive")
    assert "stop its agent first" in message
    assert hosts_by_name(api)["node-1"]["alive"] is True
    assert [p["id"] for p in pools_of(api, "node-1")] == [pool["id"]]
    assert ready_ids(api, pool["id"]) == ready

    silence(store, "node-1")
    rev = latest_revision(api)
    r = api.delete("/hosts/node-1")
    assert r.status_code == 204, r.text
    assert r.content == b""
    assert list(hosts_by_name(api)) == ["node-2"]
    error(api.get("/hosts/node-1"), 404, "HostNotFound")
    assert pools_of(api, "node-1") == []
    for port_id in ready:
        assert api.get(f"/ports/{port_id}").status_code == 404
    # The claimed port stays with whoever claimed it; node-2's pool is untouched.
    kept = get_port(api, in_use["id"])
    assert (kept["device_owner"], kept["binding:host_id"]) == (in_use["device_owner"], "node-1")
    assert ready_ids(api, other["id"]) == other_ready
    events, _ = events_since(api, rev)
    assert ("host", "node-1", "delete") in [(e["resource"], e["resource_id"], e["operation"]) for e in events]
    assert {e["resource_id"] for e in events if e["resource"] == "port" and e["operation"] == "delete"} == ready

    error(api.delete("/hosts/node-1"), 404, "HostNotFound")
    error(claim(api, "node-1", net["id"]), 400)  # no longer a registered host, also to this server's cache

    # The machine comes back (or a new one takes the name): it registers as a new host, with a new pool.
    again = heartbeat(api, "node-1")
    assert again["alive"] is True
    assert claim(api, "node-1", net["id"]).status_code == 201
    (new_pool,) = pools_of(api, "node-1")
    assert new_pool["id"] != pool["id"]
