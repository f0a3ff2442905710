"""The CA's revocation list as the API serves it (pki/crl.py): signed again only when the revoked certificates in the
store changed or half of the last one's validity is gone, never per request (a read of the revoked rows per request
is all a request costs). Every API server reads the same store: a revocation committed on one is in the next list
any of them serves."""

from __future__ import annotations

import datetime
import threading

from sqlalchemy import select

from cloudnet.pki import crl, x509
from cloudnet.store import tables as t
from cloudnet.store.db import Store

C = t.host_certificates


def revoked_certificates(store: Store, now: datetime.datetime) -> list[tuple[int, datetime.datetime]]:
    """(serial, revocation time) of every revoked host certificate not yet expired at `now`, by serial."""
    live = C.c.not_after > now.replace(tzinfo=None)
    with store.read() as conn:
        rows = conn.execute(select(C.c.serial, C.c.revoked_at).where(C.c.revoked_at.is_not(None), live)).all()
    return sorted((int(row.serial, 16), row.revoked_at) for row in rows)


class CrlCache:
    """The last CRL signed here, and what it was signed for."""

    def __init__(self, validity: float = crl.VALIDITY) -> None:
        self.validity = validity
        self._lock = threading.Lock()
        self._signed: tuple[str, list[tuple[int, datetime.datetime]], datetime.datetime, bytes] | None = None

    def der(self, store: Store, ca: x509.Authority) -> bytes:
        """The current CRL (DER) of `ca`, listing the store's revoked certificates."""
        now = datetime.datetime.now(datetime.UTC)
        revoked = revoked_certificates(store, now)
        with self._lock:
            signed = self._signed
            fresh = datetime.timedelta(seconds=self.validity / 2)
            if signed is not None and signed[:2] == (ca.fingerprint, revoked) and now - signed[2] < fresh:
                return signed[3]
            der = crl.build(ca, revoked, now, self.validity)
            self._signed = (ca.fingerprint, revoked, now, der)
            return der
