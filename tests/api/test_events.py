"""The revision log: GET /v2.0/events?since=N[&timeout=S][&limit=L]."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

from tests.support.api import create
from tests.support.server import RunningServer


def events(api: httpx.Client, since: int, **params: Any) -> tuple[list[dict[str, Any]], int]:
    r = api.get("/events", params={"since": since, **params})
    assert r.status_code == 200, r.text
    body = r.json()
    return list(body["events"]), int(body["revision"])


def revision(api: httpx.Client) -> int:
    return events(api, 0)[1]


def assert_gap_free(items: list[dict[str, Any]], after: int) -> None:
    assert [e["revision"] for e in items] == list(range(after + 1, after + 1 + len(items)))


def summary(items: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(e["resource"], e["operation"], e["resource_id"]) for e in items]


def test_every_change_in_order(api: httpx.Client) -> None:
    start = revision(api)
    net = create(api, "networks", "network", name="n")
    sub = create(api, "subnets", "subnet", network_id=net["id"], cidr="10.0.0.0/24")
    api.put(f"/networks/{net['id']}", json={"network": {"name": "renamed"}})
    port = create(api, "ports", "port", network_id=net["id"])  # also creates the project's default group
    (default_sg,) = port["security_groups"]
    sg = create(api, "security-groups", "security_group", name="web")
    rule = api.post(
        "/security-group-rules",
        json={"security_group_rule": {"security_group_id": sg["id"], "direction": "ingress", "protocol": "tcp",
                                      "port_range_min": 22, "port_range_max": 22}},
    ).json()["security_group_rule"]  # fmt: skip
    router = create(api, "routers", "router", name="r")
    iface = api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]}).json()
    api.put(f"/networks/{net['id']}/tags/blue")
    api.put(f"/routers/{router['id']}/remove_router_interface", json={"subnet_id": sub["id"]})
    api.delete(f"/routers/{router['id']}")
    api.delete(f"/security-group-rules/{rule['id']}")
    api.delete(f"/ports/{port['id']}")
    api.delete(f"/subnets/{sub['id']}")
    api.delete(f"/networks/{net['id']}")

    items, latest = events(api, start)
    assert_gap_free(items, start)
    assert latest == items[-1]["revision"]
    assert summary(items) == [
        ("network", "create", net["id"]),
        ("subnet", "create", sub["id"]),
        ("network", "update", net["id"]),
        ("security_group", "create", default_sg),
        ("port", "create", port["id"]),
        ("security_group", "create", sg["id"]),
        ("security_group", "update", sg["id"]),
        ("security_group_rule", "create", rule["id"]),
        ("router", "create", router["id"]),
        ("port", "create", iface["port_id"]),
        ("router", "update", router["id"]),
        ("network", "update", net["id"]),
        ("port", "delete", iface["port_id"]),
        ("router", "update", router["id"]),
        ("router", "delete", router["id"]),
        ("security_group", "update", sg["id"]),
        ("security_group_rule", "delete", rule["id"]),
        ("port", "delete", port["id"]),
        ("subnet", "delete", sub["id"]),
        ("network", "delete", net["id"]),
    ]
    assert {e["project_id"] for e in items} == {"admin"}
    assert all(e["created_at"].endswith("Z") for e in items)

    # since= is exclusive, and reading is repeatable
    later, _ = events(api, start + 5)
    assert later == items[5:]
    assert events(api, latest) == ([], latest)


def test_router_with_gateway_events(api: httpx.Client) -> None:
    ext = create(api, "networks", "network", name="public", **{"router:external": True})
    create(api, "subnets", "subnet", network_id=ext["id"], cidr="203.0.113.0/24")
    start = revision(api)
    router = create(api, "routers", "router", external_gateway_info={"network_id": ext["id"]})
    gw_ports = api.get("/ports", params={"device_id": router["id"]}).json()["ports"]
    items, _ = events(api, start)
    assert_gap_free(items, start)
    assert summary(items) == [("router", "create", router["id"]), ("port", "create", gw_ports[0]["id"])]

    start = revision(api)
    api.put(f"/routers/{router['id']}", json={"router": {"external_gateway_info": {}}})
    items, _ = events(api, start)
    assert summary(items) == [("port", "delete", gw_ports[0]["id"]), ("router", "update", router["id"])]


def test_bulk_port_create_gives_consecutive_events(api: httpx.Client) -> None:
    net = create(api, "networks", "network", name="n")
    create(api, "subnets", "subnet", network_id=net["id"], cidr="10.0.0.0/24")
    create(api, "ports", "port", network_id=net["id"])  # default group exists from here on
    start = revision(api)
    r = api.post("/ports", json={"ports": [{"network_id": net["id"], "name": f"p{i}"} for i in range(5)]})
    assert r.status_code == 201, r.text
    ports = r.json()["ports"]
    items, latest = events(api, start)
    assert latest == start + 5
    assert_gap_free(items, start)
    assert summary(items) == [("port", "create", p["id"]) for p in ports]


def test_failed_requests_add_no_events(api: httpx.Client) -> None:
    net = create(api, "networks", "network", name="n")
    create(api, "subnets", "subnet", network_id=net["id"], cidr="10.0.0.0/24")
    create(api, "ports", "port", network_id=net["id"], fixed_ips=[{"ip_address": "10.0.0.5"}])
    start = revision(api)
    # a bulk create whose last port fails: nothing of it is kept
    bulk = [{"network_id": net["id"]}, {"network_id": net["id"], "fixed_ips": [{"ip_address": "10.0.0.5"}]}]
    assert api.post("/ports", json={"ports": bulk}).status_code == 409
    assert api.post("/networks", json={"network": {"bogus": True}}).status_code == 400
    assert api.delete(f"/networks/{net['id']}").status_code == 409
    assert api.put(f"/networks/{net['id']}", json={"network": {"mtu": 1}}).status_code == 400
    assert api.get("/networks/8a1b7d8e-3b9f-4a51-9f0b-1f2e3d4c5b6a").status_code == 404
    assert api.get("/networks").status_code == 200
    assert events(api, start) == ([], start)
    assert len(api.get("/ports").json()["ports"]) == 1


def test_limit_and_since(api: httpx.Client) -> None:
    start = revision(api)
    nets = [create(api, "networks", "network", name=f"n{i}") for i in range(4)]
    first, latest = events(api, start, limit=2)
    assert [e["resource_id"] for e in first] == [nets[0]["id"], nets[1]["id"]]
    assert latest == start + 4
    rest, _ = events(api, first[-1]["revision"], limit=2)
    assert [e["resource_id"] for e in rest] == [nets[2]["id"], nets[3]["id"]]
    assert events(api, latest + 100) == ([], latest)


def test_bad_parameters(api: httpx.Client) -> None:
    for params in ({"since": "abc"}, {"since": "-1"}, {"timeout": "soon"}, {"timeout": "-1"}, {"limit": "x"}):
        r = api.get("/events", params=params)
        assert r.status_code == 400, (params, r.text)
        assert r.json()["NeutronError"]["type"] == "HTTPBadRequest"


def test_long_poll_returns_on_commit(api: httpx.Client, server: RunningServer) -> None:
    start = revision(api)
    result: dict[str, Any] = {}

    def poll() -> None:
        with httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=60) as c:
            r = c.get("/events", params={"since": start, "timeout": 30})
            result["done"] = time.monotonic()
            result["response"] = r

    thread = threading.Thread(target=poll)
    thread.start()
    thread.join(0.3)
    assert thread.is_alive(), "the poll returned although nothing changed"

    changed = time.monotonic()
    net = create(api, "networks", "network", name="wake-up")
    thread.join(10)
    assert not thread.is_alive()
    r = result["response"]
    assert r.status_code == 200, r.text
    assert summary(r.json()["events"]) == [("network", "create", net["id"])]
    assert r.json()["revision"] == start + 1
    # well before the 30 s timeout: the commit woke the waiting request
    assert result["done"] - changed < 2.0


def test_long_poll_times_out_empty(api: httpx.Client) -> None:
    start = revision(api)
    t0 = time.monotonic()
    r = api.get("/events", params={"since": start, "timeout": 0.6})
    elapsed = time.monotonic() - t0
    assert r.status_code == 200, r.text
    assert r.json() == {"events": [], "revision": start}
    assert 0.6 <= elapsed < 5


def test_long_poll_with_pending_events_returns_at_once(api: httpx.Client) -> None:
    start = revision(api)
    create(api, "networks", "network", name="n")
    t0 = time.monotonic()
    items, _ = events(api, start, timeout=30)
    assert time.monotonic() - t0 < 2.0
    assert len(items) == 1


def test_timeout_is_capped_by_config(api: httpx.Client, server: RunningServer) -> None:
    server.config.max_event_wait = 0.3
    start = revision(api)
    t0 = time.monotonic()
    assert events(api, start, timeout=30) == ([], start)
    assert time.monotonic() - t0 < 5


def test_events_need_a_token(server: RunningServer, tokens: dict[str, Any]) -> None:
    def get(token: str | None) -> httpx.Response:
        headers = {"X-Auth-Token": token} if token else {}
        return httpx.get(server.url + "/v2.0/events", headers=headers, timeout=30)

    assert get(None).status_code == 401
    assert get("wrong").status_code == 401
    r = get("admin-token")
    assert r.status_code == 200, r.text
    assert r.json()["events"] == []
    # (members follow their own project: tests/api/test_event_stream.py)
