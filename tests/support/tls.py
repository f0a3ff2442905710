"""`cloudnet serve --tls` as a real child process (uvicorn over HTTPS), and clients of it: with the CA only, with a
joined host's certificate, with one of another CA."""

from __future__ import annotations

import datetime
import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from cryptography import x509 as cx
from cryptography.hazmat.primitives import hashes

from cloudnet.agent import join
from cloudnet.pki import tls, x509
from tests.support.process import CLOUDNET, free_port, stop

ADMIN = "admin-token"


@dataclass
class TlsServer:
    proc: subprocess.Popen[bytes]
    url: str
    state: Path
    log_path: Path
    ca: Path  # the cloud's CA certificate

    def log(self) -> str:
        return self.log_path.read_text()

    def until_logged(self, text: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log():
            assert time.monotonic() < deadline, f"not logged: {text!r}\n{self.log()[-3000:]}"
            time.sleep(0.05)

    def client(self, token: str | None = ADMIN, cert: tuple[Path, Path] | None = None) -> httpx.Client:
        """An HTTPS client verifying the server against the CA, with `token` and the client certificate `cert`."""
        context = tls.client_context(self.ca, *(cert or (None, None)))
        return httpx.Client(base_url=self.url + "/v2.0", verify=context, timeout=30,
                            headers={"X-Auth-Token": token} if token else {})  # fmt: skip

    def join_token(self, host: str, ttl: int = 900) -> str:
        with self.client() as c:
            r = c.post(f"/hosts/{host}/join-tokens", json={"join_token": {"ttl": ttl}})
        assert r.status_code == 201, r.text
        return str(r.json()["join_token"]["token"])

    def join(self, host: str, state: Path) -> tuple[Path, Path]:
        """`host` joined with a fresh token (agent/join.py, as `cloudnet agent --join` does): its (cert, key)."""
        join.join(self.url, self.join_token(host), host, state)
        _ca, cert, key, _secret = join.Joined.files(state)
        return cert, key


@contextmanager
def tls_serve(state: Path, *extra: str, ca: Path | None = None, command: str = "serve") -> Iterator[TlsServer]:
    """`cloudnet serve --tls` (or `up --tls`) on a free loopback port with a tokens file (ADMIN is an admin's
    token); yields once the API answers over HTTPS verified against the CA it made (or `ca`, the one `extra`
    gives it)."""
    state.mkdir(mode=0o700, exist_ok=True)
    (state / "tokens.json").write_text(json.dumps({"tokens": {ADMIN: {"project_id": "admin", "role": "admin"}}}))
    port = free_port()
    log_path = state / "server.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen([CLOUDNET, command, "--tls", "--state-dir", str(state), "--port", str(port),
                                 "--metadata-listen", f"127.0.0.1:{free_port()}", *extra],
                                stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    server = TlsServer(proc, f"https://127.0.0.1:{port}", state, log_path, ca or state / "pki" / "ca.crt")
    try:
        deadline = time.monotonic() + 30
        while True:  # readiness: the API answers over TLS verified against the CA
            try:
                if server.ca.exists():
                    with server.client(None) as c:
                        c.get("/")
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                pytest.fail(f"server exited early: {server.log()}")
            if time.monotonic() > deadline:
                pytest.fail(f"server did not start within 30 s: {server.log()}")
            time.sleep(0.05)
        yield server
    finally:
        stop(proc, timeout=20)


def foreign_cert(root: Path, host: str) -> tuple[Path, Path]:
    """A client certificate for `host` signed by a CA of its own (not the cloud's): (cert, key)."""
    other, key = x509.new_authority(), x509.new_key()
    cert = other.host_cert(host, cx.load_pem_x509_csr(x509.new_csr(host, key)))
    paths = root / f"{host}-foreign.crt", root / f"{host}-foreign.key"
    x509.write_private(paths[0], x509.cert_pem(cert))
    x509.write_private(paths[1], x509.key_pem(key))
    return paths


def aged(cert: cx.Certificate, ca: x509.Authority, days_gone: int, days_left: int) -> cx.Certificate:
    """`cert` (same key, serial and extensions) signed again by the CA as if issued `days_gone` days ago."""
    now = datetime.datetime.now(datetime.UTC)
    builder = (cx.CertificateBuilder().subject_name(cert.subject).issuer_name(cert.issuer)
               .public_key(cert.public_key()).serial_number(cert.serial_number)
               .not_valid_before(now - datetime.timedelta(days=days_gone))
               .not_valid_after(now + datetime.timedelta(days=days_left)))  # fmt: skip
    for extension in cert.extensions:
        builder = builder.add_extension(extension.value, extension.critical)
    return builder.sign(ca.key, hashes.SHA256())
