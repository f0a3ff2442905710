"""`cloudnet monitor` outlives its server: killed and started again on the same address under a running monitor,
the stream resumes after the last event shown (none lost, none twice); a server that now refuses the monitor's token
ends it. Real processes: `cloudnet serve` (killed -9) and `cloudnet monitor`."""

from __future__ import annotations

import json
import random
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.process import CLOUDNET, free_port, stop

TOKENS = {"admin": {"project_id": "ops", "role": "admin"}, "watcher": {"project_id": "ops", "role": "admin"}}


@contextmanager
def server(state: Path, address: str, port: int, log: Path) -> Iterator[subprocess.Popen[str]]:
    """`cloudnet serve` on address:port (the monitor's URL stays the same across restarts), once it answers."""
    with log.open("a") as out:
        command = [CLOUDNET, "serve", "--state-dir", str(state), "--host", address, "--port", str(port),
                   "--metadata-listen", "off"]  # fmt: skip
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120  # (start-up takes seconds, a minute on a loaded machine)
        while True:
            try:
                httpx.get(f"http://{address}:{port}/", timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "the server did not answer within 120 s"
                time.sleep(0.05)
        yield proc
    finally:
        proc.kill()
        proc.wait()


def place() -> tuple[str, int]:
    """A loopback address of this test's own (127.0.0.0/8 is all loopback) and a port: nothing else binds it
    while the server is down between its two lives."""
    return f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}", free_port()


def create_network(url: str, name: str) -> str:
    r = httpx.post(f"{url}/v2.0/networks", headers={"X-Auth-Token": "admin"}, json={"network": {"name": name}})
    assert r.status_code == 201, r.text
    return str(r.json()["network"]["id"])


def revision(url: str) -> int:
    r = httpx.get(f"{url}/v2.0/events", headers={"X-Auth-Token": "admin"}, params={"since": 0, "limit": 1})
    return int(r.json()["revision"])


def shown_line(monitor: subprocess.Popen[str]) -> dict[str, object]:
    assert monitor.stdout is not None
    line = monitor.stdout.readline()  # (the monitor prints as events happen: the test's read is its wait)
    assert line, f"the monitor ended: {monitor.wait()} {monitor.stderr.read() if monitor.stderr else ''}"
    return dict(json.loads(line))


def site(tmp_path: Path) -> tuple[Path, Path, str, int, str]:
    """A server's state directory (tokens: an admin and the monitor's), its log, its address, port and URL."""
    state, log = tmp_path / "state", tmp_path / "server.log"
    state.mkdir()
    (state / "tokens.json").write_text(json.dumps({"tokens": TOKENS}))
    address, port = place()
    return state, log, address, port, f"http://{address}:{port}"


def test_a_restarted_server_under_a_running_monitor_loses_and_repeats_nothing(tmp_path: Path) -> None:
    state, log, address, port, url = site(tmp_path)
    tag = uuid.uuid4().hex[:6]
    with server(state, address, port, log) as first:
        since = revision(url)
        monitor = subprocess.Popen([CLOUDNET, "--url", url, "--token", "watcher", "monitor", "--since", str(since),
                                    "--type", "network.created", "--count", "4", "-f", "json"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            ids = [create_network(url, f"before-{tag}")]
            assert shown_line(monitor)["resource_id"] == ids[0]
            first.kill()  # the monitor's long poll is cut under it
            first.wait()
            with server(state, address, port, log):
                # Made as soon as the server is back, while the monitor may still be in its backoff: it must
                # resume from the last event it showed, and find them.
                ids += [create_network(url, f"after-{tag}-{i}") for i in range(3)]
                rest = [shown_line(monitor) for _ in range(3)]
                assert monitor.wait(timeout=30) == 0  # --count 4: all four shown, and nothing more
        finally:
            stop(monitor)
    assert [e["resource_id"] for e in rest] == ids[1:]
    assert monitor.stdout is not None and monitor.stdout.read() == ""  # nothing twice
    errors = monitor.stderr.read() if monitor.stderr else ""
    assert "trying again in" in errors and "cloudnet monitor: reconnected" in errors, errors


def test_a_monitor_whose_token_is_refused_after_a_restart_gives_up(tmp_path: Path) -> None:
    state, log, address, port, url = site(tmp_path)
    with server(state, address, port, log) as first:
        monitor = subprocess.Popen([CLOUDNET, "--url", url, "--token", "watcher", "monitor", "--since",
                                    str(revision(url)), "--type", "network.created", "-f", "json"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            create_network(url, f"seen-{uuid.uuid4().hex[:6]}")
            shown_line(monitor)  # following
            first.kill()
            first.wait()
            (state / "tokens.json").write_text(json.dumps({"tokens": {"admin": TOKENS["admin"]}}))  # revoked
            with server(state, address, port, log):
                status = monitor.wait(timeout=60)  # it stops by itself: no retry of a refused token
        finally:
            stop(monitor)
    errors = monitor.stderr.read() if monitor.stderr else ""
    assert status == 1 and "(401" in errors.splitlines()[-1], errors
