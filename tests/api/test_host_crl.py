"""The CA's revocation list (GET /v2.0/host-join/crl) of a real `cloudnet serve --tls`, read with real clients: over a
host certificate only (not anonymously, not with an admin's token alone, not in clear, not with a revoked host's
certificate); a DER CRL the CA signed, listing exactly the revoked host certificates, signed again when one is revoked
and not per request. A `cloudnet ovn join` member's reader (pki/crl.py) takes it, and keeps it when the server goes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.serialization import Encoding

from cloudnet.pki import crl, join_token, tls, x509
from tests.support.process import serve
from tests.support.tls import TlsServer, tls_serve

B, C = "host-b", "host-c"
PATH = join_token.CRL_PATH.removeprefix("/v2.0")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[TlsServer]:
    with tls_serve(tmp_path / "server") as s:
        yield s


def _serials(server: TlsServer, cert: tuple[Path, Path]) -> tuple[set[int], bytes]:
    """The serials the CRL read over `cert` lists (verified against the CA), and its DER."""
    with server.client(None, cert) as host:
        r = host.get(PATH)
    assert r.status_code == 200 and r.headers["content-type"] == crl.MEDIA_TYPE, r.text
    got = crl.verify(r.content, x509.load_cert(server.ca))
    return {entry.serial_number for entry in got}, r.content


def _serial(cert: tuple[Path, Path]) -> int:
    return int(x509.load_cert(cert[0]).serial_number)


def test_a_host_certificate_reads_the_crl_and_it_lists_exactly_the_revoked_ones(
    server: TlsServer, tmp_path: Path
) -> None:
    b, c = server.join(B, tmp_path / "b"), server.join(C, tmp_path / "c")
    listed, first = _serials(server, c)
    assert listed == set()
    assert _serials(server, c)[1] == first  # (ECDSA signatures differ each time: the same bytes were not signed again)
    b2 = server.join(B, tmp_path / "b2")  # (a host with two certificates: both revoked with it)
    with server.client() as admin:
        assert admin.post(f"/hosts/{B}/remove", json={}).status_code == 200
    listed, _ = _serials(server, c)
    assert listed == {_serial(b), _serial(b2)}
    # The revoked host reads it no more.
    with server.client(None, b) as revoked:
        r = revoked.get(PATH)
    assert r.status_code == 403 and "revoked" in r.json()["NeutronError"]["message"], r.text


def test_the_crl_is_not_read_anonymously_with_a_token_alone_or_in_clear(server: TlsServer, tmp_path: Path) -> None:
    with server.client(None) as anonymous:
        assert anonymous.get(PATH).status_code == 401
    with server.client() as admin:  # (an admin's token, no host certificate)
        r = admin.get(PATH)
    assert r.status_code == 403 and "host certificate" in r.json()["NeutronError"]["message"], r.text
    state = tmp_path / "plain"
    state.mkdir(mode=0o700)
    (state / "tokens.json").write_text(json.dumps({"tokens": {"t": {"project_id": "admin", "role": "admin"}}}))
    with serve(state, "--metadata-listen", "off") as (_proc, url):
        assert httpx.get(url + join_token.CRL_PATH, timeout=10).status_code == 401
        r = httpx.get(url + join_token.CRL_PATH, headers={"X-Auth-Token": "t"}, timeout=10)
        assert r.status_code == 403 and r.headers["content-type"] != crl.MEDIA_TYPE, r.text


def test_a_members_reader_takes_the_crl_and_keeps_it_when_the_server_goes(server: TlsServer, tmp_path: Path) -> None:
    b, c = server.join(B, tmp_path / "b"), server.join(C, tmp_path / "c")
    with server.client() as admin:
        assert admin.post(f"/hosts/{B}/remove", json={}).status_code == 200
    context = tls.client_context(server.ca, *c)
    reader = crl.RevocationList([server.url], context, server.ca, tmp_path / "kept.crl")
    reader.start()
    try:
        assert reader.held is not None and reader.fetch()
        der_b = x509.load_cert(b[0]).public_bytes(Encoding.DER)
        der_c = x509.load_cert(c[0]).public_bytes(Encoding.DER)
        assert f"certificate {_serial(b):x} of host {B} was revoked" in (reader(der_b) or "")
        assert reader(der_c) is None
        assert (tmp_path / "kept.crl").read_bytes() == reader.held.der
        server.proc.terminate()
        server.proc.wait(timeout=20)
        assert not reader.fetch()  # (no server answers: the last good list stays in use)
        assert reader(der_b) is not None and reader(der_c) is None
    finally:
        reader.stop()
