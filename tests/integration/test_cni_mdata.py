"""A podman container on a cloudnet network (cloudnet-cni on podman 4, cloudnet-netavark on podman 5) gets its own
instance's SmartOS metadata socket through cloudnet-oci-hook (a createRuntime hook in podman's hooks.d, run only for
containers with the annotation io.cloudnet.mdata; it finds the instance by the container's network namespace, the
same for both plugins), and nothing of another's: not through the annotation, not through a symlink in its image, not
without a cloudnet instance.

Inside the container a small static client (C, built by the test) asks the socket with the protocol's v1 GET;
from the host, cloudnet-mdata (v2) asks the same socket through the container's root (/proc/PID/root)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.cni import CniCloud, cni_cloud
from tests.support.installed import require_commands
from tests.support.podman import Podman, require


@pytest.fixture(scope="module", autouse=True)
def _installed() -> None:
    require()
    require_commands("gcc", "gcc")


HOOK = Path(sys.executable).with_name("cloudnet-oci-hook")
MDATA = Path(sys.executable).with_name("cloudnet-mdata")
# `mdget SOCKET KEY`: one v1 GET, the answer's status and value lines as they come (up to the lone '.').
CLIENT = r"""
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    struct timeval t = {5, 0};
    char buf[4096], req[512];
    size_t got = 0;
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (argc != 3) return 3;
    strncpy(a.sun_path, argv[1], sizeof(a.sun_path) - 1);
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof(t));
    if (connect(s, (struct sockaddr *)&a, sizeof(a)) != 0) { perror("connect"); return 2; }
    snprintf(req, sizeof(req), "GET %s\n", argv[2]);
    if (write(s, req, strlen(req)) < 0) return 2;
    while (got < sizeof(buf) - 1) {
        ssize_t n = read(s, buf + got, sizeof(buf) - 1 - got);
        if (n <= 0) break;
        got += n;
        buf[got] = 0;
        if (strstr(buf, "\n.\n") || strncmp(buf, "NOTFOUND", 8) == 0) break;
    }
    fwrite(buf, 1, got, stdout);
    return 0;
}
"""


@dataclass
class Site:
    rig: CniCloud
    podman: Podman
    network: str
    client_image: str
    state: Path  # the agent's state directory (its sockets under zonecontrol/)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Site]:
    work = tmp_path_factory.mktemp("cnimdata")
    state = Path(tempfile.mkdtemp(prefix="cnimd.", dir="/tmp"))
    subprocess.run(["gcc", "-static", "-Os", "-o", str(work / "mdget"), "-x", "c", "-"], input=CLIENT, text=True,
                   check=True, capture_output=True)  # fmt: skip
    try:
        with cni_cloud(work / "cloud", sqlite_template, mdata_dir=state) as rig:
            podman = Podman.make(rig.cloud.suffix)
            try:
                hook = subprocess.run(
                    [str(HOOK), "--print-config", "--url", rig.cloud.server.url, "--token-file", str(rig.token_file),
                     "--state-dir", str(state), "--host", rig.cloud.host],
                    capture_output=True, text=True, check=True,
                )  # fmt: skip
                (podman.work / "hooks.d" / "cloudnet-mdata.json").write_text(hook.stdout)
                image = podman.image_of(f"localhost/cnimd-{rig.cloud.suffix}:1", {"bin/mdget": work / "mdget"})
                yield Site(rig, podman, podman.network(rig.conf()), image, state)
            finally:
                podman.close()
    finally:
        shutil.rmtree(state, ignore_errors=True)


def instance_of(site: Site, container_id: str) -> dict[str, object] | None:
    found = [i for i in site.rig.instances() if i["metadata"].get("cni_container_id") == container_id]
    return found[0] if found else None


def pid_of(site: Site, name: str) -> int:
    return int(json.loads(site.podman.run("inspect", name).stdout)[0]["State"]["Pid"])


def v1_value(answer: str) -> str:
    lines = answer.split("\n")
    assert lines[0] == "SUCCESS" and "." in lines, answer
    return "\n".join(lines[1 : lines.index(".")])


def mounted_at(path: Path) -> bool:
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return str(path) in points


def test_a_container_that_asks_reads_its_own_instance_and_others_get_nothing(site: Site) -> None:
    s = site.rig.cloud.suffix
    zone = site.podman.start(f"zone-{s}", site.network, "--annotation", "io.cloudnet.mdata=zone",
                             image=site.client_image)  # fmt: skip
    lx = site.podman.start(f"lx-{s}", site.network, "--annotation", "io.cloudnet.mdata=lx", image=site.client_image)
    plain = site.podman.start(f"plain-{s}", site.network, image=site.client_image)
    mine, theirs = instance_of(site, zone), instance_of(site, lx)
    assert mine is not None and theirs is not None and instance_of(site, plain) is not None

    got = site.podman.exec(f"zone-{s}", "/bin/mdget", "/.zonecontrol/metadata.sock", "sdc:uuid")
    assert got.returncode == 0 and v1_value(got.stdout) == mine["id"], got
    got = site.podman.exec(f"lx-{s}", "/bin/mdget", "/native/.zonecontrol/metadata.sock", "sdc:uuid")  # LX's place
    assert got.returncode == 0 and v1_value(got.stdout) == theirs["id"], got
    # The same socket, seen through the container's root from the host, with cloudnet-mdata (protocol v2).
    through = f"/proc/{pid_of(site, f'zone-{s}')}/root/.zonecontrol/metadata.sock"
    v2 = subprocess.run(
        [str(MDATA), "--socket", through, "get", "sdc:uuid"], capture_output=True, text=True, timeout=30
    )
    assert (v2.returncode, v2.stdout.strip()) == (0, mine["id"]), v2.stderr
    # A container in another's network namespace (as a pod's containers are) is that instance: it reads its socket.
    site.podman.start(f"joined-{s}", f"container:zone-{s}", "--annotation", "io.cloudnet.mdata=zone",
                      image=site.client_image)  # fmt: skip
    got = site.podman.exec(f"joined-{s}", "/bin/mdget", "/.zonecontrol/metadata.sock", "sdc:uuid")
    assert got.returncode == 0 and v1_value(got.stdout) == mine["id"], got
    # Read-only, and holding only its own socket; the container without the annotation has no directory at all.
    listing = site.podman.exec(f"zone-{s}", "busybox", "ls", "-a", "/.zonecontrol")
    assert sorted(listing.stdout.split()) == [".", "..", "metadata.sock"], listing
    assert site.podman.exec(f"zone-{s}", "busybox", "touch", "/.zonecontrol/planted").returncode != 0
    assert site.podman.exec(f"plain-{s}", "busybox", "ls", "/.zonecontrol").returncode != 0
    assert site.podman.exec(f"plain-{s}", "busybox", "ls", "/native/.zonecontrol").returncode != 0
    site.podman.run("rm", "-f", "-t", "0", f"joined-{s}")
    site.podman.run("rm", "-f", "-t", "0", f"zone-{s}", f"lx-{s}", f"plain-{s}")
    assert instance_of(site, zone) is None


def refused(site: Site, name: str, *options: str, image: str | None = None, network: str | None = None) -> str:
    """podman run's error for a container the hook must refuse (it never runs; its instance goes with it)."""
    out = site.podman.run("run", "-d", "--name", name, "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096",
                          "--network", network or site.network, *options, image or site.client_image, "/bin/sleep",
                          "600", check=False)  # fmt: skip
    assert out.returncode != 0, out.stdout
    assert "cloudnet-oci-hook" in out.stderr, out.stderr
    site.podman.run("rm", "-f", "-t", "0", name, check=False)
    return out.stderr


def test_the_hook_fails_closed_on_what_a_container_claims(site: Site) -> None:
    """An annotation naming another instance (or a path) is refused; an image whose /.zonecontrol is a symlink (to
    the neighbour's directory on the host: the hook runs before pivot_root) is refused, and nothing is mounted
    there; a container without a cloudnet instance (no network, or another CNI plugin's) gets nothing."""
    s = site.rig.cloud.suffix
    other = site.podman.start(f"other-{s}", site.network, "--annotation", "io.cloudnet.mdata=zone",
                              image=site.client_image)  # fmt: skip
    theirs = instance_of(site, other)
    assert theirs is not None
    their_dir = site.state / "zonecontrol" / str(theirs["id"])
    assert (their_dir / "metadata.sock").exists()

    for value in (str(theirs["id"]), f"../../zonecontrol/{theirs['id']}", "/var/lib/cloudnet"):
        err = refused(site, f"claim-{s}", "--annotation", f"io.cloudnet.mdata={value}")
        assert "io.cloudnet.mdata must be one of" in err, err
    linked = site.podman.image_of(f"localhost/cnimd-link-{s}:1", links={".zonecontrol": str(their_dir)})
    err = refused(site, f"link-{s}", "--annotation", "io.cloudnet.mdata=zone", image=linked)
    assert "symlink" in err, err
    assert not mounted_at(their_dir)
    err = refused(site, f"none-{s}", "--annotation", "io.cloudnet.mdata=zone", network="none")
    assert "no cloudnet instance" in err, err
    err = refused(site, f"lo-{s}", "--annotation", "io.cloudnet.mdata=zone", network=site.podman.other_network(s))
    assert f"no cloudnet instance of host {site.rig.cloud.host}" in err, err
    # The refused containers' instances went with them (podman's CNI DEL, netavark's teardown); the neighbour still
    # reads its own.
    assert [i["metadata"].get("cni_container_id") for i in site.rig.instances()] == [other]
    got = site.podman.exec(f"other-{s}", "/bin/mdget", "/.zonecontrol/metadata.sock", "sdc:uuid")
    assert v1_value(got.stdout) == theirs["id"], got
    site.podman.run("rm", "-f", "-t", "0", f"other-{s}")
