"""TLS on the API's wire: the server's files (uvicorn loads them: client certificates optional, verified against the
CA when sent), an agent's context (the CA pinned, its own certificate presented), what a client certificate names."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

# Where the API's TLS layer (api_tls.py) puts the verified client certificate's Peer in an ASGI scope.
PEER_KEY = "cloudnet.peer"


@dataclass(frozen=True)
class Peer:
    """Who a verified client certificate names: the host it was signed for, and its serial (for revocation)."""

    host: str
    serial: int


@dataclass(frozen=True)
class ServerFiles:
    """The API listener's certificate, its key, and the CA that client certificates must chain to."""

    cert: Path
    key: Path
    ca: Path


def server_context(files: ServerFiles, client_certs: ssl.VerifyMode) -> ssl.SSLContext:
    """A listener's context: its certificate, and client certificates checked against the CA only (`CERT_REQUIRED`:
    a client without one, or with another CA's, fails the handshake)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=files.ca)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(files.cert, files.key)
    ctx.verify_mode = client_certs
    return ctx


def client_context(ca: Path | bytes, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    """Verify the server against the CA only (not the system's store), and present `cert` when given."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=ca.decode() if isinstance(ca, bytes) else None,
                                     cafile=None if isinstance(ca, bytes) else ca)  # fmt: skip
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    return ctx
