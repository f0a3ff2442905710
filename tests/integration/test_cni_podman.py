"""Podman containers on a cloudnet network through cloudnet's plugin for podman's backend (tests/support/podman.py:
cloudnet-cni on podman 4, cloudnet-netavark on podman 5; pools on): they reach each other and their
router, read their metadata, and their instances go when they go (podman rm; a killed container: GC)."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.cni import CniCloud, assert_reads_only_its_own_metadata, cni_cloud
from tests.support.podman import DRIVER, Podman, require


@pytest.fixture(scope="module", autouse=True)
def _installed() -> None:
    require()


@dataclass
class Site:
    rig: CniCloud
    podman: Podman
    network: str


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Site]:
    work = tmp_path_factory.mktemp("cnipodman")
    with cni_cloud(work / "cloud", sqlite_template, instance_pools=True) as rig:
        router = rig.cloud.create("routers", "router", {"name": f"r-{rig.cloud.suffix}", "project_id": "alice"})
        r = rig.api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": rig.subnet["id"]})
        assert r.status_code == 200, r.text
        podman = Podman.make(rig.cloud.suffix)
        try:
            yield Site(rig, podman, podman.network(rig.conf()))
        finally:
            podman.close()


def address(site: Site, name: str) -> str:
    inspect = json.loads(site.podman.run("inspect", name).stdout)[0]
    return str(inspect["NetworkSettings"]["Networks"][site.network]["IPAddress"])


def instance_of(site: Site, container_id: str) -> dict[str, object] | None:
    found = [i for i in site.rig.instances() if i["metadata"].get("cni_container_id") == container_id]
    return found[0] if found else None


def test_containers_reach_each_other_their_router_and_metadata(site: Site) -> None:
    suffix = site.rig.cloud.suffix
    one, two = site.podman.start(f"one-{suffix}", site.network), site.podman.start(f"two-{suffix}", site.network)
    first = instance_of(site, one)
    assert first is not None and first["status"] == "ACTIVE"
    assert str(first["description"]).startswith(DRIVER)
    ip_two = address(site, f"two-{suffix}")
    assert ip_two.startswith("10.77.0.")
    assert site.podman.exec(f"one-{suffix}", "ping", "-c1", "-W5", ip_two).returncode == 0
    assert site.podman.exec(f"two-{suffix}", "ping", "-c1", "-W5", "10.77.0.1").returncode == 0  # the router
    meta = site.podman.exec(f"one-{suffix}", "wget", "-qO-", "http://169.254.169.254/openstack/latest/meta_data.json")
    assert meta.returncode == 0, meta.stderr
    assert json.loads(meta.stdout)["uuid"] == first["id"]
    # pools on: the instance's port came from the host's pool (made on first demand)
    pools = site.rig.api.get("/port-pools", params={"network_id": site.rig.network["id"]}).json()["port_pools"]
    assert [p["host"] for p in pools] == [site.rig.cloud.host]

    site.podman.run("rm", "-f", "-t", "0", f"one-{suffix}")
    assert instance_of(site, one) is None  # podman's CNI DEL (netavark's teardown) took it away
    site.podman.run("rm", "-f", "-t", "0", f"two-{suffix}")
    assert instance_of(site, two) is None


def test_a_static_ip_and_a_taken_one(site: Site) -> None:
    """`podman run --ip` gets that address from cloudnet (CNI: runtimeConfig.ips; netavark: static_ips); a second
    container asking for it fails with cloudnet's reason and leaves no instance."""
    suffix = site.rig.cloud.suffix
    cid = site.podman.start(f"fixed-{suffix}", site.network, "--ip", "10.77.0.99")
    assert address(site, f"fixed-{suffix}") == "10.77.0.99"
    inst = instance_of(site, cid)
    assert inst is not None and inst["nets"][0]["fixed_ips"][0]["ip_address"] == "10.77.0.99"  # type: ignore[index]
    taken = site.podman.run("run", "-d", "--name", f"taken-{suffix}", "--network", site.network, "--ip",
                            "10.77.0.99", site.podman.image, "/bin/sleep", "600", check=False)  # fmt: skip
    assert taken.returncode != 0 and "10.77.0.99" in taken.stderr, taken.stderr
    site.podman.run("rm", "-f", "-t", "0", f"taken-{suffix}", f"fixed-{suffix}")
    assert [i for i in site.rig.instances() if "10.77.0.99" in json.dumps(i["nets"])] == []


# An HTTP GET of the metadata service from a given source address, run with the host's Python in a container's
# namespace: the body, or why nothing came back.
def test_cloud_init_reads_its_own_metadata_and_no_one_elses(site: Site) -> None:
    """cloud-init's OpenStack reader in a container's namespace gets that container's instance; the container,
    claiming its neighbour's address as its source, gets nothing (port security drops it before the proxy)."""
    suffix = site.rig.cloud.suffix
    me, other = site.podman.start(f"me-{suffix}", site.network), site.podman.start(f"other-{suffix}", site.network)
    mine, theirs = instance_of(site, me), instance_of(site, other)
    assert mine is not None and theirs is not None
    sandbox = json.loads(site.podman.run("inspect", f"me-{suffix}").stdout)[0]["NetworkSettings"]["SandboxKey"]
    own, neighbour = address(site, f"me-{suffix}"), address(site, f"other-{suffix}")
    assert_reads_only_its_own_metadata(sandbox, mine, theirs, own, neighbour)
    site.podman.run("rm", "-f", "-t", "0", f"me-{suffix}", f"other-{suffix}")


def test_a_container_whose_process_dies_is_torn_down(site: Site) -> None:
    """Its process killed while podman's conmon lives: conmon's cleanup runs the plugin's DEL (teardown), no GC
    needed."""
    suffix = site.rig.cloud.suffix
    cid = site.podman.start(f"dies-{suffix}", site.network)
    assert instance_of(site, cid) is not None
    pid = json.loads(site.podman.run("inspect", f"dies-{suffix}").stdout)[0]["State"]["Pid"]
    os.kill(pid, signal.SIGKILL)
    site.rig.cloud.wait_for(lambda: instance_of(site, cid) is None, timeout=30, what="the dead container's teardown")
    site.podman.run("rm", "-f", "-t", "0", f"dies-{suffix}")


def test_a_killed_container_is_collected(site: Site) -> None:
    """A second podman dies with its container (no cleanup, no DEL or teardown): GC with what the host's runtime
    still runs removes that container's instance, and only it."""
    suffix = site.rig.cloud.suffix
    doomed = Podman.make(f"{suffix}-2")
    try:
        doomed.network(site.rig.conf())
        cid = doomed.start(f"doomed-{suffix}", site.network)
        alive = site.podman.start(f"alive-{suffix}", site.network)
        doomed.crash(f"doomed-{suffix}")
    finally:
        doomed.close()
    assert instance_of(site, cid) is not None  # nobody told cloudnet
    assert alive in site.podman.running()
    assert site.podman.collect(site.network, site.rig.conf()) == (0, None)
    assert instance_of(site, cid) is None
    assert instance_of(site, alive) is not None
    site.podman.run("rm", "-f", "-t", "0", f"alive-{suffix}")
    assert instance_of(site, alive) is None
