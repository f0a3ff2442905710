"""The README's walk-through, run as written: every `<!-- walkthrough -->` shell block of README.md, in order, in
one shell, against a fresh `cloudnet up` this test starts, so the README cannot drift from what cloudnet does.

What differs from a user's machine, and only that: the server's port and state dir (the README's
`127.0.0.1:9696` and `/var/lib/cloudnet` are replaced by this run's; CLOUDNET_URL and CLOUDNET_STATE_DIR name
them to the `cloudnet` commands), the agent's host name and uplink (unique
to this run), HOME (clouds.yaml goes into a temporary one), and the namespaces' directory: the server and the
walk-through share a private mount namespace with its own /run/netns, so the README's `vm1` and `vm2` never
meet another run's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.process import CLOUDNET, free_port

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- walkthrough -->"


def walkthrough(readme: str) -> list[str]:
    """The marked blocks' text, in order."""
    blocks = re.findall(r"^" + re.escape(MARK) + r"\n```sh\n(.*?)^```$", readme, flags=re.S | re.M)
    assert len(blocks) == readme.count(MARK), "every walkthrough mark must be followed by a ```sh block"
    return blocks


def test_the_walkthrough_is_found() -> None:
    blocks = walkthrough((ROOT / "README.md").read_text())
    assert len(blocks) >= 6
    script = "\n".join(blocks)
    for needle in ("cloudnet network create demo", "ping", "openstack quota show", "cloudnet-mdata"):
        assert needle in script


@pytest.fixture
def cloudnet_up(tmp_path: Path) -> Iterator[tuple[int, str, Path]]:
    """(pid, URL, state dir) of a `cloudnet up` in a private mount namespace with its own /run/netns."""
    tag = uuid.uuid4().hex[:8]
    # a short state dir: the SmartOS sockets under it must fit sun_path (108 bytes), which pytest's tmp_path may not
    uplink, state, port = f"cnrd{tag}", Path(tempfile.mkdtemp(prefix="cnrd", dir="/tmp")), free_port()
    subprocess.run(["ip", "link", "add", uplink, "type", "veth", "peer", "name", uplink + "p"], check=True)
    subprocess.run(["ip", "link", "set", uplink, "up"], check=True)
    log = (tmp_path / "up.log").open("w")
    command = [CLOUDNET, "up", "--state-dir", str(state), "--port", str(port), "--agent-host", f"readme-{tag}",
               "--metadata-listen", f"127.0.0.1:{free_port()}", "--uplink", f"physnet1:{uplink}"]  # fmt: skip
    proc = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
         'mount -t tmpfs cloudnet-readme /run/netns && exec "$@"', "sh", *command],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:  # ready: the agent of this host has registered
            assert proc.poll() is None, (tmp_path / "up.log").read_text()
            assert time.monotonic() < deadline, "cloudnet up did not register its host within 60 s"
            try:
                hosts = httpx.get(url + "/v2.0/hosts", headers={"X-Auth-Token": "admin"}, timeout=2).json()["hosts"]
                if hosts:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        yield proc.pid, url, state
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        subprocess.run(["ip", "link", "del", uplink], capture_output=True)  # (gone with its namespace, if moved)
        shutil.rmtree(state, ignore_errors=True)


def test_readme_walkthrough_runs_as_written(cloudnet_up: tuple[int, str, Path], tmp_path: Path) -> None:
    pid, url, state = cloudnet_up
    script = "\n".join(walkthrough((ROOT / "README.md").read_text()))
    assert "127.0.0.1:9696" in script and "/var/lib/cloudnet" in script  # (what is replaced is there to replace)
    script = script.replace("127.0.0.1:9696", url.removeprefix("http://")).replace("/var/lib/cloudnet", str(state))
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "CLOUDNET_"))}
    env.update(HOME=str(home), CLOUDNET_URL=url, CLOUDNET_STATE_DIR=str(state),
               PATH=f"{Path(CLOUDNET).parent}:{env.get('PATH', '/usr/bin:/bin')}")  # fmt: skip
    done = subprocess.run(
        ["nsenter", f"--mount=/proc/{pid}/ns/mnt", f"--wd={ROOT}", "--", "bash", "-c", "set -euxo pipefail\n" + script],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-6000:]}"
    out = done.stdout
    assert "1 received" in out  # the ping
    assert re.search(r'"uuid": ?"[0-9a-f-]{36}"', out) and re.search(r'"name": ?"vm1"', out)  # its meta_data.json
    assert "\nweb\n" in out  # cloudnet-mdata get role
    assert "cnk1." in out and "| networks" in out  # token issue, quota show

    # A namespace that does not exist (the README's old `--netns /proc/4242/ns/net`): --wait says why, non-zero.
    token = next(iter(json.loads((state / "tokens.json").read_text())["tokens"]))
    bad = subprocess.run(
        [CLOUDNET, "--token", token, "instance", "create", "bad", "--netns", "/proc/2147483647/ns/net", "--nets",
         "network=demo", "--wait"], env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert bad.returncode == 1 and bad.stderr.startswith("Error: instance bad is not plugged: port "), bad.stderr
    assert "netns missing" in bad.stderr
    assert len(bad.stderr.splitlines()) == 1
