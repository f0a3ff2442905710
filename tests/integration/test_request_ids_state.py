"""A port's status report names the request that made it even when the agent never read that request's event: the
desired state it realised the port from was newer than the log it had read, and it skips those events after (the
state carries each port's last request: services/hosts/host_state.port_requests) (root)."""

from __future__ import annotations

import uuid

from tests.support.cloud import Cloud


def test_a_port_realised_before_its_event_was_read_still_names_its_request(cloud: Cloud) -> None:
    api = cloud.api
    assert api.put(f"/hosts/{cloud.host}", json={"host": {"agent_version": "test"}}).status_code == 200
    net, _sub = cloud.network("rq-state", "10.98.0.0/24")
    rid = f"req-{uuid.uuid4()}"
    body = {"name": "rq", "host": cloud.host, "netns": cloud.namespace("rq"), "nets": [{"network": net["id"]}]}
    r = api.post("/instances", headers={"X-OpenStack-Request-ID": rid}, json={"instance": body})
    assert r.status_code == 201, r.text
    # Then a change of the port by another request, and the agent only now: its first pass realises the port from a
    # state newer than any event it read.
    port_id = r.json()["instance"]["nets"][0]["port_id"]
    renamed = f"req-{uuid.uuid4()}"
    r = api.put(f"/ports/{port_id}", headers={"X-OpenStack-Request-ID": renamed}, json={"port": {"name": "rq-0"}})
    assert r.status_code == 200, r.text
    cloud.start_agent()
    cloud.wait_active(r.json()["port"]["device_id"])
    events = api.get("/events", params={"since": 0, "type": "port.active"}).json()["events"]
    assert [e["request_id"] for e in events if e["resource_id"] == port_id] == [renamed], events
