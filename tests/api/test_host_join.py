"""Join tokens and host certificates against a real `cloudnet serve --tls` (uvicorn over HTTPS), with real clients
(httpx, openssl s_client): a host joins with a token and acts for itself; and the hostile set, each refused with a
clear error and logged: no certificate, another CA's certificate, a revoked one, a token used twice, an expired one,
one for another name or another CA, a host's certificate acting for another host (whatever token comes with it)."""

from __future__ import annotations

import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cloudnet.agent import join
from cloudnet.pki import join_token, x509
from tests.support.process import CLOUDNET, serve
from tests.support.tls import TlsServer, foreign_cert, tls_serve

A, B = "host-a", "host-b"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[TlsServer]:
    with tls_serve(tmp_path / "server") as s:
        yield s


def _refused(server: TlsServer, token: str, host: str, state: Path, why: str) -> None:
    with pytest.raises(join.JoinError, match=why):
        join.join(server.url, token, host, state)
    assert not join.Joined.files(state)[1].exists()  # no certificate written
    server.until_logged("join refused")


def _instance_on(server: TlsServer, host: str) -> str:
    with server.client() as c:
        assert c.put(f"/hosts/{host}", json={"host": {}}).status_code == 200  # (registered, as its agent would)
        net = c.post("/networks", json={"network": {"name": f"n-{host}"}}).json()["network"]
        c.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.9.0.0/24"}}).raise_for_status()
        r = c.post("/instances", json={"instance": {"name": f"i-{host}", "host": host,
                                                     "nets": [{"network": net["id"]}]}})  # fmt: skip
        assert r.status_code == 201, r.text
        return str(r.json()["instance"]["id"])


def test_a_joined_host_acts_for_itself_only(server: TlsServer, tmp_path: Path) -> None:
    cert = server.join(B, tmp_path / "b")
    ca, crt, key, secret = join.Joined.files(tmp_path / "b")
    for path in (ca, crt, key, secret, join.Joined.dir(tmp_path / "b") / "joined.json"):
        assert path.stat().st_mode & 0o777 == 0o600, path
    assert x509.load_cert(crt).subject.rfc4514_string() == f"CN={B}"
    assert secret.read_text().strip() == (server.state / "metadata_secret").read_text().strip()
    saved = join.load(tmp_path / "b")
    assert saved is not None and saved.host == B and saved.server == server.url

    own, other = _instance_on(server, B), _instance_on(server, A)
    with server.client(None, cert) as b:
        assert b.put(f"/hosts/{B}", json={"host": {"report": {}}}).status_code == 200
        assert b.get(f"/hosts/{B}/state").status_code == 200
        assert b.get("/events", params={"since": 0, "timeout": 0}).status_code == 200
        assert b.get(f"/instances/{own}/metadata").status_code == 200
        # B's certificate acting for A: refused, logged.
        for method, path in (("PUT", f"/hosts/{A}"), ("GET", f"/hosts/{A}/state"), ("PUT", f"/hosts/{A}/ports"),
                             ("GET", f"/instances/{other}/metadata")):  # fmt: skip
            r = b.request(method, path, json={"host": {}} if method == "PUT" else None)
            assert r.status_code == 403, (method, path, r.text)
            assert r.json()["NeutronError"]["type"] == "HostCertificateRefused"
        # A certificate alone is no admin: nothing but its agent's calls, even on its own host.
        assert b.get("/networks").status_code == 403
        assert b.post(f"/hosts/{B}/join-tokens", json={"join_token": {}}).status_code == 403
        assert b.post(f"/hosts/{B}/remove", json={}).status_code == 403
        assert b.delete(f"/hosts/{B}").status_code == 403
    server.until_logged(f"over host {B}'s certificate: host {B}'s certificate may not act for host {A}")
    server.until_logged(f"host {B} may not act for instance {other}")
    # Whatever token comes with it: an admin's token with B's certificate still acts for B only.
    with server.client(cert=cert) as b_admin:
        assert b_admin.put(f"/hosts/{A}", json={"host": {}}).status_code == 403
        assert b_admin.get("/networks").status_code == 200  # (the token's own rights elsewhere)


def test_no_certificate_no_token_is_refused(server: TlsServer) -> None:
    with server.client(None) as anonymous:
        assert anonymous.get(f"/hosts/{B}/state").status_code == 401
    # Plain HTTP to the TLS listener gets no answer.
    with pytest.raises(httpx.TransportError):
        httpx.get(server.url.replace("https://", "http://") + "/v2.0/networks", timeout=5)


def test_a_certificate_of_another_ca_fails_the_handshake(server: TlsServer, tmp_path: Path) -> None:
    cert, key = foreign_cert(tmp_path, B)
    with server.client(None, (cert, key)) as b, pytest.raises(httpx.TransportError):
        b.put(f"/hosts/{B}", json={"host": {}})
    port = server.url.rsplit(":", 1)[1]
    # TLS 1.2, where the client certificate is checked within the handshake (1.3 checks it after the client's
    # Finished: the client only sees the connection closed when it sends).
    got = subprocess.run(["openssl", "s_client", "-tls1_2", "-connect", f"127.0.0.1:{port}", "-CAfile",
                          str(server.ca), "-cert", str(cert), "-key", str(key), "-verify_return_error"],
                         input=b"GET / HTTP/1.0\r\n\r\n", capture_output=True, timeout=20)  # fmt: skip
    out = (got.stdout + got.stderr).decode()
    assert got.returncode != 0 and "HTTP/1" not in out and "unexpected eof" in out, out
    # The server's own certificate verified (openssl got that far): the refusal is the client certificate's.
    assert "Verification: OK" in out, out
    server.until_logged("TLS handshake refused: the client's certificate did not verify against the CA")


def test_a_removed_host_is_refused(server: TlsServer, tmp_path: Path) -> None:
    cert = server.join(B, tmp_path / "b")
    with server.client(None, cert) as b:
        assert b.put(f"/hosts/{B}", json={"host": {}}).status_code == 200
        with server.client() as admin:
            r = admin.post(f"/hosts/{B}/remove", json={})
            assert r.status_code == 200 and r.json()["host"]["certificates_revoked"] == 1, r.text
            assert admin.get(f"/hosts/{B}").status_code == 404  # forgotten, though it was alive
        r = b.put(f"/hosts/{B}", json={"host": {}})  # (the same kept-alive connection: checked per request)
        assert r.status_code == 403 and "revoked" in r.json()["NeutronError"]["message"], r.text
    server.until_logged(f"of host {B} was revoked")


def test_a_token_is_single_use(server: TlsServer, tmp_path: Path) -> None:
    token = server.join_token(B)
    join.join(server.url, token, B, tmp_path / "b")
    _refused(server, token, B, tmp_path / "b2", "the token was used already")


def test_an_expired_token_is_refused(server: TlsServer, tmp_path: Path) -> None:
    token = server.join_token(B, ttl=10)
    with sqlite3.connect(server.state / "cloudnet.db") as db:  # (its clock moved on: the row's expiry is past)
        db.execute("UPDATE join_tokens SET expires_at = '2020-01-01 00:00:00.000000'")
    _refused(server, token, B, tmp_path / "b", "the token expired")


def test_a_token_for_another_host_is_refused(server: TlsServer, tmp_path: Path) -> None:
    _refused(server, server.join_token(A), B, tmp_path / "b", f"issued for host {A}, not {B}")


def test_a_forged_token_is_refused(server: TlsServer, tmp_path: Path) -> None:
    real = join_token.parse(server.join_token(B))
    forged = join_token.JoinToken(real.id, "x" * 43, real.ca_fingerprint)
    _refused(server, str(forged), B, tmp_path / "b", "unknown token")


def test_a_token_naming_another_ca_is_never_sent(server: TlsServer, tmp_path: Path) -> None:
    """The server's CA must be the one the token pins: else the joining host stops before sending its token."""
    real = join_token.parse(server.join_token(B))
    other = join_token.JoinToken(real.id, real.secret, x509.new_authority().fingerprint)
    with pytest.raises(join.JoinError, match="not the one the token names"):
        join.join(server.url, str(other), B, tmp_path / "b")
    join.join(server.url, str(real), B, tmp_path / "b")  # (the token was never spent)
    # (the server's log lines are written by a thread of their own: once this join's line is there, anything the
    # refused attempt logged before it is too)
    server.until_logged(f"host {B} joined")
    assert "join refused" not in server.log() and server.log().count(f"host {B} joined") == 1


def test_joins_need_https(tmp_path: Path) -> None:
    with serve(tmp_path / "plain", "--metadata-listen", "off") as (_proc, url):
        with pytest.raises(join.JoinError, match="must be https"):
            join.join(url, "0" * 12 + "." + "x" * 43 + "." + "0" * 64, B, tmp_path / "b")
        r = httpx.post(url + join_token.JOIN_PATH, json={"join": {}}, timeout=10)
        assert r.status_code == 403 and "TLS" in r.text


def test_a_given_ca_and_server_certificate_are_used(tmp_path: Path) -> None:
    """--ca-cert/--ca-key: the cloud's CA is the operator's (tokens pin it); --tls-cert/--tls-key: so is the API's
    certificate. A mismatched pair does not start."""
    ca, key = x509.new_authority(), x509.new_key()
    files = {name: tmp_path / name for name in ("ca.crt", "ca.key", "api.crt", "api.key")}
    x509.write_private(files["ca.crt"], ca.pem)
    x509.write_private(files["ca.key"], x509.key_pem(ca.key))
    x509.write_private(files["api.crt"], x509.cert_pem(ca.server_cert(["127.0.0.1"], key)))
    x509.write_private(files["api.key"], x509.key_pem(key))
    given = ("--ca-cert", str(files["ca.crt"]), "--ca-key", str(files["ca.key"]), "--tls-cert", str(files["api.crt"]),
             "--tls-key", str(files["api.key"]))  # fmt: skip
    with tls_serve(tmp_path / "server", *given, ca=files["ca.crt"]) as server:
        assert not (server.state / "pki" / "ca.crt").exists()  # (nothing made: the given CA serves)
        token = server.join_token(B)
        assert join_token.parse(token).ca_fingerprint == ca.fingerprint
        state = tmp_path / "b"
        join.join(server.url, token, B, state)
        assert x509.signed_by(x509.load_cert(join.Joined.files(state)[1]), ca.cert)
    other = x509.new_authority()
    x509.write_private(files["ca.key"], x509.key_pem(other.key))  # (not the key of ca.crt)
    got = subprocess.run([CLOUDNET, "serve", "--tls", "--state-dir", str(tmp_path / "s2"), "--port", "1",
                          "--ca-cert", str(files["ca.crt"]), "--ca-key", str(files["ca.key"])],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert got.returncode == 1 and "is not the key of" in got.stderr, got.stderr


def test_plain_http_off_loopback_warns(tmp_path: Path) -> None:
    state = tmp_path / "plain"
    state.mkdir(mode=0o700)
    (state / "tokens.json").write_text('{"tokens": {"t": {"project_id": "admin", "role": "admin"}}}')
    with serve(state, "--host", "0.0.0.0", "--metadata-listen", "off") as (proc, _url):
        proc.kill()
        out = proc.communicate()[0]
    assert "in plain HTTP: tokens and agents' traffic cross the network in clear" in out, out
