"""SmartOS metadata sockets end to end: a live API, an instance on a registered host, an MdataService with a
real ApiClient, and real clients on the instance's socket.

- cloud-init's own `JoyentMetadataSocketClient` (Debian package `cloud-init`, imported by Debian's python3 in a
  subprocess; the `cloud-init` command is never run) reads and writes keys; writes show up through the API.
- `cloudnet-mdata` with mdata-client's exit codes.
- The socket survives a service restart and instance restarts (a fresh read-only bind mount of its directory,
  in a mount namespace of its own, as a runtime gives an instance), is recreated when its file vanishes or goes
  stale (also through a mount made before), and drops malformed or spoofed frames without closing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudnet.agent.client import ApiClient
from cloudnet.agent.metadata.mdata_service import MdataService
from cloudnet.wire.mdata_protocol import crc32_hex, new_reqid, parse_v2_response, put_payload, v2_request
from tests.support.installed import DEBIAN_PYTHON, require_cloud_init
from tests.support.mdata_raw import (
    Raw,
    closed_by_peer,
    connectable,
    deleted_with_its_instance,
    mdata_services,
    stale_socket,
    stored,
    wait_for,
)
from tests.support.server import RunningServer

CHECK = 0.1  # seconds between the service's own socket checks in these tests
USER_DATA = "#cloud-config\nruncmd: [true]\n"
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl test@cloudnet"


@pytest.fixture(scope="module")
def cloudinit() -> None:
    require_cloud_init()


@pytest.fixture
def state_dir() -> Iterator[Path]:
    # Short on purpose: clients connect by path, and sun_path holds 107 bytes.
    path = Path(tempfile.mkdtemp(prefix="mdata-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def host(api: httpx.Client) -> str:
    name = f"mdata-{uuid.uuid4().hex[:6]}"
    r = api.put(f"/hosts/{name}", json={"host": {"agent_version": "test"}})
    assert r.status_code == 200, r.text
    return name


@pytest.fixture
def instance(api: httpx.Client, host: str) -> dict[str, Any]:
    net = api.post("/networks", json={"network": {"name": "mdata"}}).json()["network"]
    subnet = {
        "network_id": net["id"], "cidr": "10.61.0.0/24", "dns_nameservers": ["10.61.0.53"],
        "host_routes": [{"destination": "192.168.100.0/24", "nexthop": "10.61.0.254"}],
    }  # fmt: skip
    assert api.post("/subnets", json={"subnet": subnet}).status_code == 201
    body = {
        "name": "web-1", "hostname": "web-1.example.com", "host": host, "netns": "mdata-web-1",
        "nets": [{"network": net["id"], "v4-fixed-ip": "10.61.0.10"}], "user_data": USER_DATA,
        "metadata": {"hostname": "web-1", "role": "web", "motd_sys_info": "hello"},
        "ssh_keys": [{"name": "test", "key": SSH_KEY}],
    }  # fmt: skip
    r = api.post("/instances", json={"instance": body})
    assert r.status_code == 201, r.text
    return dict(r.json()["instance"])


@pytest.fixture
def agent_client(server: RunningServer, host: str) -> Iterator[ApiClient]:
    client = ApiClient(server.url, host, "admin")
    yield client
    client.close()


@pytest.fixture
def start(state_dir: Path, agent_client: ApiClient, instance: dict[str, Any]) -> Iterator[Callable[[], MdataService]]:
    """Start an MdataService following the host's desired state, which has `instance`, as the agent would."""
    with mdata_services(state_dir, agent_client, agent_client.desired_state, datacenter_name="dc-test",
                        check_interval=CHECK) as start:  # fmt: skip
        yield start


@pytest.fixture
def service(start: Callable[[], MdataService]) -> MdataService:
    return start()


def run_cloudinit(sock: str, script: str, *, prefix: list[str] | None = None) -> Any:
    """Run `script` with `c`, cloud-init's connected SmartOS socket client; it prints JSON as its last line."""
    code = (
        "import json, sys\n"
        "from cloudinit.sources.DataSourceSmartOS import JoyentMetadataSocketClient\n"
        f"c = JoyentMetadataSocketClient({sock!r})\n"
        "c.open_transport()\n"
        # cloud-init 25 dropped the client's delete(); 22.4's was this same request, so it reads the same on both.
        "def delete(key):\n    return c.request(rtype='DELETE', param=key)\n" + script
    )
    r = subprocess.run([*(prefix or []), DEBIAN_PYTHON, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def mdata(
    sock: str | None, *args: str, stdin: str | None = None, env: dict[str, str] | None = None, timeout: float = 10
) -> Any:
    script = Path(sys.executable).with_name("cloudnet-mdata")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "cloudnet.cli.mdata"]
    if sock is not None:
        cmd += ["--socket", sock]
    return subprocess.run([*cmd, "--timeout", str(timeout), *args], capture_output=True, text=True, input=stdin,
                          timeout=60, env={**os.environ, **(env or {})})  # fmt: skip


# -- reading -------------------------------------------------------------------------------------


def test_cloudinit_reads_its_instance(
    cloudinit: None, service: MdataService, instance: dict[str, Any], state_dir: Path
) -> None:
    sock = service.socket_path(instance["id"])
    assert sock == state_dir / "zonecontrol" / instance["id"] / "metadata.sock"
    # cloud-init's SmartOS datasource reads these, in this order, on one connection (reference §2.5).
    got = run_cloudinit(str(sock), """
keys = ["sdc:uuid", "hostname", "root_authorized_keys", "user-script", "user-data", "cloud-init:user-data",
        "iptables_disable", "motd_sys_info", "sdc:datacenter_name", "sdc:vendor-data", "sdc:operator-script",
        "sdc:hostname", "sdc:dns_domain", "role"]
out = {k: c.get(k) for k in keys}
for k in ["sdc:nics", "sdc:resolvers", "sdc:routes"]:
    out[k] = c.get_json(k)
out["KEYS"] = c.list()
from cloudinit.sources.DataSourceSmartOS import convert_smartos_network_data
out["network"] = convert_smartos_network_data(out["sdc:nics"], out["sdc:resolvers"], out["sdc:dns_domain"],
                                              out["sdc:routes"])
print(json.dumps(out))
""")  # fmt: skip
    port = instance["nets"][0]
    assert got["sdc:uuid"] == instance["id"]
    assert got["hostname"] == "web-1"
    assert got["sdc:hostname"] == "web-1.example.com"
    assert got["sdc:dns_domain"] == "example.com"
    assert got["sdc:datacenter_name"] == "dc-test"
    assert got["root_authorized_keys"] == SSH_KEY + "\n"
    assert got["user-data"] == got["cloud-init:user-data"] == USER_DATA
    assert got["motd_sys_info"] == "hello" and got["role"] == "web"
    for absent in ("user-script", "iptables_disable", "sdc:vendor-data", "sdc:operator-script"):
        assert got[absent] is None
    assert got["sdc:nics"] == [
        {"interface": "eth0", "mac": port["mac_address"], "primary": True, "ips": ["10.61.0.10/24"],
         "gateways": ["10.61.0.1"], "network_uuid": port["network_id"], "mtu": 1500, "ip": "10.61.0.10",
         "netmask": "255.255.255.0", "gateway": "10.61.0.1"}
    ]  # fmt: skip
    assert got["sdc:resolvers"] == ["10.61.0.53"]
    assert got["sdc:routes"] == [{"dst": "192.168.100.0/24", "gateway": "10.61.0.254", "linklocal": False}]
    assert sorted(got["KEYS"]) == sorted(
        ["hostname", "role", "motd_sys_info", "root_authorized_keys", "user-data", "cloud-init:user-data"]
    )
    # What cloud-init would configure from it.
    phys, dns = got["network"]["config"]
    assert phys["name"] == "eth0" and phys["mac_address"] == port["mac_address"]
    (subnet,) = phys["subnets"]
    assert subnet["address"] == "10.61.0.10/24" and subnet["gateway"] == "10.61.0.1"
    assert subnet["routes"] == [{"network": "192.168.100.0/24", "gateway": "10.61.0.254"}]
    assert dns == {"type": "nameserver", "address": ["10.61.0.53"], "search": ["example.com"]}


def test_socket_layout(service: MdataService, instance: dict[str, Any], state_dir: Path) -> None:
    directory = service.directory(instance["id"])
    assert directory.parent == state_dir / "zonecontrol"
    assert oct(directory.parent.stat().st_mode & 0o777) == "0o700"
    assert oct(directory.stat().st_mode & 0o777) == "0o755"
    sock = service.socket_path(instance["id"]).lstat()
    assert oct(sock.st_mode & 0o777) == "0o666"
    assert os.listdir(directory) == ["metadata.sock"]


# -- writing -------------------------------------------------------------------------------------


def test_cloudinit_writes_reach_the_api(
    cloudinit: None, service: MdataService, instance: dict[str, Any], api: httpx.Client, agent_client: ApiClient
) -> None:
    sock = str(service.socket_path(instance["id"]))
    got = run_cloudinit(sock, """
out = {"put": c.put("app:color", "blue"), "get": c.get("app:color"), "pw": c.put("root_pw", "s3cret"),
       "get_pw": c.get("root_pw"), "sdc": c.put("sdc:hostname", "evil"), "del": delete("role"),
       "after_del": c.get("role"), "del_absent": delete("never-set"), "multi": c.put("note", "a\\nb\\n"),
       "KEYS": c.list()}
print(json.dumps(out))
""")  # fmt: skip
    # Read-your-write on the same connection, before any new desired state reached the service.
    assert got["put"] == "OK" and got["get"] == "blue"
    assert got["pw"] == "OK" and got["get_pw"] == "s3cret"
    assert got["sdc"] is None  # FAILURE: cloud-init returns None for anything but SUCCESS
    assert got["del"] == "OK" and got["after_del"] is None
    assert got["del_absent"] == "OK"  # as the SmartOS agent: no existence check
    assert got["multi"] == "OK"
    assert "app:color" in got["KEYS"] and "root_pw" in got["KEYS"] and "role" not in got["KEYS"]

    meta = stored(api, instance["id"])
    assert meta["metadata"] == {"hostname": "web-1", "motd_sys_info": "hello", "app:color": "blue", "note": "a\nb\n"}
    assert meta["internal_metadata"] == {"root_pw": "s3cret"}
    # The agent's next reconcile brings the same values back as desired state.
    service.update(agent_client.desired_state())
    again = run_cloudinit(sock, 'print(json.dumps([c.get("app:color"), c.get("root_pw"), c.get("role")]))')
    assert again == ["blue", "s3cret", None]


def test_a_state_older_than_a_write_does_not_undo_it(
    service: MdataService, instance: dict[str, Any], agent_client: ApiClient
) -> None:
    older = agent_client.desired_state()
    raw = Raw(str(service.socket_path(instance["id"])))
    try:
        assert raw.request("PUT", put_payload("role", b"db")) == ("SUCCESS", b"OK")
        service.update(older)  # a reconcile that fetched its state before the write committed
        assert raw.request("GET", b"role") == ("SUCCESS", b"db")
        service.update(agent_client.desired_state())
        assert raw.request("GET", b"role") == ("SUCCESS", b"db")
        assert service._instances[instance["id"]].pending is None  # the desired state has caught up
    finally:
        raw.close()


def test_writes_fail_cleanly_without_the_api(
    state_dir: Path, agent_client: ApiClient, instance: dict[str, Any]
) -> None:
    unreachable = ApiClient("http://127.0.0.1:9", agent_client.host, "admin", timeout=2)
    svc = MdataService(state_dir, unreachable, check_interval=CHECK)
    try:
        svc.update(agent_client.desired_state())
        raw = Raw(str(svc.socket_path(instance["id"])))
        assert raw.request("PUT", put_payload("k", b"v")) == ("FAILURE", b"metadata store unavailable")
        assert raw.request("DELETE", b"role") == ("FAILURE", b"metadata store unavailable")
        assert raw.request("GET", b"role") == ("SUCCESS", b"web")  # reads need no API
        raw.close()
    finally:
        svc.close()
        unreachable.close()


def test_guest_writes_are_rate_limited(state_dir: Path, agent_client: ApiClient, instance: dict[str, Any]) -> None:
    svc = MdataService(state_dir, agent_client, write_rate=0.001, write_burst=2, check_interval=CHECK)
    try:
        svc.update(agent_client.desired_state())
        raw = Raw(str(svc.socket_path(instance["id"])))
        assert raw.request("PUT", put_payload("a", b"1")) == ("SUCCESS", b"OK")
        assert raw.request("DELETE", b"a") == ("SUCCESS", b"OK")
        assert raw.request("PUT", put_payload("b", b"2")) == ("FAILURE", b"Too many metadata writes; try again later")
        assert raw.request("GET", b"role") == ("SUCCESS", b"web")  # reads are not limited
        raw.close()
    finally:
        svc.close()


def test_api_changes_reach_the_guest(
    cloudinit: None, service: MdataService, instance: dict[str, Any], api: httpx.Client, agent_client: ApiClient
) -> None:
    base = f"/instances/{instance['id']}/metadata"
    assert api.put(f"{base}/user-script", json={"value": "#!/bin/sh\necho hi\n"}).status_code == 200
    assert api.put(f"{base}/docker:cmd", json={"value": "sleep", "internal": True}).status_code == 200
    assert api.put(f"{base}/operator-script", json={"value": "#!/bin/sh\nop\n", "internal": True}).status_code == 200
    service.update(agent_client.desired_state())
    got = run_cloudinit(str(service.socket_path(instance["id"])), """
print(json.dumps({"script": c.get("user-script"), "docker": c.get("docker:cmd"), "op": c.get("sdc:operator-script"),
                  "put_docker": c.put("docker:env", "x"), "del_docker": delete("docker:cmd"), "KEYS": c.list()}))
""")  # fmt: skip
    assert got["script"] == "#!/bin/sh\necho hi\n"
    assert got["docker"] == "sleep"
    assert got["op"] == "#!/bin/sh\nop\n"
    assert got["put_docker"] is None and got["del_docker"] is None  # the docker namespace is read-only
    assert "docker:cmd" in got["KEYS"] and "operator-script" not in got["KEYS"]
    assert stored(api, instance["id"])["internal_metadata"]["docker:cmd"] == "sleep"


def test_cloudnet_mdata_client(service: MdataService, instance: dict[str, Any], api: httpx.Client) -> None:
    sock = str(service.socket_path(instance["id"]))
    r = mdata(sock, "get", "sdc:uuid")
    assert (r.returncode, r.stdout) == (0, instance["id"] + "\n")
    r = mdata(sock, "get", "root_authorized_keys")
    assert (r.returncode, r.stdout) == (0, SSH_KEY + "\n")  # already ends with a newline: none added
    r = mdata(sock, "get", "no-such-key")
    assert (r.returncode, r.stdout) == (1, "")
    assert "No metadata for 'no-such-key'" in r.stderr

    assert mdata(sock, "put", "color", "green").returncode == 0
    assert mdata(sock, "put", "motd", stdin="line one\nline two\n").returncode == 0
    assert mdata(None, "get", "color", env={"CLOUDNET_MDATA_SOCKET": sock}).stdout == "green\n"
    r = mdata(sock, "put", "sdc:uuid", "x")
    assert r.returncode == 2 and 'Cannot update the "sdc" Namespace.' in r.stderr
    r = mdata(sock, "list")
    assert r.returncode == 0
    assert set(r.stdout.splitlines()) >= {"color", "motd", "role", "hostname"}
    assert mdata(sock, "delete", "role").returncode == 0
    assert mdata(sock, "get", "role").returncode == 1
    assert stored(api, instance["id"])["metadata"] == {
        "hostname": "web-1", "motd_sys_info": "hello", "color": "green", "motd": "line one\nline two\n",
    }  # fmt: skip

    for usage in ([], ["get"], ["get", "a", "b"], ["frob"], ["put"], ["--timeout", "x", "list"]):
        r = mdata(sock, *usage)
        assert r.returncode == 3, (usage, r.stderr)
    r = mdata("/tmp/no-such-dir/metadata.sock", "get", "x")
    assert r.returncode == 2 and "could not open metadata socket" in r.stderr


# -- protocol robustness -------------------------------------------------------------------------


def test_v1_fallback(service: MdataService, instance: dict[str, Any], api: httpx.Client) -> None:
    api.put(f"/instances/{instance['id']}/metadata/dotted", json={"value": ".starts\nplain\n.again"})
    service.update(ApiClient.desired_state(service.client))
    raw = Raw(str(service.socket_path(instance["id"])))
    try:
        raw.send(b"\n")
        assert raw.line() == b"invalid command"
        raw.send(b"GET sdc:uuid\n")
        assert (raw.line(), raw.line(), raw.line()) == (b"SUCCESS", instance["id"].encode(), b".")
        raw.send(b"GET dotted\n")
        assert [raw.line() for _ in range(5)] == [b"SUCCESS", b"..starts", b"plain", b"..again", b"."]
        raw.send(b"GET nope\nKEYS\n")
        assert raw.line() == b"NOTFOUND"
        assert raw.line() == b"SUCCESS"
        names = []
        while (line := raw.line()) != b".":
            names.append(line)
        assert b"dotted" in names and b"role" in names
        raw.send(b"PUT color blue\nDELETE role\nFROB\nNEGOTIATE V9\n")
        assert [raw.line() for _ in range(4)] == [b"FAILURE"] * 4  # v1 has no writes
        assert "color" not in stored(api, instance["id"])["metadata"]
    finally:
        raw.close()


def test_malformed_and_spoofed_frames_are_dropped(service: MdataService, instance: dict[str, Any]) -> None:
    path = str(service.socket_path(instance["id"]))
    raw = Raw(path)
    try:
        raw.send(b"NEGOTIATE V2\n")
        assert raw.line() == b"V2_OK"
        rid = b"0badf00d"
        body = rid + b" GET " + b"c2RjOnV1aWQ="  # GET sdc:uuid
        bad = [
            b"V2 %d %s %s\n" % (len(body), b"00000000", body),  # CRC of something else
            b"V2 %d %s %s\n" % (len(body) + 3, crc32_hex(body), body),  # wrong length
            b"V2 %d %s %s\n" % (len(body), crc32_hex(body).upper(), body),  # CRC in the wrong case
            b"V2 16 %s XYZ12345 GET\n" % crc32_hex(b"XYZ12345 GET ab"),  # request id not hex
            b"V2 nonsense\n",
            b"V2\n",
            b"x" * (1 << 20) + b"yyy\n",  # over the line limit
            b"\xff\xfe\x00binary\n",  # not a command: `invalid command`, like any unparseable line
        ]
        before = service.dropped(instance["id"])
        for frame in bad[:-1]:
            raw.send(frame)
        assert raw.line(timeout=0.5) is None  # nothing answered
        assert service.dropped(instance["id"]) == before + len(bad) - 1
        raw.send(bad[-1])
        assert raw.line() == b"FAILURE"
        # A frame shaped like a response (a guest pretending to be the host) is just an unknown command.
        spoof = rid + b" SUCCESS " + b"b3du"
        raw.send(b"V2 %d %s %s\n" % (len(spoof), crc32_hex(spoof), spoof))
        answer = parse_v2_response(raw.line() or b"", rid)
        assert answer is not None and answer.code == "FAILURE" and answer.value == b"Unknown command SUCCESS"
        # The same connection still answers, and so does the socket.
        assert raw.request("GET", b"sdc:uuid") == ("SUCCESS", instance["id"].encode())
        assert raw.request("PUT", b"not two terms") == ("FAILURE", b"Invalid PUT Request")
        assert raw.request("GET", b"") == ("FAILURE", b"Invalid GET Request")
    finally:
        raw.close()
    other = Raw(path)
    try:
        assert other.request("GET", b"role") == ("SUCCESS", b"web")
    finally:
        other.close()


def test_pipelined_requests_are_answered_in_order(service: MdataService, instance: dict[str, Any]) -> None:
    raw = Raw(str(service.socket_path(instance["id"])))
    try:
        ops = [("PUT", put_payload("k", b"1")), ("GET", b"k"), ("PUT", put_payload("k", b"2")), ("GET", b"k"),
               ("DELETE", b"k"), ("GET", b"k"), ("KEYS", None)]  # fmt: skip
        rids = [new_reqid() for _ in ops]
        raw.send(b"".join(v2_request(rid, op, arg) for rid, (op, arg) in zip(rids, ops, strict=True)))
        answers = []
        for rid in rids:
            answer = parse_v2_response(raw.line() or b"", rid)
            assert answer is not None
            answers.append((answer.code, answer.value))
        assert answers[:6] == [("SUCCESS", b"OK"), ("SUCCESS", b"1"), ("SUCCESS", b"OK"), ("SUCCESS", b"2"),
                               ("SUCCESS", b"OK"), ("NOTFOUND", None)]  # fmt: skip
    finally:
        raw.close()


def test_connection_limit(
    state_dir: Path, agent_client: ApiClient, api: httpx.Client, host: str, instance: dict[str, Any]
) -> None:
    """The limit is per instance socket (issue 15, case 9): a guest at its limit leaves its neighbour's alone."""
    body = {"name": "other", "host": host, "netns": "mdata-other", "metadata": {"role": "db"}}
    other = api.post("/instances", json={"instance": body}).json()["instance"]
    svc = MdataService(state_dir, agent_client, max_connections=2, check_interval=CHECK)
    try:
        svc.update(agent_client.desired_state())
        path = str(svc.socket_path(instance["id"]))
        held = [Raw(path), Raw(path)]
        assert held[0].request("GET", b"role")[0] == "SUCCESS"
        assert held[1].request("GET", b"role")[0] == "SUCCESS"
        extra = Raw(path)
        assert closed_by_peer(extra)  # closed at once
        extra.close()
        neighbour = Raw(str(svc.socket_path(other["id"])))
        assert neighbour.request("GET", b"role") == ("SUCCESS", b"db")
        neighbour.close()
        held[0].close()
        wait_for(lambda: len(svc._instances[instance["id"]].connections) == 1, what="a freed connection slot")
        again = Raw(path)
        assert again.request("GET", b"role")[0] == "SUCCESS"
        for r in (again, held[1]):
            r.close()
    finally:
        svc.close()


def test_idle_connections_are_closed(state_dir: Path, agent_client: ApiClient, instance: dict[str, Any]) -> None:
    """Issue 15, case 9: a connection that sends nothing for the idle time is closed; one in use is not."""
    svc = MdataService(state_dir, agent_client, idle_timeout=1.0, check_interval=CHECK)
    try:
        svc.update(agent_client.desired_state())
        path = str(svc.socket_path(instance["id"]))
        idle, busy = Raw(path), Raw(path)
        started = time.monotonic()
        idle.sock.settimeout(0.1)
        while True:  # until the idle one is closed, the busy one asks every 0.1 s (and is answered)
            assert busy.request("GET", b"role")[0] == "SUCCESS"
            with contextlib.suppress(TimeoutError):
                if idle.sock.recv(1) == b"":
                    break
            assert time.monotonic() - started < 10, "the idle connection was never closed"
        assert time.monotonic() - started >= 0.9  # not before its idle time (counted from its connect, just before)
        assert busy.request("GET", b"role")[0] == "SUCCESS"
        for r in (idle, busy):
            r.close()
    finally:
        svc.close()


def test_a_slow_over_long_line_is_dropped_and_the_connection_goes_on(
    state_dir: Path, agent_client: ApiClient, instance: dict[str, Any]
) -> None:
    """Issue 15, case 9: a line longer than the limit, sent in small pieces, is skipped as it arrives (nothing
    buffered past the limit); the request after it is answered."""
    svc = MdataService(state_dir, agent_client, max_line=4096, check_interval=CHECK)
    try:
        svc.update(agent_client.desired_state())
        raw = Raw(str(svc.socket_path(instance["id"])))
        for _ in range(256):  # 256 KiB in 1 KiB pieces, no newline
            raw.send(b"x" * 1024)
        conn = next(iter(svc._instances[instance["id"]].connections))
        wait_for(lambda: conn.lines.pending == 0 and conn.lines._skipping,
                 what="the over-long line being skipped")  # fmt: skip
        raw.send(b"\n")
        assert raw.request("GET", b"role")[0] == "SUCCESS"
        raw.close()
    finally:
        svc.close()


# -- the socket's life ---------------------------------------------------------------------------


def test_socket_survives_a_service_restart(
    cloudinit: None, start: Callable[[], MdataService], instance: dict[str, Any]
) -> None:
    first = start()
    path = first.socket_path(instance["id"])
    assert run_cloudinit(str(path), 'print(json.dumps(c.get("sdc:uuid")))') == instance["id"]
    inode = path.lstat().st_ino
    first.close()
    assert path.exists() and not connectable(path)  # the file stays for the next agent; nobody listens
    # No agent: the client retries (the agent may be restarting), then gives up; it never hangs.
    r = mdata(str(path), "get", "sdc:uuid", timeout=0.5)
    assert r.returncode == 2 and "no answer" in r.stderr
    second = start()
    assert second.socket_path(instance["id"]) == path
    assert path.lstat().st_ino != inode
    assert run_cloudinit(str(path), 'print(json.dumps(c.get("sdc:uuid")))') == instance["id"]
    assert mdata(str(path), "put", "after-restart", "yes").returncode == 0


def test_a_new_service_takes_over_from_a_running_one(
    start: Callable[[], MdataService], instance: dict[str, Any]
) -> None:
    old = start()
    path = old.socket_path(instance["id"])
    new = start()  # e.g. the agent restarted before the old process finished
    inode = path.lstat().st_ino
    old.check()  # the old one sees a live socket it did not make: it leaves it alone
    new.check()
    assert path.lstat().st_ino == inode
    assert Raw(str(path)).request("GET", b"sdc:uuid")[1] == instance["id"].encode()
    old.close()
    new.check()
    assert path.lstat().st_ino == inode and connectable(path)


def test_deleted_or_stale_socket_is_recreated(service: MdataService, instance: dict[str, Any]) -> None:
    path = service.socket_path(instance["id"])
    path.unlink()
    wait_for(lambda: connectable(path), what="the periodic check to recreate the socket")
    assert Raw(str(path)).request("GET", b"sdc:uuid")[1] == instance["id"].encode()

    # A stale socket file: a socket nobody listens on (e.g. restored from a snapshot) replaces ours.
    stale = path.with_name("stale.sock")
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(stale))
    dead.close()
    os.replace(stale, path)
    assert not connectable(path)
    wait_for(lambda: connectable(path), what="the stale socket to be replaced")

    # The whole directory gone: recreated on the next update too.
    path.unlink()
    path.parent.rmdir()
    service.update(service.client.desired_state())
    assert connectable(path)
    assert oct(path.parent.stat().st_mode & 0o777) == "0o755"


def test_instance_view_through_a_read_only_bind_mount(
    cloudinit: None, service: MdataService, instance: dict[str, Any]
) -> None:
    """What a runtime does: bind-mount the directory read-only into the instance (at /.zonecontrol). The
    instance connects through the mount, cannot write into it, and keeps reaching the socket after the agent
    recreated the file under the same mount; a restarted instance (a new mount) reaches it too."""
    directory = service.directory(instance["id"])
    with tempfile.TemporaryDirectory(prefix="zc-", dir="/tmp") as target:
        guest = (
            "set -e\n"
            f"mount --bind {directory} {target}\n"
            f"mount -o remount,bind,ro,nodev,nosuid,noexec {target}\n"
            f"if touch {target}/planted 2>/dev/null; then echo writable; exit 1; fi\n"
            f'{DEBIAN_PYTHON} -c "$CLIENT"\n'
            "read line\n"
            f'{DEBIAN_PYTHON} -c "$CLIENT"\n'
        )
        client = (
            "import json\n"
            "from cloudinit.sources.DataSourceSmartOS import JoyentMetadataSocketClient as C\n"
            f"c = C('{target}/metadata.sock'); c.open_transport()\n"
            "print(json.dumps([c.get('sdc:uuid'), c.put('seen-by', 'guest')]), flush=True)\n"
        )
        proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", guest],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "CLIENT": client})  # fmt: skip
        assert proc.stdin is not None and proc.stdout is not None
        try:
            assert json.loads(proc.stdout.readline()) == [instance["id"], "OK"]
            service.socket_path(instance["id"]).unlink()  # the file vanishes while the instance runs
            service.check()
            proc.stdin.write("\n")
            proc.stdin.flush()
            assert json.loads(proc.stdout.readline()) == [instance["id"], "OK"]
            assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert os.listdir(target) == []  # the mount went with the namespace
    # The instance restarts: a new namespace, a new mount of the same directory.
    again = run_cloudinit(
        "/mnt-zc/metadata.sock",
        'print(json.dumps(c.get("seen-by")))',
        prefix=["unshare", "--mount", "--propagation", "private", "sh", "-c",
                f'mkdir -p /mnt-zc && mount --bind -o ro {directory} /mnt-zc && exec "$@"', "guest"],
    )  # fmt: skip
    assert again == "guest"


def test_sockets_of_gone_instances_are_removed(
    start: Callable[[], MdataService], instance: dict[str, Any], api: httpx.Client, state_dir: Path, host: str
) -> None:
    svc = start()
    deleted_with_its_instance(svc, api, instance["id"], svc.socket_path(instance["id"]))
    # Left behind while no service ran (the instance went meanwhile): swept by the next service.
    svc.close()
    leftover = state_dir / "zonecontrol" / str(uuid.uuid4())
    stale_socket(leftover / "metadata.sock")
    start()
    assert not leftover.exists()
