"""Many API servers: a real `cloudnet agent --server URL1,URL2` (Linux dataplane, on this machine) follows two
`cloudnet serve` processes on one PostgreSQL database (as a cloud's servers share one); the first is killed -9
while the agent runs, and the agent goes on converging through the second: an instance created there goes ACTIVE,
its namespace plumbed, and a delete there is carried out."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest

from cloudnet.agent.client import servers_of
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux.driver import LinuxDataplane
from tests.support.process import CLOUDNET, serve, stop

OPTIONS = ("--metadata-listen", "off", "--pool-min", "0")


def _until(what: str, check: object, agent: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert agent.poll() is None, f"the agent exited: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"{what}: {log.read_text()[-3000:]}"
        time.sleep(0.05)


def _instance(api: httpx.Client, host: str, net_id: str, ns: str) -> str:
    netns.ensure(ns)
    r = api.post("/instances", json={"instance": {"name": ns, "host": host, "netns": ns,
                                                  "nets": [{"network": net_id}]}})  # fmt: skip
    assert r.status_code == 201, r.text
    return str(r.json()["instance"]["id"])


def _active(api: httpx.Client, iid: str) -> bool:
    return bool(api.get(f"/instances/{iid}").json()["instance"]["status"] == "ACTIVE")


@pytest.mark.parametrize("backend", [pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_the_agent_converges_through_the_other_server_when_one_is_killed(db_url: str, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:6]
    host, namespaces = f"fo-{suffix}", [f"cnfo-{suffix}-1", f"cnfo-{suffix}-2"]
    log = tmp_path / "agent.log"
    with serve(tmp_path / "s1", "--db", db_url, *OPTIONS) as (first, url1), \
            serve(tmp_path / "s2", "--db", db_url, *OPTIONS) as (_second, url2), \
            httpx.Client(base_url=url2 + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=60) as api:  # fmt: skip
        with log.open("wb") as out:
            agent = subprocess.Popen([CLOUDNET, "agent", "--host", host, "--server", f"{url1},{url2}", "--token",
                                      "admin", "--state-dir", str(tmp_path / "agent"), "--metadata-url", "off"],
                                     stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
        try:
            _until("the agent never registered", lambda: api.get(f"/hosts/{host}").status_code == 200, agent, log)
            net = api.post("/networks", json={"network": {"name": host}}).json()["network"]
            subnet = {"subnet": {"network_id": net["id"], "cidr": "10.213.0.0/24"}}
            api.post("/subnets", json=subnet).raise_for_status()
            first_iid = _instance(api, host, net["id"], namespaces[0])
            _until("the first instance never went ACTIVE", lambda: _active(api, first_iid), agent, log)
            assert "API server now" not in log.read_text()  # it followed the first server until now

            first.kill()  # kill -9, while the agent holds a long poll on it
            first.wait()
            iid = _instance(api, host, net["id"], namespaces[1])
            _until("the agent did not converge through the second server", lambda: _active(api, iid), agent, log)
            links = subprocess.run(["ip", "-n", namespaces[1], "-o", "link"], capture_output=True, text=True)
            assert "eth0" in links.stdout  # plumbed by the agent
            assert f"API server now {url2}" in log.read_text()
            # Still following: a delete made on the second server is carried out.
            assert api.delete(f"/instances/{first_iid}").status_code == 204

            def unplugged() -> bool:
                got = subprocess.run(["ip", "-n", namespaces[0], "-o", "link"], capture_output=True, text=True)
                return "eth0" not in got.stdout

            _until("the deleted instance was not unplugged", unplugged, agent, log)
        finally:
            stop(agent)
            LinuxDataplane(host).teardown()
            for ns in namespaces:
                netns.remove(ns)


def test_server_lists() -> None:
    assert servers_of("http://a:1/, http://b:2") == ["http://a:1", "http://b:2"]
    assert servers_of("http://a:1") == ["http://a:1"]
    with pytest.raises(ValueError):
        servers_of(" , ")
