"""One request followed from POST to kernel: a real `cloudnet serve` and a real `cloudnet agent` (processes, JSON
logs), and `cloudnet monitor` streaming what happens. The client's request id comes back in the answer, is in the
server's log line of the request, in the agent's log line of the pass that plugged the port, and on the port's
ACTIVE event; the monitor shows that port going ACTIVE, then an agent's failure, in order."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux.driver import LinuxDataplane
from tests.support.mdata_raw import wait_for
from tests.support.process import CLOUDNET, serve, stop


@dataclass
class Site:
    url: str
    api: httpx.Client
    host: str
    server: subprocess.Popen[str]
    agent: subprocess.Popen[str]
    agent_log: Path


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    host = f"rq-{uuid.uuid4().hex[:8]}"
    agent_log = tmp_path / "agent.log"
    with serve(tmp_path / "server", "--metadata-listen", "off", "--log-format", "json") as (server, url):
        with agent_log.open("w") as out:
            command = [CLOUDNET, "agent", "--host", host, "--server", url, "--token", "agent", "--state-dir",
                       str(tmp_path / "agent"), "--metadata-url", "off", "--log-format", "json"]  # fmt: skip
            agent = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, text=True)
        try:
            with httpx.Client(base_url=url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=30) as api:
                wait_for(lambda: api.get(f"/hosts/{host}").status_code == 200, 30, "the agent registered")
                yield Site(url, api, host, server, agent, agent_log)
        finally:
            stop(agent)
            LinuxDataplane(host).teardown()


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def read_until(monitor: subprocess.Popen[str], last_type: str, timeout: float = 60) -> list[dict[str, Any]]:
    """The monitor's events up to the first of `last_type` (a reader's wait: its lines come as events happen)."""
    assert monitor.stdout is not None
    shown: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while not shown or shown[-1]["type"] != last_type:
        assert time.monotonic() < deadline, f"no {last_type} event after {timeout} s: {shown}"
        line = monitor.stdout.readline()
        assert line, f"the monitor ended: {shown}"
        shown.append(json.loads(line))
    return shown


def test_a_request_id_from_post_to_kernel_and_the_monitor(site: Site) -> None:
    api = site.api
    net = api.post("/networks", json={"network": {"name": "trail"}}).json()["network"]
    api.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.77.0.0/24"}}).raise_for_status()
    since = api.get("/events", params={"since": 0, "limit": 1}).json()["revision"]
    monitor = subprocess.Popen([CLOUDNET, "--url", site.url, "--token", "admin", "monitor", "--since", str(since),
                                "--type", "port.active", "--type", "agent.failure", "-f", "json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    ns = f"cntest-trail-{uuid.uuid4().hex[:6]}"
    netns.ensure(ns)
    try:
        rid = f"req-{uuid.uuid4()}"
        body = {"name": "traced", "host": site.host, "netns": ns, "nets": [{"network": net["id"]}]}
        r = api.post("/instances", headers={"X-OpenStack-Request-ID": rid}, json={"instance": body})
        assert r.status_code == 201, r.text
        assert r.headers["X-OpenStack-Request-ID"] == rid
        inst = r.json()["instance"]
        wait_for(lambda: api.get(f"/instances/{inst['id']}").json()["instance"]["status"] == "ACTIVE", 30, "ACTIVE")
        port_id = api.get(f"/instances/{inst['id']}").json()["instance"]["nets"][0]["port_id"]
        # Then an object the agent cannot converge: an instance whose namespace is a plain file.
        body = {"name": "broken", "host": site.host, "netns": "/etc/hostname", "nets": [{"network": net["id"]}]}
        bad = api.post("/instances", json={"instance": body}).json()["instance"]
        shown = read_until(monitor, "agent.failure")
    finally:
        stop(monitor)
        netns.remove(ns)
    # The traced port's ACTIVE (among the network's own ports'), then the failure, nothing else.
    assert {e["type"] for e in shown} == {"port.active", "agent.failure"}
    active = [e for e in shown if e["resource_id"] == port_id]
    assert [e["type"] for e in active] == ["port.active"] and active[0]["request_id"] == rid, shown
    assert shown[-1]["resource_id"] == site.host and bad["id"] in shown[-1]["detail"], shown
    # The same id in the server's log line of the request and in the agent's line of the pass that plugged it.
    stop(site.server)
    server_lines = json_lines(site.server.stdout.read() if site.server.stdout else "")
    assert [x for x in server_lines if x["request_id"] == rid and x["message"].startswith("POST /v2.0/instances 201")]
    agent_lines = json_lines(site.agent_log.read_text())
    assert [x for x in agent_lines if x["request_id"] == rid and x["message"] == f"port {port_id} ACTIVE"], agent_lines
    assert [x for x in agent_lines if rid in (x["request_id"] or "") and "reconciled revision" in x["message"]]
