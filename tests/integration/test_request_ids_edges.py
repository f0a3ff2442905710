"""Request ids beyond the API's own answers, with real processes: a `cloudnet serve` with its metadata API and a
`cloudnet agent` with its metadata proxy (JSON logs both). A guest's request through 169.254.169.254 keeps one id from
the agent's relay to the metadata API's log, and the guest sees it in the answer (its own when well-formed, else a
new one); `cloudnet` prints the id of a refused request as the `openstack` CLI does, and `cloudnet-cni` names it in
its error result and its log line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux.driver import LinuxDataplane
from tests.support.cni import invoke
from tests.support.mdata_raw import wait_for
from tests.support.process import CLOUDNET, free_port, serve, stop

FRESH = re.compile(r"req-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
# One HTTP/1.0 request to the metadata address from inside an instance's namespace: argv method, path, body and
# extra header lines (JSON); prints the answer's head.
ASK = """
import json, socket, sys
method, path, body, extra = sys.argv[1], sys.argv[2], sys.argv[3].encode(), json.loads(sys.argv[4])
head = f"{method} {path} HTTP/1.0\\r\\nHost: 169.254.169.254\\r\\nContent-Length: {len(body)}\\r\\n"
head += "".join(f"{k}: {v}\\r\\n" for k, v in extra.items()) + "\\r\\n"
s = socket.create_connection(("169.254.169.254", 80), timeout=10)
s.sendall(head.encode() + body)
answer = b""
while chunk := s.recv(65536):
    answer += chunk
print(answer.split(b"\\r\\n\\r\\n", 1)[0].decode("latin-1"))
"""


@dataclass
class Rig:
    url: str
    api: httpx.Client
    host: str
    server: subprocess.Popen[str]
    server_log: Path
    agent_log: Path
    ns: str  # an ACTIVE instance's namespace
    network: dict[str, Any]


def json_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    work = tmp_path_factory.mktemp("rids")
    host = f"ri-{uuid.uuid4().hex[:8]}"
    md_port = free_port()
    server_log, agent_log = work / "server.log", work / "agent.log"
    with serve(work / "server", "--metadata-listen", f"127.0.0.1:{md_port}", "--log-format", "json",
               log=server_log) as (server, url):  # fmt: skip
        with agent_log.open("w") as out:
            command = [CLOUDNET, "agent", "--host", host, "--server", url, "--token", "agent", "--state-dir",
                       str(work / "agent"), "--metadata-url", f"http://127.0.0.1:{md_port}", "--metadata-secret-file",
                       str(work / "server" / "metadata_secret"), "--log-format", "json"]  # fmt: skip
            agent = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, text=True)
        ns = f"cntest-rid-{uuid.uuid4().hex[:6]}"
        try:
            with httpx.Client(base_url=url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=30) as api:
                wait_for(lambda: api.get(f"/hosts/{host}").status_code == 200, 30, "the agent registered")
                net = api.post("/networks", json={"network": {"name": f"rid-{host}"}}).json()["network"]
                subnet = {"network_id": net["id"], "cidr": "10.79.0.0/24"}
                api.post("/subnets", json={"subnet": subnet}).raise_for_status()
                netns.ensure(ns)
                body = {"name": "guest", "host": host, "netns": ns, "nets": [{"network": net["id"]}]}
                inst = api.post("/instances", json={"instance": body}).json()["instance"]
                active = lambda: api.get(f"/instances/{inst['id']}").json()["instance"]["status"] == "ACTIVE"  # noqa: E731
                wait_for(active, 30, "the instance ACTIVE")
                yield Rig(url, api, host, server, server_log, agent_log, ns, net)
        finally:
            stop(agent)
            netns.remove(ns)
            LinuxDataplane(host).teardown()


def ask(rig: Rig, method: str, path: str, body: str = "", **headers: str) -> dict[str, str]:
    """The answer's status line (as "status") and headers (names lower-cased), asked from the instance."""
    proc = subprocess.run(["ip", "netns", "exec", rig.ns, sys.executable, "-c", ASK, method, path, body,
                           json.dumps(headers)], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    status, *lines = proc.stdout.strip().splitlines()
    found = {"status": status.split(" ")[1]}
    for line in lines:
        name, _sep, value = line.partition(":")
        found[name.strip().lower()] = value.strip()
    return found


def test_a_guest_request_keeps_one_id_from_the_relay_to_the_metadata_api(rig: Rig) -> None:
    plain = ask(rig, "GET", "/openstack/latest/meta_data.json")
    assert plain["status"] == "200" and FRESH.fullmatch(plain.get("x-openstack-request-id", "")), plain
    again = ask(rig, "GET", "/openstack/latest/meta_data.json")
    assert again["x-openstack-request-id"] != plain["x-openstack-request-id"]  # one per request, not per guest
    mine = f"guest-{uuid.uuid4().hex[:8]}.1"
    assert ask(rig, "GET", "/latest/meta-data/", **{"X-OpenStack-Request-ID": mine})["x-openstack-request-id"] == mine
    assert ask(rig, "GET", "/", **{"X-Request-ID": mine})["x-openstack-request-id"] == mine
    # Hostile ids (too long, characters a log line or a shell would read) are replaced, as the API replaces them.
    # (control characters do not get this far: the HTTP parser refuses the head, 400)
    for hostile in ("a" * 65, "x;rm -rf", "-leading-dash", "id/../x", "[fake] line", mine + "\u00e9"):
        got = ask(rig, "GET", "/openstack/latest/meta_data.json", **{"X-OpenStack-Request-ID": hostile})
        assert got["status"] == "200" and FRESH.fullmatch(got["x-openstack-request-id"]), (hostile, got)
    # A write (the password) is logged on both sides, under the guest's id.
    posted = f"pw-{uuid.uuid4().hex}"
    answer = ask(rig, "POST", "/openstack/latest/password", "s3cret", **{"X-OpenStack-Request-ID": posted})
    assert answer["status"] == "200" and answer["x-openstack-request-id"] == posted, answer
    relay = lambda: [x for x in json_lines(rig.agent_log) if x["request_id"] == posted]  # noqa: E731
    wait_for(relay, 10, "the relay's line of the POST")
    assert "POST /openstack/latest/password" in relay()[0]["message"] and relay()[0]["message"].endswith(": 200")
    stored = lambda: [x for x in json_lines(rig.server_log) if x["request_id"] == posted]  # noqa: E731
    wait_for(stored, 10, "the metadata API's line of the POST")  # (the server's log is written by a thread)
    assert "stored its password" in stored()[0]["message"], stored()
    assert stored()[0]["logger"] == "cloudnet.metadata.server"


def test_the_cli_prints_the_id_of_a_refused_request(rig: Rig) -> None:
    # A subnet overlapping the network's own: the API refuses it.
    proc = subprocess.run([CLOUDNET, "--url", rig.url, "--token", "admin", "subnet", "create", "again", "--network",
                           rig.network["id"], "--subnet-range", "10.79.0.0/25"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 1
    found = re.search(r"\((400|409) \w+\) \(Request-ID: (req-[0-9a-f-]{36})\)$", proc.stderr.strip())
    assert found, proc.stderr
    rid = found.group(2)
    line = lambda: [x for x in json_lines(rig.server_log) if x["request_id"] == rid]  # noqa: E731
    wait_for(line, 10, "the server's line of the refused POST")
    assert line()[0]["message"].startswith(f"POST /v2.0/subnets {found.group(1)}"), line()


def test_cloudnet_cni_names_the_id_of_a_refused_request(rig: Rig, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("runtime\n")
    token.chmod(0o600)
    conf = {"cniVersion": "1.1.0", "name": f"rid-{rig.host}", "type": "cloudnet-cni", "network": rig.network["name"],
            "url": rig.url, "token_file": str(token), "host": rig.host, "timeout": 20}  # fmt: skip
    sandbox = f"cntest-ridc-{uuid.uuid4().hex[:6]}"
    netns.ensure(sandbox)
    try:
        # An address outside the network's subnet: the API refuses the instance.
        env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": f"c{uuid.uuid4().hex}", "CNI_NETNS": netns.path_of(sandbox),
               "CNI_IFNAME": "eth0", "CNI_ARGS": "IP=10.99.0.5", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}  # fmt: skip
        proc = subprocess.run([str(Path(sys.executable).with_name("cloudnet-cni"))], input=json.dumps(conf),
                              capture_output=True, text=True, env=env, timeout=90)  # fmt: skip
    finally:
        netns.remove(sandbox)
    assert proc.returncode == 1
    result = json.loads(proc.stdout)
    assert result["code"] == 100, result
    found = re.search(r"\(Request-ID: (req-[0-9a-f-]{36})\)", result["msg"])
    assert found, result
    rid = found.group(1)
    assert f"(Request-ID: {rid})" in proc.stderr and proc.stderr.startswith("cloudnet-cni: ADD failed:"), proc.stderr
    line = lambda: [x for x in json_lines(rig.server_log) if x["request_id"] == rid]  # noqa: E731
    wait_for(line, 10, "the server's line of the refused POST")
    assert line()[0]["message"].startswith("POST /v2.0/instances 400"), line()
    # The plugin's other runs answer as before: a VERSION has nothing to name and writes nothing to stderr.
    assert invoke("VERSION", b"")[0] == 0
