"""OVN's NB and SB as 3-member Raft clusters across three server hosts (tests/support/ovn_cluster.py: one rig for the
module, each host a namespace of its own, cloudnet started from the command line): the clusters form; the server's
NB writer writes through the list and follows a new leader when the NB leader is killed -9 while ports are created,
with NB equal to the store afterwards; a chassis keeps and makes bindings when the SB leader is killed -9; a member
restarted on its file rejoins as the same server; one that leaves is forgotten and can join afresh."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cloudnet.dataplane.kernel import netns
from cloudnet.ovn import cluster, daemons
from cloudnet.ovn.cluster import servers
from cloudnet.store.db import Store
from tests.ovn.converged import nb_differences
from tests.support.ovn_cluster import SERVERS, ClusterRig, bound_here, cluster_id, cluster_rig, server_id
from tests.support.process import CLOUDNET


@pytest.fixture(scope="module")
def rig() -> Iterator[ClusterRig]:
    with cluster_rig() as r:
        yield r


def _listening(ns: str, port: int) -> list[str]:
    out = subprocess.run(["ip", "netns", "exec", ns, "ss", "-Hltn", f"sport = :{port}"], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    return [line.split()[3] for line in out.splitlines()]


def test_the_nb_and_sb_clusters_form_across_the_three_hosts(rig: ClusterRig) -> None:
    for kind in cluster.KINDS:
        statuses = {i: rig.status(i, kind) for i in SERVERS}
        assert len({cluster_id(s) for s in statuses.values()}) == 1, statuses
        want = {f"tcp:{a}:{cluster.RAFT_PORT[kind]}" for a in rig.addresses}
        for text in statuses.values():
            assert set(servers(text).values()) == want, text
        roles = sorted(cluster.role(rig.rundir(i), kind) for i in SERVERS)
        assert roles == ["follower", "follower", "leader"], statuses
    # Each member listens on its own address only: clients on 6641/6642, Raft on 6643/6644.
    for index in SERVERS:
        for port in (6641, 6642, 6643, 6644):
            assert _listening(rig.ns(index), port) == [f"{rig.addresses[index - 1]}:{port}"]
    # ovn-northd runs on every server host (one holds OVN's lock); the server printed the list for chassis.
    assert all("ovn-northd" in daemons.pids(rig.rundir(i)) for i in SERVERS)
    assert f"--ovn-sb {rig.sb} " in (rig.root / "server.log").read_text()


def _port(api: Any, network: str, name: str) -> str:
    r = api.post("/ports", json={"port": {"network_id": network, "name": name}})
    assert r.status_code == 201, r.text
    return str(r.json()["port"]["id"])


def _in_step(rig: ClusterRig, store: Store, what: str, timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while found := nb_differences(rig, store, []):
        assert time.monotonic() < deadline, f"{what}: NB differs from the store: {found[:10]}{rig.logs()}"
        time.sleep(0.2)


def _switch_ports(rig: ClusterRig) -> set[str]:
    return set(rig.nbctl("--bare", "--columns=name", "list", "Logical_Switch_Port").split())


def test_the_nb_writer_follows_a_new_leader_when_the_nb_leader_is_killed_during_creates(rig: ClusterRig) -> None:
    store = Store(rig.db_url)
    with rig.api() as api:
        net = api.post("/networks", json={"network": {"name": "raft"}}).json()["network"]
        r = api.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.78.0.0/24"}})
        assert r.status_code == 201, r.text
        first = _port(api, net["id"], "before")
    rig.until("the writer wrote through the list", lambda: first in _switch_ports(rig))
    killed = rig.leader("nb")
    assert killed is not None
    before = rig.status(killed, "nb")
    created, deleted = [], []
    with rig.api() as api:
        for n in range(30):
            if n == 5:
                rig.kill(killed, "nb")
            created.append(_port(api, net["id"], f"p{n}"))
            if n % 4 == 3:  # (deletes too: the writer's passes carry both)
                gone = created.pop(0)
                assert api.delete(f"/ports/{gone}").status_code == 204
                deleted.append(gone)
    # Every acknowledged create is in NB, every delete gone, through the new leader.
    _in_step(rig, store, "after the NB leader was killed")
    have = _switch_ports(rig)
    assert set(created) <= have and not set(deleted) & have
    new = rig.leader("nb")
    assert new is not None and new != killed
    # (it was the writer's leader; the server writes its log lines from a thread of their own: polled)
    rig.until(
        "the writer logged its resync", lambda: "resync after reconnecting" in (rig.root / "server.log").read_text()
    )
    # The killed member comes back on its file: the same server of the same cluster, a follower, caught up.
    rig.restart(killed, "nb")
    rig.until("the killed NB member is back in its cluster", rig.formed)
    after = rig.status(killed, "nb")
    assert (server_id(after), cluster_id(after)) == (server_id(before), cluster_id(before))
    store.dispose()


def _instance(rig: ClusterRig, api: Any, net: str, name: str) -> dict[str, Any]:
    ns = f"cn-raft-{rig.suffix}-i{name}"
    netns.create(ns)
    r = api.post("/instances", json={"instance": {"name": name, "host": rig.host, "netns": ns,
                                                  "nets": [{"network": net}]}})  # fmt: skip
    assert r.status_code == 201, r.text
    return dict(r.json()["instance"])


def _active(rig: ClusterRig, instance: str) -> bool:
    with rig.api() as api:
        got = api.get(f"/instances/{instance}").json()["instance"]
    assert got["status"] != "ERROR", got
    return got["status"] == "ACTIVE"


def test_a_chassis_keeps_and_makes_bindings_when_the_sb_leader_is_killed(rig: ClusterRig) -> None:
    with rig.api() as api:
        net = api.post("/networks", json={"network": {"name": "sbkill"}}).json()["network"]
        r = api.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.79.0.0/24"}})
        assert r.status_code == 201, r.text
        one = _instance(rig, api, net["id"], "1")
    rig.until("the first instance ACTIVE", lambda: _active(rig, one["id"]))
    killed = rig.leader("sb")
    assert killed is not None
    rig.kill(killed, "sb")
    with rig.api() as api:
        two = _instance(rig, api, net["id"], "2")
    rig.until("an instance created after the SB leader died ACTIVE", lambda: _active(rig, two["id"]))
    assert rig.leader("sb") not in (None, killed)
    with rig.api() as api:
        ports = {p["device_id"]: p["id"] for p in api.get("/ports").json()["ports"]}
    want = {ports[one["id"]], ports[two["id"]]}
    rig.until("both ports bound to the chassis and up", lambda: bound_here(rig) >= want)
    assert rig.sbctl("--bare", "--columns=name", "list", "Chassis").split() == [rig.host]
    rig.restart(killed, "sb")
    rig.until("the killed SB member is back in its cluster", rig.formed)


def test_a_member_host_restarted_rejoins_on_its_files_and_one_that_leaves_can_join_afresh(rig: ClusterRig) -> None:
    ids = {kind: server_id(rig.status(3, kind)) for kind in cluster.KINDS}
    assert rig.stop_proc("join3") == 0
    assert daemons.pids(rig.rundir(3)) == {}
    rig.start_join(3)
    rig.until("host 3's members back", rig.formed)
    assert {kind: server_id(rig.status(3, kind)) for kind in cluster.KINDS} == ids  # (the same servers: no join)

    # Leaving: the others forget it (2 servers), its files go, and its `cloudnet ovn join` ends by itself.
    left = subprocess.run([CLOUDNET, "ovn", "leave", "--state-dir", str(rig.state(3))], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert left.returncode == 0, left.stderr
    assert rig.procs.pop("join3").wait(timeout=10) == 0
    for kind in cluster.KINDS:
        assert len(servers(rig.status(1, kind))) == 2
        assert not (rig.rundir(3) / f"ovn{kind}_db.db").exists()
    rig.start_join(3)
    rig.until("host 3 joined afresh", rig.formed)
    assert all(server_id(rig.status(3, kind)) != ids[kind] for kind in cluster.KINDS)


def test_the_first_host_with_its_files_lost_joins_the_running_clusters_instead_of_making_new_ones(
    rig: ClusterRig,
) -> None:
    """Host 1 created the clusters; its disk is replaced: started again with the same command line, it must not
    create a second NB and SB (an empty NB the writer would fill while the others keep the real one), but join."""
    before = {kind: (cluster_id(rig.status(2, kind)), server_id(rig.status(1, kind))) for kind in cluster.KINDS}
    assert rig.stop_proc("server") == 0
    for kind in cluster.KINDS:
        (rig.rundir(1) / f"ovn{kind}_db.db").unlink()
    rig.start_server()
    rig.until("host 1 back in the running clusters, its earlier server taken out", rig.formed)
    for kind, (cid, old_sid) in before.items():
        text = rig.status(1, kind)
        assert cluster_id(text) == cid and server_id(text) != old_sid, text
        assert old_sid not in servers(rig.status(2, kind))
    store = Store(rig.db_url)
    _in_step(rig, store, "after host 1 joined again")  # (NB's rows came back from the cluster, none lost)
    assert rig.nbctl("--bare", "--columns=name", "list", "Logical_Switch").split()
    store.dispose()


def test_a_standalone_database_file_is_refused_as_a_member(tmp_path: Path) -> None:
    """A state dir holding a standalone NB (from a run without --ovn-cluster) is not silently made a member: its
    rows would be lost or fork the cloud."""
    daemons.run(tmp_path, ["ovsdb-tool", "create", str(tmp_path / "ovnnb_db.db"),
                           str(daemons.OVN_SCHEMAS / "ovn-nb.ovsschema")])  # fmt: skip
    members = cluster.Members("192.0.2.1", ("192.0.2.1", "192.0.2.2", "192.0.2.3"))
    with pytest.raises(daemons.OvnError, match="standalone database"):
        cluster.start_member(tmp_path, "nb", members)
    assert daemons.pids(tmp_path) == {}
