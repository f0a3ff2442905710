"""POST /v2.0/hosts/{name}/check: a drift check asked of a host's agent, as an event it follows (both databases).

The agent's side (the check itself, its result in the host's report, `cloudnet host check`) runs against the real
kernel in tests/integration/test_forward_repair.py and test_churn.py.
"""

from __future__ import annotations

import httpx

from tests.support.api import check_error


def test_a_check_is_an_event_of_the_host_with_its_revision(api: httpx.Client) -> None:
    assert api.put("/hosts/h1", json={"host": {"agent_version": "test"}}).status_code == 200
    before = int(api.get("/events", params={"since": 0, "limit": 1}).json()["revision"])
    r = api.post("/hosts/h1/check")
    assert r.status_code == 202, r.text
    asked = r.json()["check"]
    assert asked == {"host": "h1", "revision": before + 1}
    events = api.get("/events", params={"since": before}).json()["events"]
    assert [(e["revision"], e["resource"], e["resource_id"], e["operation"]) for e in events] == [
        (before + 1, "host", "h1", "check")
    ]
    assert api.post("/hosts/h1/check").json()["check"]["revision"] == before + 2  # each asks again


def test_only_admins_check_known_hosts(users: dict[str, httpx.Client]) -> None:
    admin, alice = users["admin"], users["alice"]
    assert admin.put("/hosts/h1", json={"host": {"agent_version": "test"}}).status_code == 200
    before = admin.get("/events", params={"since": 0, "limit": 1}).json()["revision"]
    check_error(alice.post("/hosts/h1/check"), 403, "PolicyNotAuthorized", "Only admins")
    check_error(admin.post("/hosts/nowhere/check"), 404, "HostNotFound", "nowhere")
    assert admin.get("/events", params={"since": 0, "limit": 1}).json()["revision"] == before  # nothing recorded
