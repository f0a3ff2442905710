"""GET /v2.0/instances/{id}?wait=S: the answer comes once the host's agent has reported the instance's ports (or
after S seconds, as it is then), so a runtime's plugin learns of ACTIVE without polling; only for those who may
see the instance, with a bounded, checked wait."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

from tests.api.test_instances import network_with_subnet, new_instance, port_ids, register, report
from tests.support.api import error

Json = dict[str, Any]


def _alices(admin: httpx.Client, alice: httpx.Client, cidr: str, name: str) -> Json:
    """An instance of alice's on host node-w (made by an admin: only admins and runtimes name a namespace)."""
    register(admin, "node-w")
    net, _ = network_with_subnet(alice, cidr)
    return new_instance(admin, name, host="node-w", project_id="alice", nets=[{"network": net["id"]}])


def _waiting(client: httpx.Client, instance_id: str, wait: float, into: list[Json]) -> threading.Thread:
    def run() -> None:
        r = client.get(f"/instances/{instance_id}", params={"wait": wait})
        assert r.status_code == 200, r.text
        into.append(r.json()["instance"])

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_waiting_read_answers_once_the_agent_has_reported(users: dict[str, httpx.Client]) -> None:
    admin, alice = users["admin"], users["alice"]
    inst = _alices(admin, alice, "10.0.3.0/24", "waited")
    assert inst["status"] == "BUILD"
    started = time.monotonic()
    r = alice.get(f"/instances/{inst['id']}", params={"wait": 0.3})
    assert r.status_code == 200 and r.json()["instance"]["status"] == "BUILD"  # as it is, once the wait is over
    assert time.monotonic() - started >= 0.3
    answers: list[Json] = []
    thread = _waiting(alice, inst["id"], 20, answers)
    report(admin, "node-w", port_ids(inst)[0], "ACTIVE")
    thread.join(timeout=15)  # woken by the report's commit, long before its 20 s
    assert not thread.is_alive() and answers[0]["status"] == "ACTIVE"
    # Done with already: no wait at all.
    assert alice.get(f"/instances/{inst['id']}", params={"wait": 20}).json()["instance"]["status"] == "ACTIVE"


def test_a_wait_out_of_range_is_refused(users: dict[str, httpx.Client]) -> None:
    inst = _alices(users["admin"], users["alice"], "10.0.4.0/24", "w")
    for wait in ("-1", "nan", "inf", "abc", "1" * 50, ""):
        error(users["alice"].get(f"/instances/{inst['id']}", params={"wait": wait}), 400)


def test_another_projects_instance_is_not_waited_for(users: dict[str, httpx.Client]) -> None:
    admin, alice, bob = users["admin"], users["alice"], users["bob"]
    inst = _alices(admin, alice, "10.0.5.0/24", "mine")
    started = time.monotonic()
    error(bob.get(f"/instances/{inst['id']}", params={"wait": 20}), 404)  # at once: visibility before any wait
    assert time.monotonic() - started < 10
