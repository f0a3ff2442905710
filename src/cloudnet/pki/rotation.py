"""Certificate rotation without downtime: when a certificate is due for renewal (2/3 of its lifetime gone), and live
TLS contexts that take a renewed certificate in place (new handshakes present it; connections already made keep the
one they were made with, so nothing is dropped)."""

from __future__ import annotations

import datetime
import logging
import os
import ssl
import threading
from collections.abc import Iterable
from pathlib import Path

from cryptography import x509 as cx

from cloudnet.pki import x509

log = logging.getLogger("cloudnet.pki")
RENEW_AT = 2 / 3  # of a certificate's lifetime: renewing then leaves a third of it to retry in


def renewal_time(cert: cx.Certificate) -> datetime.datetime:
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return start + (end - start) * RENEW_AT


def seconds_to_renewal(cert: cx.Certificate, now: datetime.datetime | None = None) -> float:
    """Seconds until `cert` is due for renewal (<= 0: due now)."""
    now = now or datetime.datetime.now(datetime.UTC)
    return (renewal_time(cert) - now).total_seconds()


def _stamp(paths: Iterable[Path]) -> tuple[tuple[int, int, int], ...]:
    stamps = []
    for path in paths:
        try:
            st = os.stat(path)
            stamps.append((st.st_ino, st.st_mtime_ns, st.st_size))
        except FileNotFoundError:
            stamps.append((0, 0, 0))
    return tuple(stamps)


class Reloader:
    """Live contexts that present the certificate in `cert`/`key`: `check()` re-reads it into them when either file
    changed (a renewed pair is written with an atomic rename: a new inode), `request()` (SIGHUP) forces the next
    check to. A pair that does not load (a key that does not match, half-written files) is refused and logged, and
    the contexts keep the certificate they have."""

    def __init__(self, cert: Path, key: Path, contexts: Iterable[ssl.SSLContext] = ()) -> None:
        self.cert, self.key = cert, key
        self.contexts = list(contexts)
        self._seen = _stamp((cert, key))
        self._forced = threading.Event()

    def request(self) -> None:
        """Re-read at the next check, changed or not (safe from a signal handler)."""
        self._forced.set()

    def check(self) -> bool:
        """Re-read the pair into the contexts if it changed or was asked for; whether the contexts took it."""
        stamp = _stamp((self.cert, self.key))
        if stamp == self._seen and not self._forced.is_set():
            return False
        self._forced.clear()
        self._seen = stamp
        return self.reload()

    def reload(self) -> bool:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(self.cert, self.key)  # (tried aside first)
            serial = x509.load_cert(self.cert).serial_number
        except (OSError, ssl.SSLError, x509.PkiError) as exc:
            log.warning("certificate %s not reloaded, keeping the one in use: %s", self.cert, exc)
            return False
        for context in self.contexts:
            context.load_cert_chain(self.cert, self.key)
        log.info("certificate %s reloaded: new handshakes present serial %x", self.cert, serial)
        return True
