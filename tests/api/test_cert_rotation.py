"""Certificate rotation without downtime, against a real `cloudnet serve --tls`: the server's certificate replaced on
disk (or re-read on SIGHUP) is presented by new handshakes of the API and the metadata listener while a connection
made before goes on; a joined host renews its certificate over its current one, and a revoked host cannot."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from cryptography import x509 as cx

from cloudnet.agent import join
from cloudnet.agent.run import renew_when_due
from cloudnet.config import AgentConfig
from cloudnet.pki import join_token, rotation, tls, x509
from tests.support.process import refused_port
from tests.support.tls import ADMIN, TlsServer, aged, tls_serve


def _write_ca(root: Path) -> tuple[x509.Authority, Path, Path]:
    ca = x509.new_authority()
    cert, key = root / "ca.crt", root / "ca.key"
    x509.write_private(cert, ca.pem)
    x509.write_private(key, x509.key_pem(ca.key))
    return ca, cert, key


def _server_pair(ca: x509.Authority) -> tuple[bytes, bytes, int]:
    key = x509.new_key()
    cert = ca.server_cert(["127.0.0.1", "localhost"], key)
    return x509.cert_pem(cert), x509.key_pem(key), cert.serial_number


@pytest.fixture
def given(tmp_path: Path) -> Iterator[tuple[TlsServer, x509.Authority, Path, Path]]:
    """`cloudnet serve --tls` with a CA and a server certificate given on the command line (their maker renews)."""
    ca, ca_cert, ca_key = _write_ca(tmp_path)
    cert_pem, key_pem, _serial = _server_pair(ca)
    cert, key = tmp_path / "server.crt", tmp_path / "server.key"
    x509.write_private(key, key_pem)
    x509.write_private(cert, cert_pem)
    with tls_serve(tmp_path / "state", "--ca-cert", str(ca_cert), "--ca-key", str(ca_key), "--tls-cert", str(cert),
                   "--tls-key", str(key), ca=ca_cert) as server:  # fmt: skip
        yield server, ca, cert, key


def _port(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


def _metadata_port(server: TlsServer, state: Path) -> int:
    server.join("rot-host", state)
    saved = join.load(state)
    assert saved is not None and saved.metadata_url is not None
    return _port(saved.metadata_url)


def presented(port: int, context: ssl.SSLContext) -> int:
    """The serial of the certificate a new handshake with 127.0.0.1:port presents."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as s:  # fmt: skip
        der = s.getpeercert(binary_form=True)
    assert der is not None
    return cx.load_der_x509_certificate(der).serial_number


def until_presented(port: int, context: ssl.SSLContext, serial: int, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while (got := presented(port, context)) != serial:
        assert time.monotonic() < deadline, f"still {got:x}, not {serial:x}"
        time.sleep(0.05)


def _get(conn: http.client.HTTPSConnection, path: str, headers: dict[str, str]) -> int:
    conn.request("GET", path, headers=headers)
    r = conn.getresponse()
    r.read()
    return r.status


def _kept(conn: http.client.HTTPSConnection) -> tuple[ssl.SSLSocket, int]:
    """The connection's socket and the serial its handshake was made with."""
    sock = conn.sock
    assert isinstance(sock, ssl.SSLSocket)
    der = sock.getpeercert(binary_form=True)
    assert der is not None
    return sock, cx.load_der_x509_certificate(der).serial_number


def test_a_replaced_server_certificate_is_presented_by_new_handshakes(
    given: tuple[TlsServer, x509.Authority, Path, Path], tmp_path: Path
) -> None:
    server, ca, cert, key = given
    context = tls.client_context(server.ca)
    api, metadata = _port(server.url), _metadata_port(server, tmp_path / "host")
    old = x509.load_cert(cert).serial_number
    conn = http.client.HTTPSConnection("127.0.0.1", api, context=context, timeout=10)
    assert _get(conn, "/v2.0/networks", {"X-Auth-Token": ADMIN}) == 200
    before = _kept(conn)
    assert before[1] == old and presented(metadata, context) == old

    cert_pem, key_pem, new = _server_pair(ca)
    x509.write_private(key, key_pem)  # (each file replaced whole, as a renewal tool writes them)
    x509.write_private(cert, cert_pem)
    until_presented(api, context, new)
    until_presented(metadata, context, new)  # the metadata listener's context too
    server.until_logged(f"new handshakes present serial {new:x}")
    # The connection made before goes on, on the same socket and the certificate it was made with.
    assert _get(conn, "/v2.0/networks", {"X-Auth-Token": ADMIN}) == 200
    assert _kept(conn) == before
    conn.close()


def test_sighup_rereads_the_certificate(given: tuple[TlsServer, x509.Authority, Path, Path]) -> None:
    server, ca, cert, key = given
    context = tls.client_context(server.ca)
    api = _port(server.url)
    size = cert.stat().st_size
    while True:  # a pair of the same sizes, written in place with the old times: no change the watch could see
        cert_pem, key_pem, new = _server_pair(ca)
        if len(cert_pem) == size and len(key_pem) == key.stat().st_size:
            break
    for path, data in ((key, key_pem), (cert, cert_pem)):
        st = path.stat()
        with path.open("r+b") as f:
            f.write(data)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    server.proc.send_signal(signal.SIGHUP)
    until_presented(api, context, new)
    assert server.proc.poll() is None  # SIGHUP re-reads; it does not stop the server


def test_a_half_written_pair_is_not_taken(given: tuple[TlsServer, x509.Authority, Path, Path]) -> None:
    server, _ca, cert, key = given
    context = tls.client_context(server.ca)
    old = x509.load_cert(cert).serial_number
    x509.write_private(key, x509.key_pem(x509.new_key()))  # a key without its certificate (yet)
    server.until_logged("not reloaded, keeping the one in use")
    assert presented(_port(server.url), context) == old  # still served, with the certificate it has


class ClientCertSeen:
    """A TLS server of the test's own, requiring client certificates of `ca`: the serial each handshake presented."""

    def __init__(self, ca: Path, server_cert: tuple[Path, Path]) -> None:
        self.context = tls.server_context(tls.ServerFiles(server_cert[0], server_cert[1], ca), ssl.CERT_REQUIRED)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.serials: list[int] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _addr = self.sock.accept()
            except OSError:
                return
            try:
                with self.context.wrap_socket(conn, server_side=True) as s:
                    der = s.getpeercert(binary_form=True)
                    if der:
                        self.serials.append(cx.load_der_x509_certificate(der).serial_number)
                    s.sendall(b"ok")
            except (OSError, ssl.SSLError):
                pass

    def handshake(self, context: ssl.SSLContext) -> int:
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as raw, \
                context.wrap_socket(raw, server_hostname="127.0.0.1") as s:  # fmt: skip
            assert s.recv(2) == b"ok"
        return self.serials[-1]


def test_a_host_renews_over_its_certificate_and_a_revoked_one_cannot(
    given: tuple[TlsServer, x509.Authority, Path, Path], tmp_path: Path
) -> None:
    server, _ca, server_cert, server_key = given
    state = tmp_path / "host"
    server.join("renewer", state)
    ca, crt, key, _secret = join.Joined.files(state)
    context = tls.client_context(ca, crt, key)  # the agent's live context
    old = x509.load_cert(crt).serial_number
    conn = http.client.HTTPSConnection("127.0.0.1", _port(server.url), context=context, timeout=10)
    assert _get(conn, "/v2.0/hosts/renewer/state", {}) == 200  # its agent's call, over the certificate
    sock = conn.sock
    seen = ClientCertSeen(server.ca, (server_cert, server_key))
    assert seen.handshake(context) == old

    renewed = join.renew(state, context)
    assert renewed.serial_number != old and x509.load_cert(crt).serial_number == renewed.serial_number
    assert x509.load_key(key).public_key() == renewed.public_key()
    assert crt.stat().st_mode & 0o777 == 0o600 and key.stat().st_mode & 0o777 == 0o600
    server.until_logged(f"host renewer renewed its certificate {old:x}: now {renewed.serial_number:x}")
    assert seen.handshake(context) == renewed.serial_number  # the live context presents the new one
    assert _get(conn, "/v2.0/hosts/renewer/state", {}) == 200 and conn.sock is sock  # the old connection goes on
    conn.close()
    with server.client(None, (crt, key)) as fresh:  # a new connection over the new certificate is accepted
        assert fresh.get("/hosts/renewer/state").status_code == 200

    # Hostile: another host's renewal, a request naming another host, no certificate (an admin's token), revoked.
    other_key = x509.new_key()
    with server.client(None, (crt, key)) as c:
        r = c.post("/hosts/someone/certificates", json={"certificate": {"csr": x509.new_csr("someone", other_key)
                                                                               .decode()}})  # fmt: skip
        assert r.status_code == 403 and "may not act for host someone" in r.text, r.text
        r = c.post("/hosts/renewer/certificates", json={"certificate": {"csr": x509.new_csr("someone", other_key)
                                                                               .decode()}})  # fmt: skip
        assert r.status_code == 403 and "names ['someone'], not renewer" in r.text, r.text
    with server.client() as admin:
        path = join_token.RENEW_PATH.format(name="renewer").removeprefix("/v2.0")
        r = admin.post(path, json={"certificate": {"csr": x509.new_csr("renewer", other_key).decode()}})
        assert r.status_code == 403 and "HostCertificateRequired" in r.text, r.text
        assert admin.post("/hosts/renewer/remove").status_code == 200
    with pytest.raises(join.JoinError, match=r"refused the renewal: .*revoked"):
        join.renew(state, context)
    assert x509.load_cert(crt).serial_number == renewed.serial_number  # nothing written
    server.until_logged("over host renewer's certificate")


def test_a_host_renews_through_another_server_when_the_one_it_joined_is_gone(
    given: tuple[TlsServer, x509.Authority, Path, Path], tmp_path: Path
) -> None:
    """Any API server renews (they share the CA and the database): the agent's list is tried after the one it
    joined; a refusal from one is not taken to the next."""
    server, _ca, _cert, _key = given
    state = tmp_path / "host"
    server.join("wanderer", state)
    ca, crt, key, _secret = join.Joined.files(state)
    context = tls.client_context(ca, crt, key)
    old = x509.load_cert(crt).serial_number
    saved = join.Joined.dir(state) / "joined.json"
    with refused_port() as port:
        gone = f"https://127.0.0.1:{port}"
        saved.write_text(saved.read_text().replace(server.url, gone))  # the server it joined is gone for good
        with pytest.raises(join.JoinError, match=r"cannot reach https://127\.0\.0\.1:[0-9]+ to renew"):
            join.renew(state, context)  # no other server known
        assert x509.load_cert(crt).serial_number == old
        renewed = join.renew(state, context, [gone, server.url])
        assert renewed.serial_number != old and x509.load_cert(crt).serial_number == renewed.serial_number
        server.until_logged(f"host wanderer renewed its certificate {old:x}: now {renewed.serial_number:x}")
        with server.client() as admin:
            assert admin.post("/hosts/wanderer/remove").status_code == 200
        with pytest.raises(join.JoinError, match=r"refused the renewal: .*revoked"):
            join.renew(state, context, [gone, server.url])  # refused by the one that answered: final


def test_the_agent_renews_at_two_thirds_of_the_lifetime(
    given: tuple[TlsServer, x509.Authority, Path, Path], tmp_path: Path
) -> None:
    server, ca, _cert, _key = given
    state = tmp_path / "host"
    server.join("ager", state)
    ca_file, crt, key, _secret = join.Joined.files(state)
    fresh = x509.load_cert(crt)
    assert rotation.seconds_to_renewal(fresh) > 200 * 86400  # a year's certificate: due in 8 months
    old = aged(fresh, ca, days_gone=300, days_left=65)  # 2/3 of its lifetime gone: due
    assert rotation.seconds_to_renewal(old) < 0 < rotation.seconds_to_renewal(aged(fresh, ca, 200, 165))
    x509.write_private(crt, x509.cert_pem(old))
    config = AgentConfig(host="ager", state_dir=state, ca_file=ca_file, cert_file=crt, key_file=key)
    context = tls.client_context(ca_file, crt, key)
    stop = threading.Event()
    renewer = threading.Thread(target=renew_when_due, args=(state, [config.server], context, stop), daemon=True)
    renewer.start()
    try:
        deadline = time.monotonic() + 30
        while x509.load_cert(crt).serial_number == fresh.serial_number:
            assert renewer.is_alive() and time.monotonic() < deadline, server.log()[-2000:]
            time.sleep(0.05)
        renewed = x509.load_cert(crt)
        assert rotation.seconds_to_renewal(renewed) > 200 * 86400  # a new year's: nothing more until then
    finally:
        stop.set()
        renewer.join(timeout=10)
    assert not renewer.is_alive()
