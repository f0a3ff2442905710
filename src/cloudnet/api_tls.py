"""HTTPS for the API listener: the cloud's CA (made at first start, or given), the server certificate (given, or
made at every start for the names the listener answers to), uvicorn's TLS settings, and the protocol that hands the
verified client certificate to the application (uvicorn puts none in the ASGI scope)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import ssl
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from cloudnet.config import ServerConfig
from cloudnet.pki import cloud, rotation, tls, x509
from cloudnet.pki.tls import PEER_KEY, Peer, ServerFiles

log = logging.getLogger("cloudnet.server")
WILDCARDS = ("0.0.0.0", "::", "")


class PeerProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, plus the Peer of a verified client certificate in every request's scope (read
    once per connection: the handshake verified it against the CA)."""

    peer: Peer | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        ssl_object = transport.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        self.peer = Peer(*x509.peer_of(der)) if der else None

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self.peer is not None:
            self.scope[PEER_KEY] = self.peer  # type: ignore[literal-required]


def server_names(config: ServerConfig) -> list[str]:
    """The names the listener answers to: --tls-san, the bound address (a wildcard: this host's name and the
    addresses it resolves to), loopback."""
    names = list(config.tls_sans)
    if config.host not in WILDCARDS:
        names.append(config.host)
    metadata_host = config.metadata_listen.rpartition(":")[0].strip("[]")  # (relays verify its listener by name)
    if metadata_host not in WILDCARDS and not config.metadata_listen.startswith("unix:"):
        names.append(metadata_host)
    names += [socket.gethostname(), socket.getfqdn(), "localhost", "127.0.0.1", "::1"]
    if config.host in WILDCARDS:
        with contextlib.suppress(OSError):
            names += [str(info[4][0]) for info in socket.getaddrinfo(socket.gethostname(), None)]
    return [n for n in dict.fromkeys(names) if n and (_is_ip(n) or x509.HOST_NAME.match(n))]


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def server_files(config: ServerConfig, ca: x509.Authority) -> ServerFiles | None:
    """The listener's certificate and key (None: plain HTTP): --tls-cert/--tls-key, or made now by the CA."""
    if not config.tls:
        return None
    if (config.tls_cert is None) != (config.tls_key is None):
        raise x509.PkiError("--tls-cert and --tls-key go together")
    if config.tls_cert is not None and config.tls_key is not None:
        return ServerFiles(config.tls_cert, config.tls_key, cloud.ca_file(config))
    # Made at every start: the names follow the command line, and nothing needs renewing by hand.
    key = x509.new_key()
    cert = ca.server_cert(server_names(config), key)
    files = ServerFiles(config.pki_dir / "server.crt", config.pki_dir / "server.key", cloud.ca_file(config))
    x509.write_private(files.key, x509.key_pem(key))
    x509.write_private(files.cert, x509.cert_pem(cert))
    return files


class LoggedHandshake(ssl.SSLObject):
    """A server-side TLS session that logs a client certificate it refused (another CA's, an expired one): the event
    loop drops failed handshakes without a word."""

    def do_handshake(self) -> None:
        try:
            super().do_handshake()
        except ssl.SSLCertVerificationError as exc:
            log.warning("TLS handshake refused: the client's certificate did not verify against the CA (%s)",
                        exc.verify_message)  # fmt: skip
            raise


def metadata_context(files: ServerFiles) -> ssl.SSLContext:
    """The metadata listener's TLS: the API's certificate, and a host certificate of the CA required of every client.
    Its only clients are agents' relays (each has its host's certificate), and it hands out user_data and
    passwords: a client the CA never signed for does not get past the handshake, whatever it knows of the
    shared signing secret (the HMAC check on each request stays)."""
    context = tls.server_context(files, ssl.CERT_REQUIRED)
    context.sslobject_class = LoggedHandshake
    return context


def uvicorn_options(files: ServerFiles | None, reloader: rotation.Reloader | None = None) -> dict[str, Any]:
    """uvicorn.Config's TLS arguments: client certificates optional (users' bearer tokens work from any client),
    but one that is sent must chain to the CA or the handshake fails (and is logged). The context uvicorn makes goes
    to `reloader`, which loads a renewed certificate into it in place."""
    if files is None:
        return {"http": "httptools"}

    def logged(_config: object, default: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        context = default()
        context.sslobject_class = LoggedHandshake
        if reloader is not None:
            reloader.contexts.append(context)
        return context

    return {"http": PeerProtocol, "ssl_certfile": str(files.cert), "ssl_keyfile": str(files.key),
            "ssl_ca_certs": str(files.ca), "ssl_cert_reqs": ssl.CERT_OPTIONAL,
            "ssl_context_factory": logged}  # fmt: skip


def renew_if_due(config: ServerConfig, ca: x509.Authority, files: ServerFiles) -> bool:
    """Make the listener's certificate again once 2/3 of its lifetime is gone (only one made here: a given one is
    its maker's to renew); the reloader then takes it in."""
    if config.tls_cert is not None or rotation.seconds_to_renewal(x509.load_cert(files.cert)) > 0:
        return False
    server_files(config, ca)
    return True
