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

from cloudnet.dataplane.linux.dhcp import DhcpServers
from tests.support.podman import BACKEND, describe, require
from tests.support.process import CLOUDNET, PRIVATE_NETNS, free_port

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- walkthrough -->"
# The Containers section's block for the installed podman: podman 4's (CNI), or podman 5's (netavark).
PODMAN_MARK = "<!-- podman5 -->" if BACKEND == "netavark" else "<!-- podman4 -->"
# What the podman block changes on a user's machine, here tmpfs of the walk-through's mount namespace: podman's
# storage and state, the network configuration (and token) directories, and where `make run` links the plugins.
PODMAN_DIRS = ("/var/lib/containers", "/run/containers", "/run/libpod", "/etc/cni/net.d", "/etc/containers/networks",
               "/opt/cni/bin", "/usr/local/libexec/netavark")  # fmt: skip


def walkthrough(readme: str, mark: str = MARK) -> list[str]:
    """The blocks marked `mark`, in order."""
    blocks = re.findall(r"^" + re.escape(mark) + r"\n```sh\n(.*?)^```$", readme, flags=re.S | re.M)
    assert len(blocks) == readme.count(mark), f"every {mark} mark must be followed by a ```sh block"
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
    proc = subprocess.Popen([*PRIVATE_NETNS, *command], stdout=log, stderr=subprocess.STDOUT)
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
        # dnsmasq outlives its agent (a restarted one adopts it); its namespaces went with this run's /run/netns.
        DhcpServers(f"readme-{tag}").teardown()
        subprocess.run(["ip", "link", "del", uplink], capture_output=True)  # (gone with its namespace, if moved)
        shutil.rmtree(state, ignore_errors=True)


def run_readme(cloudnet_up: tuple[int, str, Path], tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    """`script` (README blocks) in one bash, in the mount namespace of `cloudnet up`, with this run's URL and state
    dir in place of the README's. Its root too: entering a mount namespace puts a process at the namespace's root,
    which is not the chroot's when the suite runs in one (the Debian 13 root)."""
    pid, url, state = cloudnet_up
    assert "127.0.0.1:9696" in script and "/var/lib/cloudnet" in script  # (what is replaced is there to replace)
    script = script.replace("127.0.0.1:9696", url.removeprefix("http://")).replace("/var/lib/cloudnet", str(state))
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "CLOUDNET_"))}
    env.update(HOME=str(home), CLOUDNET_URL=url, CLOUDNET_STATE_DIR=str(state),
               PATH=f"{Path(CLOUDNET).parent}:{env.get('PATH', '/usr/bin:/bin')}")  # fmt: skip
    return subprocess.run(
        ["nsenter", "-t", str(pid), "--mount", "--root", f"--wd={ROOT}", "--", "bash", "-c",
         "set -euxo pipefail\n" + script],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_readme_walkthrough_runs_as_written(cloudnet_up: tuple[int, str, Path], tmp_path: Path) -> None:
    _, url, state = cloudnet_up
    done = run_readme(cloudnet_up, tmp_path, "\n".join(walkthrough((ROOT / "README.md").read_text())))
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-6000:]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "CLOUDNET_"))}
    env.update(HOME=str(tmp_path / "home"), CLOUDNET_URL=url, CLOUDNET_STATE_DIR=str(state))
    out = done.stdout
    assert "1 received" in out  # the ping
    assert re.search(r'"uuid": ?"[0-9a-f-]{36}"', out) and re.search(r'"name": ?"vm1"', out)  # its meta_data.json
    assert "\nweb\n" in out  # cloudnet-mdata get role
    assert re.search(r"cloudnet-tiny: lease eth0 10\.10\.0\.\d+/24", out)  # the VM's lease, then its own metadata
    assert re.search(r'"uuid": ?"[0-9a-f-]{36}".*"name": ?"vm5"', out)
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


@pytest.mark.parametrize("backend", [f"{BACKEND}-{PODMAN_MARK[5:12]}"])
def test_readme_podman_block_runs_as_written(cloudnet_up: tuple[int, str, Path], tmp_path: Path, backend: str) -> None:
    """After the walk-through, the Containers section's block for this machine's podman (the test's id, e.g.
    `[netavark-podman5]`, and its first assertion say which). Beside the walk-through's replacements: the plugin's
    url and host options (the README's are the defaults: 127.0.0.1:9696 and `hostname`), and the image's directory
    (unique to this run)."""
    require()
    readme = (ROOT / "README.md").read_text()
    (block,) = walkthrough(readme, PODMAN_MARK)
    assert describe().startswith("podman 5" if PODMAN_MARK == "<!-- podman5 -->" else "podman 4"), describe()
    url = cloudnet_up[1]
    host = httpx.get(url + "/v2.0/hosts", headers={"X-Auth-Token": "admin"}, timeout=10).json()["hosts"][0]["name"]
    plugin = Path(CLOUDNET).parent
    given = {
        "-o network=demo demo": f"-o network=demo -o url={url} -o host={host} demo",
        '"network": "demo"}': f'"network": "demo", "url": "{url}", "host": "{host}"}}',
        "/tmp/bb": str(tmp_path / "bb"),
    }
    assert sum(old in block for old in given) == 2, block
    for old, new in given.items():
        block = block.replace(old, new)
    setup = "".join(f"mkdir -p {d} && mount -t tmpfs cloudnet-readme {d}\n" for d in PODMAN_DIRS)
    setup += (
        f"ln -s {plugin}/cloudnet-cni /opt/cni/bin/ && ln -s {plugin}/cloudnet-netavark /usr/local/libexec/netavark/\n"
    )
    done = run_readme(cloudnet_up, tmp_path, "\n".join([*walkthrough(readme), setup, block]))
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-6000:]}"
    out = done.stdout
    assert re.search(r"inet 10\.10\.0\.\d+/24", out), out[-2000:]  # the container's address on demo-v4
    assert re.search(r'"uuid": ?"[0-9a-f-]{36}"', out)  # its meta_data.json, read from inside
    assert ("netavark-" if BACKEND == "netavark" else "cni-") in out  # the container's instance in the list
