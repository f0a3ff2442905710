"""OVN's NB and SB clusters over SSL (tests/support/ovn_cluster.py with tls: `cloudnet serve --tls`, the other two
members' certificates from join tokens): Raft and clients on ssl:/pssl: only, no plain TCP listener off loopback;
a plain TCP client and one with another CA's certificate get nothing; the NB writer follows a new leader over SSL."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudnet.agent import join as joining
from cloudnet.dataplane.kernel import netns
from cloudnet.ovn import cluster, daemons
from cloudnet.ovn.cluster import servers
from cloudnet.pki import x509
from tests.ovn.test_cluster import (  # (the same test, run on this module's rig: over SSL)
    test_the_nb_writer_follows_a_new_leader_when_the_nb_leader_is_killed_during_creates,
)
from tests.support.ovn import UNDERLAY
from tests.support.ovn_cluster import API_PORT, CHASSIS, SERVERS, ClusterRig, cluster_rig

__all__ = ["test_the_nb_writer_follows_a_new_leader_when_the_nb_leader_is_killed_during_creates"]
PORTS = (6641, 6642, 6643, 6644)


@pytest.fixture(scope="module")
def rig() -> Iterator[ClusterRig]:
    with cluster_rig(agent=False, tls=True) as r:
        yield r


def _listeners(ns: str) -> set[str]:
    out = subprocess.run(["ip", "netns", "exec", ns, "ss", "-Hltn"], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    return {line.split()[3] for line in out.splitlines()}


def _loopback(local: str) -> bool:
    return local.rsplit(":", 1)[0].strip("[]") in ("127.0.0.1", "::1") or local.startswith("127.")


def _client(rig: ClusterRig, remote: str, ssl: daemons.Ssl | None) -> subprocess.CompletedProcess[str]:
    """`ovsdb-client list-dbs` from the rig's fourth namespace (another host on the underlay)."""
    argv = ["ip", "netns", "exec", rig.chassis_ns, "ovsdb-client", "--timeout=3", *daemons.ssl_args(ssl),
            "list-dbs", remote]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=15)


def test_the_clusters_form_over_ssl_with_no_plain_tcp_listener_off_loopback(rig: ClusterRig) -> None:
    for kind in cluster.KINDS:
        want = {f"ssl:{a}:{cluster.RAFT_PORT[kind]}" for a in rig.addresses}
        for index in SERVERS:
            assert set(servers(rig.status(index, kind)).values()) == want
    for index in SERVERS:
        own = {f"{rig.addresses[index - 1]}:{port}" for port in PORTS}
        others = {a for a in _listeners(rig.ns(index)) if not _loopback(a)} - own
        # (host 1's API: uvicorn with TLS, on every address of its namespace)
        assert others == ({f"0.0.0.0:{API_PORT}"} if index == 1 else set()), others
        assert own <= _listeners(rig.ns(index))
    # Each of those speaks SSL only: a client with a certificate of the cloud's CA gets an answer, on every member.
    for address in rig.addresses:
        for port, db in ((6641, "OVN_Northbound"), (6642, "OVN_Southbound")):
            got = _client(rig, cluster.connect(port, address, ssl=True), rig.ssl(2))
            assert got.returncode == 0 and db in got.stdout, got.stderr
    assert "ssl:" in (rig.root / "server.log").read_text().split("--ovn-sb ", 1)[1].split()[0]


def test_a_plain_tcp_client_and_one_of_another_ca_get_nothing(rig: ClusterRig, tmp_path: Path) -> None:
    for address in rig.addresses:
        for port in PORTS:
            got = _client(rig, cluster.connect(port, address), None)
            assert got.returncode != 0 and not got.stdout, (port, got.stdout)
    other = x509.new_authority()
    key = x509.new_key()
    foreign = daemons.Ssl(tmp_path / "o.key", tmp_path / "o.crt", rig.state(1) / "pki" / "ca.crt")
    x509.write_private(foreign.key, x509.key_pem(key))
    x509.write_private(foreign.cert, x509.cert_pem(other.server_cert(["intruder", rig.addresses[0]], key, True)))
    for port in (6641, 6642, 6643):
        got = _client(rig, cluster.connect(port, rig.addresses[0], ssl=True), foreign)
        assert got.returncode != 0 and not got.stdout, (port, got.stdout)
    # ovsdb-server logged both refusals, naming the peer.
    log = (rig.rundir(1) / "ovnnb_db.log").read_text()
    peer = f"ssl:{UNDERLAY[CHASSIS]}:"
    assert "certificate verify failed" in log and "received JSON-RPC data on SSL channel" in log, log[-2000:]
    assert peer in log


def test_a_join_token_gets_no_member_certificate_for_an_address_outside_the_clusters(
    rig: ClusterRig, tmp_path: Path
) -> None:
    """A token holder asking for a member's certificate of an address the server's --ovn-cluster does not list
    (or the server's own member's) is refused, logged, and its token is not spent."""
    name = f"rogue-{rig.suffix}"
    with rig.api() as api:
        token = api.post(f"/hosts/{name}/join-tokens", json={"join_token": {}}).json()["join_token"]["token"]
    with netns.entered(rig.ns(1)):
        for address in (str(UNDERLAY[99]), rig.addresses[0]):
            with pytest.raises(joining.JoinError, match="not an address of another member"):
                joining.join(f"https://127.0.0.1:{API_PORT}", token, name, tmp_path, ovn_member=address)
        assert not joining.Joined.files(tmp_path)[1].exists()
        done = joining.join(f"https://127.0.0.1:{API_PORT}", token, name, tmp_path)  # (unspent: a host's join)
    assert done.host == name
    assert f"join refused: token {token.split('.')[0]} for host {name}" in (rig.root / "server.log").read_text()
