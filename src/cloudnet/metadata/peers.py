"""The host certificates the metadata listener serves (with `--tls` it requires one of every client): those the CA
signed for a host, as recorded in the store, and not revoked. The TLS handshake has already checked the chain;
this adds what the API checks per request, so that a removed host's relay is refused here too, its open
connections included (the server's sweep asks again). Checks run on the serving loop and never wait for the
database: the table is re-read every REFRESH seconds on a thread of its own; only a serial issued since (a join, a
renewal) is looked up at once, the first time it is seen."""

from __future__ import annotations

import logging
import threading

from sqlalchemy.exc import SQLAlchemyError

from cloudnet.pki import x509
from cloudnet.services.hosts import host_join
from cloudnet.store.db import Store

log = logging.getLogger(__name__)
REFRESH = 2.0  # seconds: how soon a revocation closes the host's connections (plus the sweep's second)


class HostCertificates:
    def __init__(self, store: Store, refresh: float = REFRESH) -> None:
        self._store = store
        self._refresh = refresh
        self._table: dict[int, tuple[str, bool]] = {}  # serial -> (host, revoked); replaced whole, never changed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cloudnet-host-certificates", daemon=True)

    def start(self) -> None:
        self._load()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def refresh(self) -> None:
        """Read the table now (a revocation committed here: see host_join.on_revoke)."""
        self._load()

    def _load(self) -> None:
        try:
            self._table = host_join.certificate_table(self._store)
        except SQLAlchemyError as exc:
            log.warning("cannot read the host certificates (the last list read stays in use): %s", exc)

    def _run(self) -> None:
        while not self._stop.wait(self._refresh):
            self._load()

    def __call__(self, der: bytes | None) -> str | None:
        """Why the client with this certificate is not served now, or None."""
        if der is None:
            return "no client certificate"
        host, serial = x509.peer_of(der)
        entry = self._table.get(serial)
        if entry is None:  # issued since the last read
            try:
                why = host_join.peer_refusal(self._store, serial, host, None)
            except SQLAlchemyError as exc:
                return f"cannot check certificate {serial:x} of host {host}: {exc}"
            if why is None:
                self._table = {**self._table, serial: (host, False)}
            return why
        if entry[0] != host:
            return f"certificate {serial:x} was not issued to host {host}"
        return f"certificate {serial:x} of host {host} was revoked" if entry[1] else None
