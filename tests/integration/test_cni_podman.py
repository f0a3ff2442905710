"""Podman containers on a cloudnet network through cloudnet-cni (pools on): they reach each other and their
router, read their metadata, and their instances go when they go (podman rm; a killed container: GC)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.cni import CniCloud, cni_cloud, invoke
from tests.support.podman import Podman, available

pytestmark = pytest.mark.skipif(not available(), reason="needs podman, runc and busybox-static (make deps)")


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
    assert str(first["description"]).startswith("cloudnet-cni")
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
    assert instance_of(site, one) is None  # podman's CNI DEL took it away
    site.podman.run("rm", "-f", "-t", "0", f"two-{suffix}")
    assert instance_of(site, two) is None


def test_a_killed_container_is_collected(site: Site) -> None:
    """A second podman dies with its container (no cleanup, no DEL): GC with what the host's runtime still runs
    removes that container's instance, and only it."""
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
    valid = [{"containerID": c, "ifname": "eth0"} for c in site.podman.running()]
    assert alive in site.podman.running()
    assert invoke("GC", {**site.rig.conf(), "cni.dev/valid-attachments": valid}) == (0, None)
    assert instance_of(site, cid) is None
    assert instance_of(site, alive) is not None
    site.podman.run("rm", "-f", "-t", "0", f"alive-{suffix}")
    assert instance_of(site, alive) is None
