"""PUT /v2.0/hosts/{host}/ports answers the revisions around its own changes, so an agent can tell its
own echo (nothing else written since its snapshot) from changes it must reconcile."""

from __future__ import annotations

import httpx

from cloudnet.agent.agent import MAX_REPORTED, Agent
from cloudnet.agent.client import ApiClient
from tests.api.test_hosts import active, events_since, heartbeat, instance, network_with_subnet, port_ids, report
from tests.support.server import RunningServer


def state_revision(api: httpx.Client, host: str) -> int:
    r = api.get(f"/hosts/{host}/state")
    assert r.status_code == 200, r.text
    return int(r.json()["revision"])


def test_report_answers_the_revision_before_and_after_its_changes(api: httpx.Client) -> None:
    heartbeat(api, "echo-1")
    net, _ = network_with_subnet(api, "10.91.0.0/24")
    a, b = (port_ids(instance(api, n, "echo-1", net["id"]))[0] for n in ("ea", "eb"))
    seen = state_revision(api, "echo-1")
    r = report(api, "echo-1", active(a), active(b))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["revision_before"] == seen
    assert body["revision"] == seen + 2  # one event per updated port
    events, latest = events_since(api, seen)
    assert latest == body["revision"]
    assert {(e["resource"], e["resource_id"]) for e in events} == {("port", a), ("port", b)}
    # An unchanged report writes nothing: no revision of its own.
    again = report(api, "echo-1", active(a)).json()
    assert again["revision_before"] == again["revision"] == body["revision"]


def test_a_write_between_snapshot_and_report_shows_in_revision_before(api: httpx.Client) -> None:
    heartbeat(api, "echo-2")
    net, _ = network_with_subnet(api, "10.92.0.0/24")
    port = port_ids(instance(api, "ec", "echo-2", net["id"]))[0]
    seen = state_revision(api, "echo-2")
    network_with_subnet(api, "10.93.0.0/24")  # someone else writes meanwhile
    body = report(api, "echo-2", active(port)).json()
    assert body["revision_before"] > seen  # the agent must not skip: those changes are not its own
    assert body["revision"] == body["revision_before"] + 1


class _Failing:
    """A dataplane with thousands of failed objects (a broken bridge fails every instance on its network)."""

    def failures(self) -> list[dict[str, object]]:
        return [{"object": f"instance:{i:05d}", "reason": "x" * 500, "since": "2026-01-01T00:00:00Z", "attempts": 1,
                 "retry_in": 1.0} for i in range(5000)]  # fmt: skip

    def on_news(self, wake: object) -> None: ...


def test_a_host_with_thousands_of_failures_still_fits_its_heartbeat(api: httpx.Client, server: RunningServer) -> None:
    """Uncapped, these failures make a 2.6 MB heartbeat: refused (413) every time, and the host declared dead."""
    client = ApiClient(server.url, "node-f", "admin")
    try:
        agent = Agent(client, _Failing())  # type: ignore[arg-type]
        agent._report_failures()
    finally:
        client.close()
    shown = api.get("/hosts/node-f").json()["host"]["report"]
    assert len(shown["failures"]) == MAX_REPORTED and shown["failure_count"] == 5000
