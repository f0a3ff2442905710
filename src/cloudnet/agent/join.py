"""`cloudnet agent --join URL TOKEN`: a new host's key, made here, signed by the cloud's CA for this host's name.

The server is authenticated before anything secret goes to it: the CA certificate it serves must hash to the
fingerprint the token carries (kubeadm's discovery hash), and the token is then sent only over TLS verified against
that CA. What comes back (certificate, CA, the SB database, the metadata API and its secret) is written 0600 under
<state>/join/, and every later start of the agent runs from it: no token, no copied files.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from cloudnet.pki import join_token, tls, x509

log = logging.getLogger("cloudnet.agent")
JOIN_DIR = "join"
WILDCARD_HOSTS = ("0.0.0.0", "[::]", "::", "")


class JoinError(RuntimeError):
    pass


@dataclass(frozen=True)
class Joined:
    """What a host got by joining, as written in <state>/join/joined.json (the files beside it)."""

    server: str
    host: str
    ovn_sb: str | None
    metadata_url: str | None

    @staticmethod
    def dir(state_dir: Path) -> Path:
        return state_dir / JOIN_DIR

    @staticmethod
    def files(state_dir: Path) -> tuple[Path, Path, Path, Path]:
        """(CA certificate, this host's certificate, its key, the metadata secret)."""
        d = Joined.dir(state_dir)
        return d / "ca.crt", d / "host.crt", d / "host.key", d / "metadata_secret"


def load(state_dir: Path) -> Joined | None:
    """What an earlier join wrote (None: this host never joined with a token)."""
    path = Joined.dir(state_dir) / "joined.json"
    try:
        data = json.loads(path.read_text())
        metadata_url = data.get("metadata_url")
        if isinstance(metadata_url, str) and metadata_url.startswith("http://"):
            # Written by a join before the metadata listener took TLS: a server that takes joins serves it over TLS.
            metadata_url = "https://" + metadata_url.removeprefix("http://")
        return Joined(str(data["server"]), str(data["host"]), data.get("ovn_sb"), metadata_url)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise JoinError(f"cannot read {path}: {exc}") from None


def _metadata_url(listen: str | None, server: str) -> str | None:
    """The metadata API as this host reaches it: the server's HOST:PORT, a wildcard host being the API's host; over
    TLS (a server that takes joins has TLS, and its metadata listener too)."""
    if not listen or listen == "off" or listen.startswith("unix:"):
        return None  # (a unix socket is the server host's own)
    host, _, port = listen.rpartition(":")
    if host in WILDCARD_HOSTS:
        host = urlsplit(server).hostname or ""
        host = f"[{host}]" if ":" in host else host
    return f"https://{host}:{port}"


def _refusal(r: httpx.Response) -> str:
    try:
        return str(r.json()["NeutronError"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"{r.status_code} {r.reason_phrase}"


def fetch_ca(server: str, fingerprint: str, timeout: float = 30.0) -> bytes:
    """The CA certificate the server serves, if it is the one the token names. Fetched over TLS left unverified on
    purpose: nothing secret is sent, and the fingerprint check is what authenticates the answer."""
    try:
        r = httpx.get(server + join_token.CA_PATH, verify=False, timeout=timeout)
        r.raise_for_status()
        cert = x509.parse_cert(r.content)
    except (httpx.HTTPError, x509.PkiError) as exc:
        raise JoinError(f"cannot fetch the CA certificate from {server}: {exc}") from None
    if x509.fingerprint(cert) != fingerprint:
        raise JoinError(f"the CA certificate {server} serves (sha256:{x509.fingerprint(cert)}) is not the one the "
                        "token names: refusing to send the token to it")  # fmt: skip
    return x509.cert_pem(cert)


def join(server: str, token_text: str, host: str, state_dir: Path, timeout: float = 30.0,
         ovn_member: str | None = None) -> Joined:  # fmt: skip
    """Redeem the token for a certificate of `host`, and write what the agent needs under <state>/join/
    (`ovn_member`: what `cloudnet ovn join` needs, a certificate of the member of OVN's clusters at that address)."""
    server = server.rstrip("/")
    if urlsplit(server).scheme != "https":
        raise JoinError(f"a join goes over TLS: the server URL must be https://, not {server}")
    try:
        token = join_token.parse(token_text)
    except join_token.TokenFormatError as exc:
        raise JoinError(str(exc)) from None
    if not x509.HOST_NAME.match(host):
        raise JoinError(f"host name {host!r} cannot go into a certificate (letters, digits, '.', '-', '_')")
    ca_pem = fetch_ca(server, token.ca_fingerprint, timeout)
    key = x509.new_key()
    body = {"join": {"host": host, "token": str(token), "csr": x509.new_csr(host, key).decode(),
                     **({"ovn_member": ovn_member} if ovn_member else {})}}  # fmt: skip
    try:
        r = httpx.post(server + join_token.JOIN_PATH, json=body, verify=tls.client_context(ca_pem), timeout=timeout)
    except httpx.HTTPError as exc:
        raise JoinError(f"cannot reach {server} (verified against the token's CA): {exc}") from None
    if r.status_code != 201:
        raise JoinError(f"the server refused the join: {_refusal(r)}")
    answer: dict[str, Any] = r.json()["join"]
    cert = x509.parse_cert(answer["certificate"].encode())
    if not x509.signed_by(cert, x509.parse_cert(ca_pem)):
        raise JoinError("the certificate the server sent is not signed by the token's CA")
    joined = Joined(server, host, answer.get("ovn_sb"), _metadata_url(answer.get("metadata_listen"), server))
    ca_path, cert_path, key_path, secret_path = Joined.files(state_dir)
    x509.write_private(key_path, x509.key_pem(key))
    x509.write_private(cert_path, x509.cert_pem(cert))
    x509.write_private(ca_path, ca_pem)
    if answer.get("metadata_secret"):
        x509.write_private(secret_path, (str(answer["metadata_secret"]) + "\n").encode())
    x509.write_private(Joined.dir(state_dir) / "joined.json", json.dumps(asdict(joined)).encode())
    log.info("joined %s as host %s (certificate %x)", server, host, cert.serial_number)
    return joined


def renew(
    state_dir: Path,
    context: ssl.SSLContext,
    servers: Sequence[str] = (),
    timeout: float = 30.0,
    ovn_member: str | None = None,
) -> x509.Certificate:
    """A new certificate for a new key of this host, asked over its current certificate (in `context`, the one the
    agent's connections use): the pair replaces the files under <state>/join/ (ovn-controller re-reads them when they
    change), then `context` takes it in place, so new handshakes present it and open connections go on. Asked of the
    server it joined, then of the agent's other `servers` (any server answers: they share the CA and the database)
    when one cannot be reached or cannot answer (5xx); a refusal (4xx) is final. `ovn_member`: a cluster member's
    certificate again, for that address (its ovsdb-servers re-read the files when they change)."""
    saved = load(state_dir)
    if saved is None:
        raise JoinError("this host never joined with a token: it has no certificate to renew")
    ca_path, cert_path, key_path, _secret = Joined.files(state_dir)
    key = x509.new_key()
    body = {"certificate": {"csr": x509.new_csr(saved.host, key).decode(),
                            **({"ovn_member": ovn_member} if ovn_member else {})}}  # fmt: skip
    path = join_token.RENEW_PATH.format(name=saved.host)
    failures = []
    for server in dict.fromkeys([saved.server, *servers]):  # (in order, once each)
        try:
            r = httpx.post(server + path, json=body, verify=context, timeout=timeout)
        except httpx.HTTPError as exc:
            failures.append(f"cannot reach {server} to renew: {exc}")
            continue
        if r.status_code >= 500:
            failures.append(f"{server} could not renew: {_refusal(r)}")
            continue
        if r.status_code != 201:
            raise JoinError(f"the server refused the renewal: {_refusal(r)}")
        break
    else:
        raise JoinError("; ".join(failures))
    cert = x509.parse_cert(str(r.json()["certificate"]["certificate"]).encode())
    if not x509.signed_by(cert, x509.load_cert(ca_path)) or cert.public_key() != key.public_key():
        raise JoinError("the renewed certificate is not the CA's, or not for the key sent")
    x509.write_private(key_path.with_name("host.key.new"), x509.key_pem(key))
    x509.write_private(cert_path.with_name("host.crt.new"), x509.cert_pem(cert))
    context.load_cert_chain(cert_path.with_name("host.crt.new"), key_path.with_name("host.key.new"))
    # Each file replaced whole (never half of either), the certificate first: OVS's stream-ssl takes a new pair only
    # when it sees the key changed and then the certificate, and a key seen alone is never taken up again.
    cert_path.with_name("host.crt.new").replace(cert_path)
    key_path.with_name("host.key.new").replace(key_path)
    log.info("host %s renewed its certificate: now %x, valid until %s", saved.host, cert.serial_number,
             cert.not_valid_after_utc)  # fmt: skip
    return cert
