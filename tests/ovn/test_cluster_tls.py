"""OVN's NB and SB clusters over SSL (tests/support/ovn_cluster.py with tls: `cloudnet serve --tls`, the other two
members' and the chassis' certificates from join tokens): Raft and clients on ssl:/pssl: only, no plain TCP listener
off loopback; the chassis keeps and makes bindings when the SB leader is killed;
a plain TCP client and one with another CA's certificate get nothing; a token gets no member certificate for an
address outside the clusters; a member renews its certificate when due; the NB writer follows a new leader over
SSL."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509 as cx

from cloudnet import ovn_stack
from cloudnet.agent import join as joining
from cloudnet.dataplane.kernel import netns
from cloudnet.ovn import cluster, daemons, front
from cloudnet.ovn.cluster import servers
from cloudnet.pki import crl, rotation, tls, x509
from tests.ovn.test_cluster import (  # (the same tests, run on this module's rig: over SSL)
    test_a_chassis_keeps_and_makes_bindings_when_the_sb_leader_is_killed,
    test_the_nb_writer_follows_a_new_leader_when_the_nb_leader_is_killed_during_creates,
)
from tests.support.ovn import UNDERLAY
from tests.support.ovn_cluster import API_PORT, CHASSIS, SERVERS, ClusterRig, cluster_rig, joined_ssl
from tests.support.process import CLOUDNET
from tests.support.tls import aged

__all__ = [
    "test_a_chassis_keeps_and_makes_bindings_when_the_sb_leader_is_killed",
    "test_the_nb_writer_follows_a_new_leader_when_the_nb_leader_is_killed_during_creates",
]
PORTS = (6641, 6642, 6643, 6644)


@pytest.fixture(scope="module")
def rig() -> Iterator[ClusterRig]:
    with cluster_rig(tls=True) as r:
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
    assert {a for a in _listeners(rig.chassis_ns) if not _loopback(a)} == set()
    # Each of those speaks SSL only: a client with a certificate of the cloud's CA gets an answer, on every member.
    for address in rig.addresses:
        for port, db in ((6641, "OVN_Northbound"), (6642, "OVN_Southbound")):
            got = _client(rig, cluster.connect(port, address, ssl=True), rig.ssl(2))
            assert got.returncode == 0 and db in got.stdout, got.stderr
    assert "ssl:" in (rig.root / "server.log").read_text().split("--ovn-sb ", 1)[1].split()[0]
    # The chassis joined with a token: its ovn-controller has the SSL list and its own certificate.
    chassis = rig.root / "c" / "ovn-chassis"
    vsctl = ["ovs-vsctl", f"--db=unix:{chassis / 'db.sock'}"]
    assert daemons.run(chassis, [*vsctl, "get", "Open_vSwitch", ".", "external_ids:ovn-remote"]).strip('"\n') == rig.sb
    assert "host.crt" in daemons.run(chassis, [*vsctl, "get-ssl"])


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
    # (OVS 3.1 says "on SSL channel", 3.5 "on SSL/TLS channel")
    nb_log = rig.rundir(1) / "ovnnb_db.log"
    wanted = ("certificate verify failed", "received JSON-RPC data on SSL", f"ssl:{UNDERLAY[CHASSIS]}:")
    rig.until("both refusals logged", lambda: all(text in nb_log.read_text() for text in wanted))


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
    refused = f"join refused: token {token.split('.')[0]} for host {name}"  # (logged from the server's log thread)
    rig.until("the refusal logged", lambda: refused in (rig.root / "server.log").read_text())


def _presented(rig: ClusterRig, address: str, port: int) -> int:
    """The serial of the certificate a new handshake with the member at `address` presents (host 2's sent)."""
    client = rig.ssl(2)
    assert client is not None
    with netns.entered(rig.chassis_ns):
        raw = socket.create_connection((address, port), timeout=10)
    with raw, tls.client_context(client.ca, client.cert, client.key).wrap_socket(raw, server_hostname=address) as s:
        der = s.getpeercert(binary_form=True)
    assert der is not None
    return cx.load_der_x509_certificate(der).serial_number


def test_a_member_renews_its_certificate_when_due_and_serves_the_new_one(rig: ClusterRig) -> None:
    """`cloudnet ovn join` renews its member certificate at 2/3 of its lifetime (over the current one, for its
    address again: never a client-only host certificate), and its databases present the new one without a restart;
    a renewal asking for another address is refused."""
    ca = x509.load_authority(rig.state(1) / "pki" / "ca.crt", rig.state(1) / "pki" / "ca.key")
    _ca, cert_file, key_file, _secret = joining.Joined.files(rig.state(3))
    with netns.entered(rig.ns(3)):
        context = tls.client_context(_ca, cert_file, key_file)
        with pytest.raises(joining.JoinError, match="not an address of another member"):
            joining.renew(rig.state(3), context, ovn_member=str(UNDERLAY[99]))
    current = x509.load_cert(cert_file)
    assert rig.stop_proc("join3") == 0
    x509.write_private(cert_file, x509.cert_pem(aged(current, ca, days_gone=300, days_left=65)))
    rig.start_join(3)
    renewed = rig.until("host 3's certificate renewed", lambda: (c := x509.load_cert(cert_file)).serial_number
                        != current.serial_number and c)  # fmt: skip
    assert x509.names_address(renewed, rig.addresses[2]) and rotation.seconds_to_renewal(renewed) > 200 * 86400
    rig.until("host 3's members back", rig.formed)
    rig.until("host 3's NB presents the renewed certificate",
              lambda: _presented(rig, rig.addresses[2], 6641) == renewed.serial_number)  # fmt: skip
    # Its ovn-northd, which loads its certificate once, is started again when the file is replaced.
    # (polled: the renewal above may have it restarting at this moment; seen as a KeyError under load)
    northd = rig.until("host 3's ovn-northd running", lambda: daemons.pids(rig.rundir(3)).get("ovn-northd"))
    x509.write_private(cert_file, cert_file.read_bytes())
    rig.until("host 3's ovn-northd restarted", lambda: daemons.pids(rig.rundir(3)).get("ovn-northd") not in
              (None, northd))  # fmt: skip


def test_a_join_members_front_refuses_a_revoked_hosts_certificate(rig: ClusterRig, tmp_path: Path) -> None:
    """Host 2 runs `cloudnet ovn join` (no API, no store): its SB's client port is a TLS front that reads the CA's
    CRL from host 1's API. A host's certificate is served there; once the host is removed (on host 1's API), the
    member closes the host's open connection within the CRL's refresh period and refuses a new one, each logged with
    the peer's address, subject and serial; the chassis' certificate is still served."""
    name = f"gone-{rig.suffix}"
    gone, chassis = rig.join_host(name, tmp_path), joined_ssl(rig.root / "c")
    serial = format(x509.load_cert(gone.cert).serial_number, "x")
    sb = cluster.connect(6642, rig.addresses[1], ssl=True)
    assert "OVN_Southbound" in _client(rig, sb, gone).stdout
    monitor = rig.monitor(sb, gone)
    try:
        with rig.api() as api:
            assert api.post(f"/hosts/{name}/remove", json={}).status_code == 200
        removed = time.monotonic()
        monitor.wait(timeout=crl.REFRESH + front.SWEEP + 10)  # (the CRL's refresh, the sweep, a fetch's time)
        took = time.monotonic() - removed
    finally:
        monitor.kill()
        monitor.wait()
    log = rig.root / "join2.log"
    peer = f"front refused SB client {UNDERLAY[CHASSIS]}:"
    assert any(peer in line and f"CN={name}, serial {serial}" in line and "closed its open connection" in line
               for line in log.read_text().splitlines()), (took, log.read_text()[-3000:])  # fmt: skip
    after = _client(rig, sb, gone)
    assert after.returncode != 0 and "OVN_Southbound" not in after.stdout, after.stdout
    assert any(peer in line and "revoked" in line and "(the CA's CRL)" in line and "connection closed" in line
               for line in log.read_text().splitlines()), log.read_text()[-3000:]  # fmt: skip
    good = _client(rig, sb, chassis)
    assert good.returncode == 0 and "OVN_Southbound" in good.stdout, good.stderr
    # No pssl: of ovsdb-server's own there: the member's client ports are the front's.
    assert "pssl:" not in daemons.run(rig.rundir(2), ["ovs-appctl", "-t", str(rig.rundir(2) / "ovnsb_db.ctl"),
                                                      "ovsdb-server/list-remotes"])  # fmt: skip


def test_a_join_members_front_killed_is_started_again(rig: ClusterRig) -> None:
    """Its `cloudnet ovn join` starts the member's TLS front again when it dies (without it no other host's client
    reaches the member's databases), with the CRL it kept."""
    pid = daemons.pids(rig.rundir(3))[daemons.FRONT]
    os.kill(pid, signal.SIGKILL)
    rig.until("host 3's front started again", lambda: daemons.pids(rig.rundir(3)).get(daemons.FRONT) not in
              (None, pid))  # fmt: skip
    assert (rig.rundir(3) / ovn_stack.CRL_FILE).exists()
    got = _client(rig, cluster.connect(6642, rig.addresses[2], ssl=True), joined_ssl(rig.root / "c"))
    assert got.returncode == 0 and "OVN_Southbound" in got.stdout, got.stderr


def test_a_host_certificate_of_an_agents_join_is_refused_as_a_members(tmp_path: Path) -> None:
    """A host that joined as a chassis (a client certificate naming its host only) is not made a member over SSL
    with it: its peers would refuse it as a server; it is told to join with a new token, and nothing starts."""
    ca = x509.new_authority()
    key = x509.new_key()
    cert = ca.host_cert("db2", x509.load_csr(x509.new_csr("db2", key).decode()))
    ca_file, cert_file, key_file, _secret = joining.Joined.files(tmp_path)
    for path, data in ((ca_file, ca.pem), (cert_file, x509.cert_pem(cert)), (key_file, x509.key_pem(key))):
        x509.write_private(path, data)
    joined = {"server": "https://192.0.2.1:9696", "host": "db2", "ovn_sb": None, "metadata_url": None}
    x509.write_private(joining.Joined.dir(tmp_path) / "joined.json", json.dumps(joined).encode())
    argv = [CLOUDNET, "ovn", "join", "--ovn-cluster", "192.0.2.1,192.0.2.2,192.0.2.3", "--ovn-listen", "192.0.2.2",
            "--state-dir", str(tmp_path)]  # fmt: skip
    got = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert got.returncode != 0 and "is not a cluster member's at 192.0.2.2" in got.stderr, got.stderr
    assert daemons.pids(tmp_path / "ovn") == {}
