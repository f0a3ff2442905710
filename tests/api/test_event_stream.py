"""The revision log as a typed event stream (`cloudnet monitor`, the web UI): types, request ids, reasons, and what
a member may see of it (their own project's events only)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest

from cloudnet.api import events as api_events
from cloudnet.config import ServerConfig
from tests.api.test_hosts import heartbeat, report
from tests.support.cli import Cli
from tests.support.server import RunningServer

Events = tuple[list[dict[str, Any]], int]


def client(server: RunningServer, token: str) -> httpx.Client:
    return httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": token}, timeout=30)


def follow(api: httpx.Client, since: int, **params: Any) -> Events:
    r = api.get("/events", params={"since": since, **params})
    assert r.status_code == 200, r.text
    return r.json()["events"], int(r.json()["revision"])


def network(api: httpx.Client, name: str, **headers: str) -> dict[str, Any]:
    r = api.post("/networks", json={"network": {"name": name}}, headers=headers)
    assert r.status_code == 201, r.text
    return dict(r.json()["network"])


def test_events_are_typed_and_name_their_request(api: httpx.Client) -> None:
    _, start = follow(api, 0)
    rid = "req-2b5a1f43-6a0c-4a35-9c3a-6f3f5f8e0a11"
    r = api.post("/networks", json={"network": {"name": "typed"}}, headers={"X-OpenStack-Request-ID": rid})
    assert r.headers["X-OpenStack-Request-ID"] == rid
    net = r.json()["network"]
    api.put(f"/networks/{net['id']}", json={"network": {"name": "typed2"}})
    api.delete(f"/networks/{net['id']}")
    items, _ = follow(api, start)
    assert [(e["type"], e["resource_id"]) for e in items] == [
        ("network.created", net["id"]), ("network.updated", net["id"]), ("network.deleted", net["id"])
    ]  # fmt: skip
    assert items[0]["request_id"] == rid
    assert items[1]["request_id"].startswith("req-") and items[1]["request_id"] != rid
    assert {"revision", "resource", "resource_id", "operation", "project_id", "created_at", "detail"} <= set(items[0])


def test_type_filters(api: httpx.Client) -> None:
    _, start = follow(api, 0)
    net = network(api, "filtered")
    api.put(f"/networks/{net['id']}", json={"network": {"name": "f2"}})
    sub = api.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.9.0.0/24"}}).json()["subnet"]
    assert [e["type"] for e in follow(api, start, type="network.updated")[0]] == ["network.updated"]
    assert [e["type"] for e in follow(api, start, type="network")[0]] == ["network.created", "network.updated"]
    both = follow(api, start, type=["subnet", "network.created"])[0]
    assert [e["resource_id"] for e in both] == [net["id"], sub["id"]]


def test_hostile_filters_are_refused(api: httpx.Client) -> None:
    hostile = ({"type": "port;drop"}, {"type": "x" * 100}, {"type": ["a"] * 17}, {"type": "Port.Active"},
               {"project_id": "p" * 256})  # fmt: skip
    for params in hostile:
        r = api.get("/events", params=params)
        assert r.status_code == 400, (params, r.text)


@pytest.fixture
def alice(server: RunningServer, tokens: dict[str, Any]) -> Any:
    with client(server, "alice-token") as c:
        yield c


@pytest.fixture
def bob(server: RunningServer, tokens: dict[str, Any]) -> Any:
    with client(server, "bob-token") as c:
        yield c


def test_a_member_sees_their_project_only(server: RunningServer, alice: httpx.Client, bob: httpx.Client) -> None:
    with client(server, "admin-token") as admin:
        _, admin_start = follow(admin, 0)
        _, alice_start = follow(alice, 0)
        mine = network(alice, "alice-net")
        _, bob_before = follow(bob, 0)
        theirs = network(bob, "bob-secret")
        network(admin, "ops-net")
        # The admin sees all three; alice only hers, and nothing of bob's moves what she is answered.
        assert len(follow(admin, admin_start)[0]) >= 3
        items, latest = follow(alice, alice_start)
        assert [e["resource_id"] for e in items] == [mine["id"]]
        assert {e["project_id"] for e in items} == {"alice"}
        assert latest == items[-1]["revision"]
        network(bob, "bob-more")
        assert follow(alice, 0) == (items, latest)
        assert follow(alice, latest) == ([], latest)
        # Asking for bob's project by name, by filter or by a far revision tells her nothing either.
        r = alice.get("/events", params={"since": 0, "project_id": "bob"})
        assert r.status_code == 403, r.text
        assert "bob-secret" not in r.text and theirs["id"] not in r.text
        assert follow(alice, 0, type="network") == (items, latest)
        assert follow(alice, 0, project_id="alice") == (items, latest)
        # bob's own view starts after his first network, whatever alice and the admin did.
        assert follow(bob, bob_before)[0][0]["resource_id"] == theirs["id"]
        # An admin may follow one project.
        only_bob = follow(admin, 0, project_id="bob")[0]
        assert {e["project_id"] for e in only_bob} == {"bob"} and len(only_bob) == 2


def test_a_member_long_poll_is_not_woken_by_another_project(
    server: RunningServer, alice: httpx.Client, bob: httpx.Client
) -> None:
    _, start = follow(alice, 0)
    answer: dict[str, Any] = {}

    def poll() -> None:
        t0 = time.monotonic()
        answer["events"] = follow(alice, start, timeout=1.5)
        answer["waited"] = time.monotonic() - t0

    waiter = threading.Thread(target=poll)
    waiter.start()
    notifier = server.app.state.notifier
    deadline = time.monotonic() + 10
    while notifier.member_waiters < 1:  # her poll is held by the server before bob commits
        assert time.monotonic() < deadline, "alice's poll was not held"
        time.sleep(0.005)
    network(bob, "wake-not-alice")
    waiter.join(30)
    assert answer["events"] == ([], start)
    assert answer["waited"] >= 1.4  # it waited its whole timeout: bob's commit woke nothing it could see


def test_agents_reports_become_typed_events(server_config: ServerConfig, backend: str, request: Any) -> None:
    server_config.agent_down_time = 1.0  # (before the server starts: it sweeps silent hosts at this pace)
    api: httpx.Client = request.getfixturevalue("api")
    _, start = follow(api, 0)
    host = "ev-host"
    heartbeat(api, host)
    failure = {"object": "instance:i-1", "reason": "no such namespace", "since": "x", "attempts": 1}
    heartbeat(api, host, report={"failures": [failure]})
    heartbeat(api, host, report={"failures": [failure]})  # (the same failure again: no new event)
    heartbeat(api, host, report={})
    net = network(api, "ev-net")
    ok, bad = (api.post("/ports", json={"port": {"network_id": net["id"], "binding:host_id": host}}).json()["port"]
               for _ in range(2))  # fmt: skip
    # An agent's report names the request it realised: a well-formed id only.
    for hostile in ("two words", "x" * 65, "a\nb", 7):
        r = report(api, host, {"id": ok["id"], "status": "ACTIVE", "request_id": hostile})
        assert r.status_code == 400, (hostile, r.text)
    assert report(api, host, {"id": ok["id"], "status": "ACTIVE", "request_id": "req-made-it"}).status_code == 200
    reason = "the kernel said no"
    failed = {"id": bad["id"], "status": "ERROR", "binding:vif_type": "binding_failed",
              "binding:vif_details": {"reason": reason}}  # fmt: skip
    assert report(api, host, failed).status_code == 200
    # The host goes silent: down, and its ports with it.
    items: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while "host.down" not in [e["type"] for e in items]:
        assert time.monotonic() < deadline, items
        items = follow(api, start, timeout=1)[0]
    items = follow(api, start)[0]
    typed = [(e["type"], e["resource_id"], e["detail"]) for e in items if e["type"] != "network.created"]
    assert typed[:3] == [
        ("host.up", host, "registered"),
        ("agent.failure", host, "instance:i-1: no such namespace"),
        ("agent.recovered", host, None),
    ]
    assert ("port.active", ok["id"], None) in typed and ("port.failed", bad["id"], reason) in typed
    assert next(e for e in items if e["type"] == "port.active")["request_id"] == "req-made-it"
    down = typed.index(("host.down", host, "no heartbeat for 1 s"))
    assert ("port.down", ok["id"], "its host stopped answering") in typed[down:]
    # The port's owner sees its ports' events, none of the host's.
    assert not [e for e in items if e["type"].startswith(("host.", "agent.")) and e["project_id"] is not None]


def test_cloudnet_monitor_as_a_member(server: RunningServer, alice: httpx.Client, bob: httpx.Client) -> None:
    cli = Cli(server.url)
    theirs = network(bob, "bob-first")
    mine = network(alice, "alice-second")
    shown = cli.run("--token", "alice-token", "monitor", "--since", "0", "--count", "1", "-f", "json")
    assert shown.exit_code == 0, shown.output
    (event,) = [json.loads(x) for x in shown.stdout.splitlines()]
    assert (event["type"], event["resource_id"], event["project_id"]) == ("network.created", mine["id"], "alice")
    assert theirs["id"] not in shown.output
    text = cli.run("--token", "alice-token", "monitor", "--since", "0", "--count", "1", "--type", "network")
    assert text.stdout.startswith(f"{event['created_at']} network.created network {mine['id']} project=alice ")
    refused = cli.run("--token", "alice-token", "monitor", "--project", "bob", "--count", "1")
    assert refused.exit_code == 1 and "own project" in refused.stderr and theirs["id"] not in refused.output


def test_members_long_polls_are_bounded(
    server: RunningServer, alice: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beyond MAX_MEMBER_WAITERS members' polls at once, one more is answered at once instead of held: however many
    a member opens, the server holds (and re-reads for) a bounded number."""
    monkeypatch.setattr(api_events, "MAX_MEMBER_WAITERS", 2)
    notifier = server.app.state.notifier
    _, start = follow(alice, 0)
    done = threading.Event()

    def hold() -> None:  # (again when its wait ends: the holders stay in until the test is done)
        while not done.is_set():
            follow(alice, start, timeout=25)

    holders = [threading.Thread(target=hold) for _ in range(2)]
    for h in holders:
        h.start()
    try:
        deadline = time.monotonic() + 30
        while notifier.member_waiters < 2:  # both holders' polls are held by the server now
            assert time.monotonic() < deadline, "the holders' polls were not held"
            time.sleep(0.01)
        t0 = time.monotonic()
        assert follow(alice, start, timeout=20) == ([], start)
        assert time.monotonic() - t0 < 10, "a third poll was held (its 20 s) while two others waited"
    finally:
        done.set()
        network(alice, "wake-the-holders")  # (their own project's change ends their waits)
        for h in holders:
            h.join(30)
