"""The CA's revocation list (pki/crl.py) with real `cryptography` objects: one the cloud's CA signed verifies and
lists what was revoked; hostile ones are not taken: signed by another key (even under the CA's own name), stale, or
not a CRL. A reader without any API server keeps the last good CRL (also past its nextUpdate, and across a restart
from the kept file), and refuses every client while it has none."""

from __future__ import annotations

import datetime
import logging
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography import x509 as cx
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.serialization import Encoding

from cloudnet.pki import crl, tls, x509


@pytest.fixture
def now() -> datetime.datetime:
    """The test's own now (not the module's import: a worker may run it many minutes after collecting it)."""
    return datetime.datetime.now(datetime.UTC)


def _host_der(ca: x509.Authority, host: str) -> tuple[bytes, int]:
    key = x509.new_key()
    cert = ca.host_cert(host, cx.load_pem_x509_csr(x509.new_csr(host, key)))
    return cert.public_bytes(Encoding.DER), cert.serial_number


def test_a_crl_of_the_ca_verifies_and_lists_the_revoked_serials(now: datetime.datetime) -> None:
    ca = x509.new_authority()
    revoked = [(0x1234, now - datetime.timedelta(minutes=3)), (0xABCDEF, now)]
    got = crl.verify(crl.build(ca, revoked, now), ca.cert)
    assert {e.serial_number for e in got} == {0x1234, 0xABCDEF}
    assert got.next_update_utc is not None and got.next_update_utc - got.last_update_utc == datetime.timedelta(
        seconds=crl.VALIDITY)  # fmt: skip
    assert crl.verify(crl.build(ca, [], now), ca.cert).get_revoked_certificate_by_serial_number(0x1234) is None


def test_a_crl_signed_by_another_key_is_not_taken_even_under_the_cas_name(now: datetime.datetime) -> None:
    ca, other = x509.new_authority(), x509.new_authority()
    with pytest.raises(crl.CrlError, match="not the cloud's CA"):
        crl.verify(crl.build(other, [], now), ca.cert)
    # Another key that signs a list under the cloud's CA's own name: the signature check is what refuses it.
    impostor = x509.Authority(ca.cert, x509.new_key())
    with pytest.raises(crl.CrlError, match="signature is not the cloud's CA's"):
        crl.verify(crl.build(impostor, [], now), ca.cert)
    forged = (cx.CertificateRevocationListBuilder().issuer_name(ca.cert.subject).last_update(now)
              .next_update(now + datetime.timedelta(minutes=1)).sign(other.key, hashes.SHA256()))  # fmt: skip
    with pytest.raises(crl.CrlError, match="signature"):
        crl.verify(forged.public_bytes(Encoding.DER), ca.cert)
    with pytest.raises(crl.CrlError, match="not a DER CRL"):
        crl.verify(b"\x30\x03garbage", ca.cert)


def test_a_stale_crl_or_one_from_the_future_is_not_taken_as_current(now: datetime.datetime) -> None:
    ca = x509.new_authority()
    old = crl.build(ca, [], now - datetime.timedelta(minutes=10))
    with pytest.raises(crl.CrlError, match="stale"):
        crl.verify(old, ca.cert)
    assert crl.verify(old, ca.cert, current=False) is not None  # (what a restart reads from its kept file)
    with pytest.raises(crl.CrlError, match="ahead of this host's clock"):
        crl.verify(crl.build(ca, [], now + datetime.timedelta(minutes=10)), ca.cert)


@pytest.fixture
def nobody() -> Iterator[str]:
    """An https URL on a loopback port nothing listens on (bound, never listening, for the test's duration)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"https://127.0.0.1:{sock.getsockname()[1]}"


def test_with_no_server_answering_the_last_good_crl_is_kept_and_with_none_every_client_is_refused(
    tmp_path: Path, nobody: str, now: datetime.datetime
) -> None:
    ca = x509.new_authority()
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(ca.pem)
    good, _ = _host_der(ca, "good")
    bad, bad_serial = _host_der(ca, "bad")
    context = tls.client_context(ca_file)
    reader = crl.RevocationList([nobody], context, ca_file, tmp_path / "kept.crl", timeout=2)
    reader.start()
    try:
        assert reader.held is None and not reader.fetch()
        assert reader(good) == "no revocation list from the API servers yet"
    finally:
        reader.stop()
    # A restart finds the kept CRL, long past its nextUpdate, with no server up: it keeps enforcing it.
    stale = crl.build(ca, [(bad_serial, now)], now - datetime.timedelta(hours=1))
    (tmp_path / "kept.crl").write_bytes(stale)
    reader = crl.RevocationList([nobody], context, ca_file, tmp_path / "kept.crl", timeout=2)
    reader.start()
    try:
        assert reader.held is not None and not reader.fetch()
        assert reader(good) is None
        assert "was revoked" in (reader(bad) or "")
    finally:
        reader.stop()
    # A kept file that another key signed is not taken.
    (tmp_path / "kept.crl").write_bytes(crl.build(x509.Authority(ca.cert, x509.new_key()), [], now))
    reader = crl.RevocationList([nobody], context, ca_file, tmp_path / "kept.crl", timeout=2)
    reader.start()
    try:
        assert reader.held is None and reader(good) is not None
    finally:
        reader.stop()


@pytest.fixture
def impostor(tmp_path: Path, now: datetime.datetime) -> Iterator[tuple[x509.Authority, Path, str]]:
    """An HTTPS server on loopback with a certificate the cloud's CA signed (a member's, say), serving a CRL under
    the CA's name signed by a key of its own that lists nothing: (the CA, its certificate's file, the URL)."""
    ca, key = x509.new_authority(), x509.new_key()
    files = tls.ServerFiles(tmp_path / "srv.crt", tmp_path / "srv.key", tmp_path / "ca.crt")
    x509.write_private(files.ca, ca.pem)
    x509.write_private(files.cert, x509.cert_pem(ca.server_cert(["127.0.0.1"], key)))
    x509.write_private(files.key, x509.key_pem(key))
    forged = crl.build(x509.Authority(ca.cert, x509.new_key()), [], now)

    class Forger(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # (http.server calls it by that name)
            self.send_response(200)
            self.send_header("Content-Type", crl.MEDIA_TYPE)
            self.send_header("Content-Length", str(len(forged)))
            self.end_headers()
            self.wfile.write(forged)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Forger)
    httpd.socket = tls.server_context(files, ssl.CERT_NONE).wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield ca, files.ca, f"https://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def test_a_crl_another_key_signed_is_not_taken_from_a_server_the_ca_certified(
    tmp_path: Path,
    impostor: tuple[x509.Authority, Path, str],
    caplog: pytest.LogCaptureFixture,
    now: datetime.datetime,
) -> None:
    ca, ca_file, url = impostor
    bad, bad_serial = _host_der(ca, "bad")
    (tmp_path / "kept.crl").write_bytes(crl.build(ca, [(bad_serial, now)], now))
    reader = crl.RevocationList([url], tls.client_context(ca_file), ca_file, tmp_path / "kept.crl", timeout=5)
    with caplog.at_level(logging.WARNING, logger="cloudnet.pki.crl"):
        reader.start()
        try:
            assert not reader.fetch()
            assert "was revoked" in (reader(bad) or "")  # (the good list kept: the forged one would let it in)
        finally:
            reader.stop()
    assert f"the revocation list {url} served is not taken: its signature is not the cloud's CA's" in caplog.text
