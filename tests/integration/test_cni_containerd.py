"""cloudnet-cni through containerd's own CNI path (`ctr run --cni`), the CNI runtime Debian ships on both 12 and 13
(podman 5 on 13 speaks only netavark): containers on a cloudnet network reach each other and their router, read
their own metadata, and their instances go when they go (the runtime's DEL; a killed container: GC). Hostile
conflists (another project's network, port or project; a token offered beside the token file) and hostile
namespaces (the host's, a running container's) are refused through the runtime. The tests' ids say which
containerd and which of ctr's DEL paths ran (tests/support/containerd.py)."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.cni import (
    SERVICE_TOKEN,
    CniCloud,
    Run,
    assert_on_network,
    assert_reads_only_its_own_metadata,
    cni_cloud,
    invoke,
)
from tests.support.containerd import NAMESPACE, Container, Containerd, del_in_kill, require_containerd, runtime_path


@dataclass
class Site:
    rig: CniCloud
    ctr: Containerd
    network: Path  # the conflist directory of alice's network

    def name(self, label: str) -> str:
        return f"{label}-{self.rig.cloud.suffix}-{uuid.uuid4().hex[:4]}"

    def run_in(self, container: Container) -> Run:
        return functools.partial(self.ctr.exec, container.name)


@pytest.fixture(scope="module", params=[runtime_path()])
def site(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Site]:
    require_containerd()
    with cni_cloud(tmp_path_factory.mktemp("cnictr"), sqlite_template, instance_pools=True) as rig:
        rig.add_router()
        ctr = Containerd.make()
        try:
            yield Site(rig, ctr, ctr.network(rig.conf()))
        finally:
            ctr.close()


def test_containers_reach_each_other_their_router_and_metadata(site: Site) -> None:
    one = site.ctr.start(site.name("one"), site.network)
    two = site.ctr.start(site.name("two"), site.network)
    first = site.rig.instance_of(one.cni_id)
    second = site.rig.instance_of(two.cni_id)
    assert first is not None and second is not None
    assert first["netns"] == one.netns  # ctr names the namespace by its task's PID
    ip_one, ip_two = (i["nets"][0]["fixed_ips"][0]["ip_address"] for i in (first, second))
    assert_on_network(site.rig, one.cni_id, site.run_in(one), ip_two)
    assert_on_network(site.rig, two.cni_id, site.run_in(two), ip_one)
    # pools on: the instances' ports came from the host's pool (made on first demand)
    pools = site.rig.api.get("/port-pools", params={"network_id": site.rig.network["id"]}).json()["port_pools"]
    assert [p["host"] for p in pools] == [site.rig.cloud.host]

    site.ctr.kill(one.name)
    if del_in_kill():  # 1.7: `ctr task kill` has run DEL before it signalled the task
        assert site.rig.instance_of(one.cni_id) is None
    site.ctr.stop(one.name)
    assert site.rig.instance_of(one.cni_id) is None  # ctr's DEL took it away (1.6: the foreground `ctr run`'s)
    assert site.rig.instance_of(two.cni_id) is not None
    site.ctr.stop(two.name)
    assert site.rig.instance_of(two.cni_id) is None


def test_cloud_init_reads_its_own_metadata_and_no_one_elses(site: Site) -> None:
    me, other = site.ctr.start(site.name("me"), site.network), site.ctr.start(site.name("other"), site.network)
    mine, theirs = site.rig.instance_of(me.cni_id), site.rig.instance_of(other.cni_id)
    assert mine is not None and theirs is not None
    own, neighbour = (i["nets"][0]["fixed_ips"][0]["ip_address"] for i in (mine, theirs))
    assert_reads_only_its_own_metadata(me.netns, mine, theirs, own, neighbour)
    site.ctr.stop(me.name)
    site.ctr.stop(other.name)


def test_a_killed_container_is_collected(site: Site) -> None:
    """ctr and its container die outright (no DEL from anyone): GC with the tasks containerd still runs removes
    that container's instance, and only it."""
    doomed = site.ctr.start(site.name("doomed"), site.network)
    alive = site.ctr.start(site.name("alive"), site.network)
    site.ctr.crash(doomed.name)
    assert site.rig.instance_of(doomed.cni_id) is not None  # nobody told cloudnet
    running = site.ctr.running()
    assert alive.cni_id in running and doomed.cni_id not in running
    valid = [{"containerID": c, "ifname": "eth0"} for c in running]
    assert invoke("GC", {**site.rig.conf(), "cni.dev/valid-attachments": valid}) == (0, None)
    assert site.rig.instance_of(doomed.cni_id) is None
    assert site.rig.instance_of(alive.cni_id) is not None
    site.ctr.remove(doomed.name)
    site.ctr.stop(alive.name)
    assert site.rig.instance_of(alive.cni_id) is None


def test_another_projects_network_or_port_in_the_conflist(site: Site) -> None:
    """A conflist naming bob's network (by name or id), bob's project, or bob's port: `ctr run` fails with the
    plugin's reason, no task runs, no instance is left, and bob's port stays unbound."""
    bobs_port = site.rig.cloud.create("ports", "port", {"network_id": site.rig.foreign["id"], "project_id": "bob"})
    unseen = "visible to the plugin's token"
    hostile = {
        "bob's network by name": (site.rig.conf(network=site.rig.foreign["name"]), unseen),
        "bob's network by id": (site.rig.conf(network=site.rig.foreign["id"]), unseen),
        "bob's port": (site.rig.conf(args={"cloudnet": {"port": bobs_port["id"]}}), unseen),
        "bob's project": (site.rig.conf(project="bob"), "403"),
    }
    before = {i["id"] for i in site.rig.instances()}
    for case, (conf, reason) in hostile.items():
        name = site.name("hostile")
        failed = site.ctr.try_start(name, site.ctr.network(conf))
        assert isinstance(failed, str) and "cloudnet-cni" in failed and reason in failed, (case, failed)
        assert f"{NAMESPACE}-{name}" not in site.ctr.running()
    assert {i["id"] for i in site.rig.instances()} == before
    port = site.rig.api.get(f"/ports/{bobs_port['id']}").json()["port"]
    assert port["device_id"] == "" and port["binding:host_id"] == "", port


def test_a_token_in_the_args_or_the_environment_is_not_used(site: Site) -> None:
    """The admin token offered in the conflist's args and as CNI_ARGS in ctr's environment (libcni gives the plugin
    the runtime's own, empty here): the plugin uses only its token file, so the container is alice's (the admin
    token's would be project ops'); a token file others can read stops it."""
    netd = site.ctr.network(site.rig.conf(args={"cloudnet": {"token": "admin"}}))
    box = site.ctr.start(site.name("args"), netd, env={"CNI_ARGS": "TOKEN=admin"})
    inst = site.rig.instance_of(box.cni_id)
    assert inst is not None and inst["project_id"] == "alice" and inst["status"] == "ACTIVE"
    site.ctr.stop(box.name)
    assert site.rig.instance_of(box.cni_id) is None
    leaky = site.ctr.work / "leaky.token"
    leaky.write_text(SERVICE_TOKEN + "\n")
    leaky.chmod(0o644)
    failed = site.ctr.try_start(site.name("leaky"), site.ctr.network(site.rig.conf(token_file=str(leaky))))
    assert isinstance(failed, str) and "owner only" in failed, failed


def test_a_container_in_the_hosts_or_anothers_namespace_is_refused(site: Site) -> None:
    """`ctr run --net-host --cni` hands the plugin the host's namespace, `--with-ns network:...` a running
    container's: the agent plugs neither (ADD fails with its reason, the instance goes), and the container living
    there keeps its instance and address."""
    incumbent = site.ctr.start(site.name("incumbent"), site.network)
    before = site.rig.instance_of(incumbent.cni_id)
    assert before is not None
    host = ("--net-host",), ("the host's network namespace", "the agent's own network namespace")
    other = ("--with-ns", f"network:{incumbent.netns}"), (f"the network namespace of instance {before['id']}",)
    for options, reasons in (host, other):
        name = site.name("intruder")
        failed = site.ctr.try_start(name, site.network, options=options)
        assert isinstance(failed, str) and "cloudnet could not plug the container" in failed, (options, failed)
        assert any(reason in failed for reason in reasons), failed
        assert site.rig.instance_of(f"{NAMESPACE}-{name}") is None, options
    assert site.rig.instance_of(incumbent.cni_id) == before
    own = before["nets"][0]["fixed_ips"][0]["ip_address"]
    assert f" {own}/24 " in site.ctr.exec(incumbent.name, "ip", "-o", "-4", "addr", "show", "eth0").stdout
    site.ctr.stop(incumbent.name)
