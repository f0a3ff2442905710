"""`cloudnet serve` as a real child process, for tests of start-up, signals and what it listens on."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

CLOUDNET = str(Path(sys.executable).parent / "cloudnet")
# a `wrapper` for serve(): `cloudnet up` in a mount namespace of its own with a private /run/netns, so that its
# instances' namespaces go with it (and never clash with another run's); the command follows it
PRIVATE_NETNS = ("unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                 'mount -t tmpfs cloudnet-test /run/netns && exec "$@"', "sh")  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port that refuses connections while the block runs: bound, never listening (so no other run can
    take it meanwhile, as one could a port released at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


def stop(proc: subprocess.Popen[Any], timeout: float = 30) -> None:
    """SIGTERM, and SIGKILL if it has not exited within `timeout` seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def serve(state: Path, *extra: str, command: str = "serve", wrapper: tuple[str, ...] = (),
          log: Path | None = None) -> Iterator[tuple[subprocess.Popen[str], str]]:  # fmt: skip
    """Start `cloudnet serve` (or `up`) on a free loopback port; yields (process, base URL) once the API answers.
    `wrapper` runs it (e.g. in a mount namespace of its own, ending in `exec "$@"`); `log` takes its output (a
    long-running one must not fill an unread pipe), else it is read when it exits early."""
    port = free_port()
    out = subprocess.PIPE if log is None else log.open("w")
    proc = subprocess.Popen([*wrapper, CLOUDNET, command, "--state-dir", str(state), "--port", str(port), *extra],
                            stdout=out, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:  # readiness: the API answers
            try:
                httpx.get(url + "/", timeout=1)
                break
            except httpx.TransportError:
                if proc.poll() is not None:
                    pytest.fail(f"server exited early: {proc.communicate()[0] if log is None else log.read_text()}")
                if time.monotonic() > deadline:
                    pytest.fail("server did not start within 30 s")
                time.sleep(0.05)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if log is not None:
            out.close()  # type: ignore[union-attr]
