"""OVN's databases behind the TLS front (ovn/front.py, as `serve|up --tls --ovn-listen` runs it): real NB/SB
ovsdb-servers on their unix sockets, the front on loopback ports of the test's own, real `ovsdb-client`s with
certificates of the cloud's CA recorded in a real store. A host's certificate is served; once the host is removed
(`revoke_host`, what `cloudnet host remove` calls) its open connection is closed and a new one refused, logged with
its address, subject and serial. A certificate of another CA, one of the cloud's CA the store never recorded, a
client without a certificate and a plain TCP client get nothing. A renewed certificate of the databases is
presented to new handshakes without a restart, and a connection made before goes on."""

from __future__ import annotations

import json
import logging
import shutil
import socket
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509 as cx

from cloudnet import ovn_stack
from cloudnet.ovn import daemons, front
from cloudnet.pki import x509
from cloudnet.services.context import Context
from cloudnet.services.hosts import host_join
from cloudnet.store.db import Store
from tests.support.mdata_raw import wait_for
from tests.support.process import free_port
from tests.support.tls import foreign_cert

LOOPBACK = "127.0.0.1"


@dataclass
class Site:
    root: Path
    store: Store
    ca: x509.Authority
    ssl: daemons.Ssl  # the databases' (the front presents it)
    ports: tuple[int, int]  # NB's, SB's front

    @property
    def sb(self) -> str:
        return f"ssl:{LOOPBACK}:{self.ports[1]}"

    def host(self, name: str, record: bool = True) -> list[str]:
        """OVS's SSL options with a new certificate of the cloud's CA for host `name` (recorded as a join does,
        unless not `record`)."""
        key = x509.new_key()
        csr = cx.load_pem_x509_csr(x509.new_csr(name, key))
        cert = host_join.sign_own(self.store, self.ca, name, csr) if record else self.ca.host_cert(name, csr)
        paths = self.root / f"{name}.crt", self.root / f"{name}.key"
        x509.write_private(paths[0], x509.cert_pem(cert))
        x509.write_private(paths[1], x509.key_pem(key))
        return [f"--private-key={paths[1]}", f"--certificate={paths[0]}", f"--ca-cert={self.ssl.ca}"]

    def client(self, ssl_options: list[str], *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ovsdb-client", "--timeout=5", *ssl_options, *args], capture_output=True, text=True,
                              timeout=30)  # fmt: skip


def _databases_cert(ca: x509.Authority, ssl_files: daemons.Ssl, store: Store) -> int:
    """A certificate of the databases (as ovn_stack makes it: recorded), written where `ssl_files` says; its serial."""
    key = x509.new_key()
    cert = ca.server_cert([LOOPBACK, "ovsdb"], key, client=True)
    host_join.record_own(store, cert)
    x509.write_private(ssl_files.cert, x509.cert_pem(cert))
    x509.write_private(ssl_files.key, x509.key_pem(key))
    return int(cert.serial_number)


@pytest.fixture
def site(tmp_path: Path, sqlite_template: Path) -> Iterator[Site]:
    shutil.copyfile(sqlite_template, tmp_path / "cloudnet.db")
    store = Store(f"sqlite:///{tmp_path / 'cloudnet.db'}")
    ca = x509.new_authority()
    (tmp_path / "ca.crt").write_bytes(ca.pem)
    ssl_files = daemons.Ssl(tmp_path / "ovsdb.key", tmp_path / "ovsdb.crt", tmp_path / "ca.crt")
    _databases_cert(ca, ssl_files, store)
    rundir = tmp_path / "ovn"
    fronted = None
    try:
        daemons.start_central(rundir)
        ports = (free_port(), free_port())
        fronted = ovn_stack.start_front(store, ssl_files, rundir, LOOPBACK, ports)
        yield Site(tmp_path, store, ca, ssl_files, ports)
    finally:
        if fronted is not None:
            fronted.stop()
        daemons.stop(rundir)
        store.dispose()


def _refusals(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.name == "cloudnet.ovn.front")


def test_a_hosts_connection_is_closed_and_refused_once_the_host_is_removed(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cloudnet.ovn.front")
    host = f"h-{site.root.name[-20:]}"
    mine = site.host(host)
    got = site.client(mine, "list-dbs", site.sb)
    assert got.returncode == 0 and "OVN_Southbound" in got.stdout.split(), got.stderr
    nb = site.client(mine, "list-dbs", f"ssl:{LOOPBACK}:{site.ports[0]}")
    assert "OVN_Northbound" in nb.stdout.split(), nb.stderr
    # An open connection, as ovn-controller's: it goes on until the server closes it.
    monitor = subprocess.Popen(["ovsdb-client", *mine, "monitor", site.sb, "OVN_Southbound", "SB_Global"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert monitor.stdout is not None
        assert monitor.stdout.readline(), "no initial dump"
        assert monitor.poll() is None
        assert host_join.revoke_host(site.store, Context.admin(), host) == 1
        # (within the sweep: the revocation here refreshes the list and wakes the front at once)
        wait_for(lambda: monitor.poll() is not None, timeout=5, what="the removed host's open connection closed")
    finally:
        monitor.kill()
        monitor.wait()
    again = site.client(mine, "list-dbs", site.sb)
    assert again.returncode != 0 and "OVN_Southbound" not in again.stdout, again.stdout
    serial = x509.load_cert(site.root / f"{host}.crt").serial_number
    logged = _refusals(caplog)
    assert f"CN={host}, serial {serial:x}" in logged and "revoked" in logged, logged
    assert "closed its open connection" in logged and "connection closed" in logged, logged


def test_another_cas_an_unrecorded_no_certificate_and_plain_tcp_get_nothing(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cloudnet.ovn.front")
    cert, key = foreign_cert(site.root, "stranger")
    foreign = [f"--private-key={key}", f"--certificate={cert}", f"--ca-cert={site.ssl.ca}"]
    unrecorded = site.host("forged", record=False)  # (the CA signed it, the store never saw it)
    for options in (foreign, unrecorded):
        got = site.client(options, "list-dbs", site.sb)
        assert got.returncode != 0 and "OVN_Southbound" not in got.stdout, (options, got.stdout)
    logged = _refusals(caplog)
    assert "TLS handshake failed" in logged, logged
    assert "CN=forged" in logged and "was not issued to a host by this cloud" in logged, logged
    # No certificate: the handshake fails; plain TCP (a JSON-RPC list_dbs): no answer, the connection closed.
    assert b"OVN_Southbound" not in _list_dbs(site, ssl.create_default_context(cafile=site.ssl.ca))
    assert b"OVN_Southbound" not in _list_dbs(site, None)


def test_connections_that_never_finish_a_handshake_are_bounded(site: Site, caplog: pytest.LogCaptureFixture) -> None:
    """Hostile: a peer opening connections and never sending a hello holds at most MAX_PENDING of them (each until
    the handshake times out); one more is closed at once and logged, and a host is served again once they go."""
    caplog.set_level(logging.INFO, logger="cloudnet.ovn.front")
    idle = [socket.create_connection((LOOPBACK, site.ports[1]), timeout=5) for _ in range(front.MAX_PENDING)]
    try:
        with socket.create_connection((LOOPBACK, site.ports[1]), timeout=5) as extra:
            assert extra.recv(1) == b""  # (closed at once: not left waiting for its handshake)
        assert "too many connections in their TLS handshake" in _refusals(caplog)
    finally:
        for sock in idle:
            sock.close()
    mine = site.host(f"h-{site.root.name[-20:]}")
    wait_for(lambda: site.client(mine, "list-dbs", site.sb).returncode == 0, what="a host served again")


def _list_dbs(site: Site, context: ssl.SSLContext | None) -> bytes:
    """What a JSON-RPC list_dbs to the SB front gets back (over TLS with `context`, else plain TCP)."""
    request = json.dumps({"method": "list_dbs", "params": [], "id": 0}).encode()
    try:
        with socket.create_connection((LOOPBACK, site.ports[1]), timeout=5) as raw:
            if context is None:
                raw.sendall(request)
                return raw.recv(4096)
            context.check_hostname = False
            with context.wrap_socket(raw) as tls_sock:
                tls_sock.sendall(request)
                return tls_sock.recv(4096)
    except (ssl.SSLError, ConnectionError):
        return b""


def _presented_serial(site: Site) -> int:
    context = ssl.create_default_context(cafile=site.ssl.ca)
    context.check_hostname = False
    mine = site.root / "r.crt", site.root / "r.key"
    context.load_cert_chain(*mine)
    with socket.create_connection((LOOPBACK, site.ports[1]), timeout=5) as raw, context.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return int(cx.load_der_x509_certificate(der).serial_number)


def test_a_renewed_databases_certificate_is_presented_without_a_restart(site: Site) -> None:
    mine = site.host("r")
    monitor = subprocess.Popen(["ovsdb-client", *mine, "monitor", site.sb, "OVN_Southbound", "SB_Global"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert monitor.stdout is not None and monitor.stdout.readline()
        before = _presented_serial(site)
        renewed = _databases_cert(site.ca, site.ssl, site.store)
        assert renewed != before
        wait_for(lambda: _presented_serial(site) == renewed, what="the renewed certificate presented")
        assert monitor.poll() is None  # (the connection made before goes on)
    finally:
        monitor.kill()
        monitor.wait()
