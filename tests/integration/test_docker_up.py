"""`cloudnet up --docker-driver`: the Docker driver beside the server and the agent, in the same process, on the
socket it is given, acting through the API with the internal `service` token the server made for it."""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudnet.dataplane.linux.driver import LinuxDataplane
from tests.support.process import serve
from tests.support.tls import tls_serve


def plugin_client(path: Path) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(path)), base_url="http://plugin", timeout=10)


def activated(client: httpx.Client) -> httpx.Response | None:
    try:
        return client.post("/Plugin.Activate")
    except httpx.TransportError:
        return None


def wait_activated(plugin: httpx.Client, proc: subprocess.Popen[Any], sock: Path) -> httpx.Response:
    deadline = time.monotonic() + 20
    while (answer := activated(plugin)) is None:  # readiness: the driver answers on its socket
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"no driver on {sock}: {proc.communicate()[0] if proc.poll() is not None else ''}")
        time.sleep(0.05)
    return answer


def test_up_serves_the_docker_driver(tmp_path: Path) -> None:
    host = f"h-{uuid.uuid4().hex[:6]}"
    sock = tmp_path / "run" / "cnup.sock"
    args = ("--agent-host", host, "--metadata-listen", "off", "--docker-driver", "--docker-socket", str(sock))
    try:
        with serve(tmp_path / "state", *args, command="up") as (proc, url), plugin_client(sock) as plugin:
            answer = wait_activated(plugin, proc, sock)
            assert answer.status_code == 200
            assert answer.json() == {"Implements": ["NetworkDriver", "IpamDriver"]}
            assert sock.stat().st_mode & 0o777 == 0o600  # root's only: whoever reaches it acts as the driver
            # The driver acts through the API with its own token: the service role of project `admin`.
            docker_id = uuid.uuid4().hex * 2
            made = plugin.post("/NetworkDriver.CreateNetwork", json={"NetworkID": docker_id, "Options": {}})
            assert made.status_code == 200 and made.json() == {}, made.text
            (network,) = httpx.get(url + "/v2.0/networks", params={"name": f"docker-{docker_id[:12]}"}).json()[
                "networks"
            ]
            assert network["project_id"] == "admin"
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=30)
            assert proc.returncode == 0, out
        assert not sock.exists()  # the socket goes with the driver
    finally:
        LinuxDataplane(host).teardown()


def test_up_with_tls_serves_the_docker_driver_over_tls(tmp_path: Path) -> None:
    """With --tls the API listens on HTTPS only: the driver reaches it there, verifying it against the cloud's CA."""
    host = f"h-{uuid.uuid4().hex[:6]}"
    sock = tmp_path / "run" / "cnupt.sock"
    args = ("--agent-host", host, "--docker-driver", "--docker-socket", str(sock))
    try:
        with tls_serve(tmp_path / "state", *args, command="up") as server, plugin_client(sock) as plugin:
            assert wait_activated(plugin, server.proc, sock).status_code == 200
            docker_id = uuid.uuid4().hex * 2
            made = plugin.post("/NetworkDriver.CreateNetwork", json={"NetworkID": docker_id, "Options": {}})
            assert made.status_code == 200 and made.json() == {}, made.text
            with server.client() as admin:
                found = admin.get("/networks", params={"name": f"docker-{docker_id[:12]}"}).json()["networks"]
            assert [n["project_id"] for n in found] == ["admin"]
    finally:
        LinuxDataplane(host).teardown()
