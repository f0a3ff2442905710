"""SmartOS metadata over a VM's serial port (issue 28; RFD 69's KVM case): a live API, VM instances on a
registered host, an MdataService with a real ApiClient, and what a VMM connects to the agent's socket.

- cloud-init's own `JoyentMetadataSerialClient` (Debian's python3 with pyserial) on a pty whose master is carried
  to the socket as QEMU carries a guest's UART (tests/support/serial_line.py): flush, negotiation, reads, a write.
- Real QEMU (`-S`: a paused VM, whose chardev still connects) with `serial_qemu_args`: it connects, and again
  after the agent service restarts and after the VMM restarts.
- What a tty and a hostile guest do to the stream, byte by byte on a connection made as QEMU makes it.

- The tiny guest (tests/support/guests.py) booted with those arguments: its shell talks to /dev/ttyS1 as a Linux
  guest does (a tty put in raw mode, lines written and read back), with frames made on this side.

The instances are made with `"kind": "vm"`; one test marks a container instance a VM in the desired state the
service follows, to see the channel follow the kind.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import tempfile
import time
import tty
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudnet.agent.client import ApiClient
from cloudnet.agent.metadata.mdata_serial import blocked_at
from cloudnet.agent.metadata.mdata_service import MdataService
from cloudnet.wire.mdata_paths import serial_socket, zone_socket
from cloudnet.wire.mdata_protocol import new_reqid, parse_v2_response, put_payload, v2_request
from cloudnet.wire.mdata_serial import serial_qemu_args
from tests.support.guest_init import SHELL_MARKER
from tests.support.installed import DEBIAN_PYTHON, python_module, require, require_cloud_init, require_commands
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
from tests.support.serial_line import SerialPort
from tests.support.vm_fixtures import StartVM

CHECK = 0.1  # seconds between the service's own socket checks
VM_GROUP = 65534  # nogroup: a group the test process is not in


@pytest.fixture(scope="module")
def serial_client() -> None:
    require_cloud_init()
    require(python_module("serial"), "pyserial for Debian's python3", "python3-serial")


@pytest.fixture
def state_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="vms-", dir="/tmp"))  # short: sun_path holds 107 bytes
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def host(api: httpx.Client) -> str:
    name = f"vms-{uuid.uuid4().hex[:6]}"
    assert api.put(f"/hosts/{name}", json={"host": {"agent_version": "test"}}).status_code == 200
    return name


def make_instance(
    api: httpx.Client, host: str, name: str, metadata: dict[str, str], kind: str = "vm"
) -> dict[str, Any]:
    body = {"name": name, "hostname": f"{name}.example.com", "host": host, "metadata": metadata, "kind": kind}
    r = api.post("/instances", json={"instance": body})
    assert r.status_code == 201, r.text
    return dict(r.json()["instance"])


@pytest.fixture
def vm(api: httpx.Client, host: str) -> dict[str, Any]:
    return make_instance(api, host, "vm-1", {"role": "web", "hostname": "vm-1"})


@pytest.fixture
def agent_client(server: Any, host: str) -> Iterator[ApiClient]:
    client = ApiClient(server.url, host, "admin")
    yield client
    client.close()


class Vms:
    """The host's desired state with these instances marked as VMs (see the module docstring)."""

    def __init__(self, client: ApiClient, *ids: str) -> None:
        self.client, self.ids = client, set(ids)

    def state(self) -> dict[str, Any]:
        state = self.client.desired_state()
        for inst in state["instances"]:
            if inst["id"] in self.ids:
                inst["kind"], inst["netns"] = "vm", None
        return state


@pytest.fixture
def marked(agent_client: ApiClient, vm: dict[str, Any]) -> Vms:
    return Vms(agent_client, vm["id"])


@pytest.fixture
def start(state_dir: Path, agent_client: ApiClient, marked: Vms) -> Iterator[Callable[..., MdataService]]:
    with mdata_services(state_dir, agent_client, marked.state, datacenter_name="dc-test", check_interval=CHECK,
                        vm_group=VM_GROUP) as start:  # fmt: skip
        yield start


@pytest.fixture
def service(start: Callable[..., MdataService]) -> MdataService:
    return start()


@pytest.fixture
def port(service: MdataService, vm: dict[str, Any]) -> Iterator[SerialPort]:
    p = SerialPort(service.serial_path(vm["id"]))
    p.wait_connected()
    yield p
    p.close()


def serial_cloudinit(device: str, script: str) -> Any:
    """`script` with `c`, cloud-init's serial client on `device`, opened as its datasource opens /dev/ttyS1."""
    code = (
        "import json\n"
        "from cloudinit.sources.DataSourceSmartOS import JoyentMetadataSerialClient\n"
        f"c = JoyentMetadataSerialClient({device!r}, timeout=10)\n"
        "c.open_transport()\n" + script
    )
    r = subprocess.run([DEBIAN_PYTHON, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def connections(service: MdataService, instance_id: str) -> int:
    return len(service._instances[instance_id].connections)


class Guest:
    """A guest process on its /dev/ttyS1 (the pty's slave), byte by byte, in whatever mode the tty is in."""

    def __init__(self, port: SerialPort) -> None:
        self.fd = os.open(port.device, os.O_RDWR | os.O_NOCTTY)
        self.buf = b""

    def raw(self) -> None:
        tty.setraw(self.fd)

    def send(self, data: bytes) -> None:
        os.write(self.fd, data)

    def line(self, timeout: float = 5.0) -> bytes | None:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return None
            self.buf += os.read(self.fd, 65536)
        line, self.buf = self.buf.split(b"\n", 1)
        return line.rstrip(b"\r")

    def request(self, op: str, arg: bytes | None = None) -> tuple[str, bytes | None]:
        rid = new_reqid()
        self.send(v2_request(rid, op, arg))
        answer = parse_v2_response(self.line() or b"", rid)
        assert answer is not None
        return answer.code, answer.value

    def close(self) -> None:
        os.close(self.fd)


# -- the channel ---------------------------------------------------------------------------------


def test_a_vm_gets_a_serial_socket_and_no_zone_socket(
    api: httpx.Client, host: str, agent_client: ApiClient, vm: dict[str, Any], state_dir: Path
) -> None:
    container = make_instance(api, host, "ct-1", {"role": "db"}, kind="container")
    svc = MdataService(state_dir, agent_client, check_interval=CHECK, vm_group=VM_GROUP)
    try:
        svc.update(Vms(agent_client, vm["id"]).state())
        path = svc.serial_path(vm["id"])
        assert path == serial_socket(state_dir, vm["id"]) == state_dir / "vmserial" / vm["id"] / "ttyb"
        for p, mode in ((path, 0o660), (path.parent, 0o710), (path.parent.parent, 0o710)):
            st = p.lstat()
            assert (oct(st.st_mode & 0o777), st.st_uid, st.st_gid) == (oct(mode), 0, VM_GROUP), p
        assert os.listdir(path.parent) == ["ttyb"]
        assert not svc.directory(vm["id"]).exists()  # a VM has nothing to mount a zone socket into
        assert connectable(zone_socket(state_dir, container["id"]))
        assert not (state_dir / "vmserial" / container["id"]).exists()
        assert blocked_at(path.parent, VM_GROUP) is None  # (the agent would warn of a state dir it cannot search)
        # The VMM's group connects; a process outside it does not.
        probe = f"import socket; socket.socket(socket.AF_UNIX).connect({str(path)!r})"
        as_vmm = ["setpriv", "--reuid", "65534", "--regid", str(VM_GROUP), "--clear-groups"]
        assert subprocess.run([*as_vmm, DEBIAN_PYTHON, "-c", probe], capture_output=True).returncode == 0
        other = ["setpriv", "--reuid", "65534", "--regid", "65533", "--clear-groups"]
        r = subprocess.run([*other, DEBIAN_PYTHON, "-c", probe], capture_output=True, text=True)
        assert r.returncode != 0 and "PermissionError" in r.stderr
    finally:
        svc.close()


def test_cloudinit_serial_client(
    serial_client: None, service: MdataService, port: SerialPort, vm: dict[str, Any], api: httpx.Client
) -> None:
    """cloud-init's SmartOS datasource client on the guest's tty: its flush (bare LF until `invalid command`),
    NEGOTIATE V2, reads, a put/get round trip, KEYS; the write reaches the API."""
    got = serial_cloudinit(port.device, """
out = {k: c.get(k) for k in ["sdc:uuid", "hostname", "role", "sdc:hostname", "sdc:datacenter_name", "nope"]}
out["put"] = c.put("app:color", "blue")
out["get"] = c.get("app:color")
out["sdc_put"] = c.put("sdc:uuid", "evil")
out["keys"] = c.list()
print(json.dumps(out))
""")  # fmt: skip
    assert got["sdc:uuid"] == vm["id"]
    assert got["hostname"] == "vm-1" and got["role"] == "web"
    assert got["sdc:hostname"] == "vm-1.example.com" and got["sdc:datacenter_name"] == "dc-test"
    assert got["nope"] is None
    assert got["put"] == "OK" and got["get"] == "blue"
    assert got["sdc_put"] is None  # FAILURE: the same refusals as on the zone sockets
    assert sorted(got["keys"]) == ["app:color", "hostname", "role"]
    assert stored(api, vm["id"])["metadata"]["app:color"] == "blue"
    # A second run on the same stream (the first left it raw and quiet): the flush finds it as it should.
    assert serial_cloudinit(port.device, 'print(json.dumps(c.get("app:color")))') == "blue"
    assert port.connects == 1


def test_the_vmm_reconnects(serial_client: None, service: MdataService, port: SerialPort, vm: dict[str, Any]) -> None:
    port.drop()  # the VMM restarted
    port.wait_connected(2)
    wait_for(lambda: connections(service, vm["id"]) == 1, what="the old stream to be gone")
    assert serial_cloudinit(port.device, 'print(json.dumps(c.get("sdc:uuid")))') == vm["id"]


def test_the_stream_survives_an_agent_restart(
    serial_client: None, start: Callable[..., MdataService], vm: dict[str, Any]
) -> None:
    first = start()
    port = SerialPort(first.serial_path(vm["id"]))
    try:
        port.wait_connected()
        inode = first.serial_path(vm["id"]).lstat().st_ino
        first.close()  # its streams close; the socket file stays for the next agent
        second = start()
        assert second.serial_path(vm["id"]).lstat().st_ino != inode
        port.wait_connected(2)
        assert serial_cloudinit(port.device, 'print(json.dumps([c.get("sdc:uuid"), c.put("k", "v")]))') == [
            vm["id"], "OK"
        ]  # fmt: skip
    finally:
        port.close()


def peers(service: MdataService, instance_id: str) -> set[int]:
    """The pids of the processes connected to an instance's serial port."""
    return {conn.peer[0] for conn in service._instances[instance_id].connections if conn.peer}  # type: ignore[attr-defined]


def test_real_qemu_connects_and_reconnects(
    start: Callable[..., MdataService], vm: dict[str, Any], state_dir: Path
) -> None:
    """QEMU with `serial_qemu_args`, paused (-S: no guest runs, but its chardev connects): a VM started before
    its socket exists connects once it does, and again after the agent service and after QEMU restarted."""
    require_commands("qemu-system-x86", "qemu-system-x86_64")
    version = subprocess.run(["qemu-system-x86_64", "--version"], capture_output=True, text=True).stdout
    args = ["qemu-system-x86_64", "-nodefaults", "-accel", "tcg", "-display", "none", "-monitor", "none", "-S",
            *serial_qemu_args(serial_socket(state_dir, vm["id"]), version)]  # fmt: skip
    running: list[subprocess.Popen[bytes]] = []

    def qemu() -> int:
        running.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        return running[-1].pid

    try:
        first = qemu()  # before the agent made its socket
        svc = start()
        wait_for(lambda: peers(svc, vm["id"]) == {first}, what="QEMU to connect")
        svc.close()
        svc = start()
        wait_for(lambda: peers(svc, vm["id"]) == {first}, what="QEMU to reconnect to the restarted agent")
        running[0].kill()
        running[0].wait()
        wait_for(lambda: not peers(svc, vm["id"]), what="the dead VMM's stream to close")
        second = qemu()
        wait_for(lambda: peers(svc, vm["id"]) == {second}, what="the restarted VMM to connect")
    finally:
        for proc in running:
            proc.kill()
            proc.wait()


# -- what a tty does to bytes --------------------------------------------------------------------


def test_cooked_guest_tty(service: MdataService, port: SerialPort, vm: dict[str, Any]) -> None:
    """A guest that never set raw mode: its tty turns LF into CR LF (ONLCR) and echoes what the host sends.
    Every request is answered once, and the echoes of the answers are dropped, not answered (which would
    ping-pong FAILUREs forever)."""
    guest = Guest(port)
    try:
        before = service.dropped(vm["id"])
        guest.send(b"\n")
        assert guest.line() == b"invalid command"
        guest.send(b"NEGOTIATE V2\n")
        assert guest.line() == b"V2_OK"
        for _ in range(3):
            assert guest.request("GET", b"sdc:uuid") == ("SUCCESS", vm["id"].encode())
        assert guest.request("GET", b"nope") == ("NOTFOUND", None)
        # The answers' echoes came back to the host and were dropped: nothing else reached the guest.
        wait_for(lambda: service.dropped(vm["id"]) >= before + 6, what="the echoes")
        code, names = guest.request("KEYS")  # the next line is its answer
        assert code == "SUCCESS" and sorted((names or b"").split(b"\n")) == [b"hostname", b"role"]
    finally:
        guest.close()


def test_line_ends_and_half_lines(service: MdataService, port: SerialPort, vm: dict[str, Any]) -> None:
    """CR LF, a lone CR, a CR LF split between two reads; a half line a guest abandoned ("closed": on a serial
    port the host sees no close) is glued to the next request, answered as garbage is, and the next line works."""
    guest = Guest(port)
    guest.raw()
    try:
        guest.send(b"NEGOTIATE V2\r\n")
        assert guest.line() == b"V2_OK"
        guest.send(b"GET role\r")
        assert [guest.line() for _ in range(3)] == [b"SUCCESS", b"web", b"."]
        rid = new_reqid()
        frame = v2_request(rid, "GET", b"sdc:uuid")
        guest.send(frame[:-1] + b"\r")  # the CR ends the line: answered before its LF is sent
        assert parse_v2_response(guest.line() or b"", rid) is not None
        guest.send(b"\n")  # the LF of that CR LF, in a read of its own: not a line of its own
        assert guest.request("GET", b"role") == ("SUCCESS", b"web")  # ("invalid command" would come first)

        guest.send(b"GET sdc:uu")  # half a v1 line, then the process exits
        guest.send(b"GET sdc:uuid\n")
        assert guest.line() == b"NOTFOUND"  # "GET sdc:uuGET sdc:uuid": a key nobody has
        assert guest.request("GET", b"sdc:uuid") == ("SUCCESS", vm["id"].encode())
        dropped = service.dropped(vm["id"])
        guest.send(v2_request(new_reqid(), "GET", b"role")[:20])  # half a frame
        guest.send(frame)
        # The glued frame fails its length check: dropped, as in SmartOS (the client times out and resets).
        wait_for(lambda: service.dropped(vm["id"]) == dropped + 1, what="the glued frame to be dropped")
        guest.send(b"\n")  # what clients send to reset
        assert guest.line() == b"invalid command"  # the first answer since: the glued frame had none
        assert guest.request("GET", b"role") == ("SUCCESS", b"web")
    finally:
        guest.close()


def test_cloudinit_after_an_abandoned_half_line(
    serial_client: None, service: MdataService, port: SerialPort, vm: dict[str, Any]
) -> None:
    """A previous user of /dev/ttyS1 wrote half a request and exited; cloud-init's flush gets past it."""
    guest = Guest(port)
    guest.raw()
    guest.send(b"GET sdc:uu")
    guest.close()
    assert serial_cloudinit(port.device, 'print(json.dumps(c.get("sdc:uuid")))') == vm["id"]


# -- a hostile guest or host process -------------------------------------------------------------


def test_over_long_lines_are_skipped(start: Callable[..., MdataService], vm: dict[str, Any]) -> None:
    svc = start(max_line=4096)
    raw = Raw(str(svc.serial_path(vm["id"])))
    try:
        raw.send(b"x" * 100_000 + b"\r\n")  # and ended as a tty would end it
        raw.send(b"y" * 5000 + b"\rGET role\r\n")
        assert [raw.line() for _ in range(3)] == [b"SUCCESS", b"web", b"."]
        assert raw.request("GET", b"sdc:uuid") == ("SUCCESS", vm["id"].encode())
        assert svc.dropped(vm["id"]) == 2
    finally:
        raw.close()


def test_a_flooding_guest(
    start: Callable[..., MdataService], api: httpx.Client, host: str, marked: Vms, vm: dict[str, Any]
) -> None:
    """A guest that floods its line and never reads: the agent stops reading it (nothing queues without
    bound) and answers its neighbour; its writes are rate-limited as on the zone sockets."""
    other = make_instance(api, host, "vm-2", {"role": "db"})
    marked.ids.add(other["id"])
    svc = start(write_rate=0.001, write_burst=2)
    flood = Raw(str(svc.serial_path(vm["id"])))
    neighbour = Raw(str(svc.serial_path(other["id"])))
    try:
        assert flood.request("GET", b"role") == ("SUCCESS", b"web")  # connected, and accepted
        conn = next(iter(svc._instances[vm["id"]].connections))
        frame = v2_request(new_reqid(), "GET", b"role")
        sent = 0
        while sent < 64 << 20 and select.select([], [flood.sock], [], 2)[1]:  # until the agent stops reading
            sent += flood.sock.send(frame * 1000)
        assert sent < 64 << 20, "the agent kept reading a guest that does not read its answers"
        wait_for(lambda: conn.paused, what="the flood's stream to be paused")
        assert neighbour.request("GET", b"role") == ("SUCCESS", b"db")
        flood.close()
        writer = Raw(str(svc.serial_path(vm["id"])))
        assert writer.request("PUT", put_payload("a", b"1")) == ("SUCCESS", b"OK")
        assert writer.request("PUT", put_payload("b", b"2")) == ("SUCCESS", b"OK")
        assert writer.request("PUT", put_payload("c", b"3"))[0] == "FAILURE"
        assert writer.request("GET", b"a") == ("SUCCESS", b"1")  # reads are not limited
        writer.close()
    finally:
        neighbour.close()


def test_one_stream_per_vm(service: MdataService, vm: dict[str, Any]) -> None:
    """A newer connection replaces the stream once it speaks (a restarted VMM whose old stream never closed);
    one that connects and closes (a probe) or stays silent leaves it alone, and waits beside it alone."""
    path = str(service.serial_path(vm["id"]))
    first = Raw(path)
    assert first.request("GET", b"role") == ("SUCCESS", b"web")
    Raw(path).close()
    silent = [Raw(path) for _ in range(3)]
    try:
        assert closed_by_peer(silent[0]) and closed_by_peer(silent[1])  # each replaced by the next
        assert first.request("GET", b"role") == ("SUCCESS", b"web")
        assert connections(service, vm["id"]) == 2
        assert silent[2].request("GET", b"sdc:uuid") == ("SUCCESS", vm["id"].encode())
        assert closed_by_peer(first)
        assert connections(service, vm["id"]) == 1
    finally:
        for raw in (first, *silent):
            raw.close()


def test_a_newer_agent_takes_over_without_breaking_the_stream(
    serial_client: None, start: Callable[..., MdataService], vm: dict[str, Any]
) -> None:
    """While an old agent still runs beside a new one, each of its checks probes the path (connects and closes):
    the VMM's stream on the new agent's socket stays up."""
    old = start()
    new = start()  # renames its socket over the old one's
    port = SerialPort(new.serial_path(vm["id"]))
    try:
        port.wait_connected()
        for _ in range(3):
            old.check()
        assert serial_cloudinit(port.device, 'print(json.dumps(c.get("sdc:uuid")))') == vm["id"]
        assert port.connects == 1
        assert peers(new, vm["id"]) and not peers(old, vm["id"])
    finally:
        port.close()


def test_the_stream_is_not_closed_for_idleness(
    start: Callable[..., MdataService], api: httpx.Client, host: str, vm: dict[str, Any]
) -> None:
    container = make_instance(api, host, "ct-idle", {"role": "db"}, kind="container")
    svc = start(idle_timeout=1.0)
    serial = Raw(str(svc.serial_path(vm["id"])))
    zone = Raw(str(svc.socket_path(container["id"])))
    try:
        assert closed_by_peer(zone, timeout=10)  # the idle time passed (a zone socket's connection closed)
        assert serial.request("GET", b"role") == ("SUCCESS", b"web")
    finally:
        serial.close()
        zone.close()


def test_another_instances_keys_are_unreachable(
    start: Callable[..., MdataService], api: httpx.Client, host: str, marked: Vms, vm: dict[str, Any]
) -> None:
    other = make_instance(api, host, "vm-3", {"secret": "theirs"})
    marked.ids.add(other["id"])
    svc = start()
    raw = Raw(str(svc.serial_path(vm["id"])))
    try:
        assert raw.request("GET", b"secret") == ("NOTFOUND", None)
        assert raw.request("GET", b"sdc:uuid") == ("SUCCESS", vm["id"].encode())
        code, names = raw.request("KEYS")
        assert code == "SUCCESS" and sorted((names or b"").split(b"\n")) == [b"hostname", b"role"]
        assert raw.request("GET", f"../{other['id']}/secret".encode()) == ("NOTFOUND", None)
    finally:
        raw.close()


def test_symlinks_planted_on_the_path_are_not_followed(
    start: Callable[..., MdataService], vm: dict[str, Any], state_dir: Path
) -> None:
    with tempfile.TemporaryDirectory(prefix="vms-elsewhere-", dir="/tmp") as elsewhere:
        target = Path(elsewhere)
        (state_dir / "vmserial").mkdir(mode=0o755)
        (state_dir / "vmserial" / vm["id"]).symlink_to(target)
        svc = start()
        directory = svc.serial_path(vm["id"]).parent
        assert not directory.is_symlink() and directory.is_dir()
        assert os.listdir(target) == []
        assert oct(target.stat().st_mode & 0o777) == "0o700"  # not chmod-ed through the link either
        # Planted again while the agent runs (the directory removed first), and at the root.
        shutil.rmtree(directory)
        directory.symlink_to(target)
        svc.check()
        assert not directory.is_symlink() and connectable(svc.serial_path(vm["id"]))
        svc.close()
        shutil.rmtree(state_dir / "vmserial")
        (state_dir / "vmserial").symlink_to(target)
        svc = start()
        assert not (state_dir / "vmserial").is_symlink() and connectable(svc.serial_path(vm["id"]))
        assert os.listdir(target) == []


def test_the_socket_goes_with_its_instance(
    start: Callable[..., MdataService], api: httpx.Client, vm: dict[str, Any], state_dir: Path
) -> None:
    svc = start()
    deleted_with_its_instance(svc, api, vm["id"], svc.serial_path(vm["id"]))  # and the VMM's stream closed
    # Left behind while no agent ran: swept by the next one.
    svc.close()
    leftover = state_dir / "vmserial" / str(uuid.uuid4())
    stale_socket(leftover / "ttyb")
    start()
    assert not leftover.exists()


def test_the_channel_follows_the_instance_kind(
    state_dir: Path, agent_client: ApiClient, api: httpx.Client, host: str
) -> None:
    """A desired state that says otherwise of an instance moves it to the other channel; what the other
    kind's root holds of it, left while no agent ran, is swept."""
    vm = make_instance(api, host, "c-1", {}, kind="container")
    svc = MdataService(state_dir, agent_client, check_interval=CHECK)
    try:
        svc.update(agent_client.desired_state())  # not (yet) a VM: a zone socket
        assert connectable(svc.socket_path(vm["id"])) and not svc.serial_path(vm["id"]).exists()
        svc.update(Vms(agent_client, vm["id"]).state())
        assert connectable(svc.serial_path(vm["id"])) and not svc.directory(vm["id"]).exists()
    finally:
        svc.close()
    leftover = svc.directory(vm["id"])
    stale_socket(leftover / "metadata.sock")
    with mdata_services(state_dir, agent_client, Vms(agent_client, vm["id"]).state, check_interval=CHECK) as start:
        again = start()
        assert not leftover.exists() and connectable(again.serial_path(vm["id"]))


def test_a_real_guest_on_its_second_serial_port(
    service: MdataService, vm: dict[str, Any], api: httpx.Client, vms: StartVM
) -> None:
    """The tiny guest booted with `serial_qemu_args`: from its shell, /dev/ttyS1 in raw mode, cloud-init's flush
    (a bare line: `invalid command`), NEGOTIATE V2, a GET of sdc:uuid and of a customer key, a PUT then a GET of
    it (frames made here, written and read by the guest's own tty), and the write reaches the API."""
    version = subprocess.run(["qemu-system-x86_64", "--version"], capture_output=True, text=True).stdout
    guest = vms("mdserial", serial_qemu_args(service.serial_path(vm["id"]), version))
    guest.expect(SHELL_MARKER, 120)
    guest.run("stty -F /dev/ttyS1 raw -echo")

    def ask(line: bytes) -> bytes:
        script = f"exec 3<>/dev/ttyS1; printf '%s\\n' '{line.decode().strip()}' >&3; read -t 20 r <&3; echo \"R:$r\""
        (answer,) = [a for a in guest.run(script, timeout=60).splitlines() if a.startswith("R:")]
        return answer[2:].strip().encode()

    def v2(op: str, payload: bytes | None = None) -> Any:
        reqid = new_reqid()
        return parse_v2_response(ask(v2_request(reqid, op, payload)), reqid)

    assert ask(b"") == b"invalid command"
    assert ask(b"NEGOTIATE V2") == b"V2_OK"
    uuid_answer, role = v2("GET", b"sdc:uuid"), v2("GET", b"role")
    assert (uuid_answer.code, uuid_answer.value) == ("SUCCESS", vm["id"].encode())
    assert (role.code, role.value) == ("SUCCESS", b"web")
    assert v2("PUT", put_payload("app:color", b"green")).code == "SUCCESS"
    color = v2("GET", b"app:color")
    assert (color.code, color.value) == ("SUCCESS", b"green")
    assert stored(api, vm["id"])["metadata"]["app:color"] == "green"
