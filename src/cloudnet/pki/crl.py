"""The cloud CA's certificate revocation list (X.509 CRL, RFC 5280), with `cryptography`: made by the API servers
(which hold the CA key: `build`), read by what cannot read the store, the TLS front of a `cloudnet ovn join` member's
databases (`RevocationList`).

A CRL lives VALIDITY seconds (thisUpdate .. nextUpdate); a reader takes one only if the CA's key signed it, the CA
issued it, and it is current (within SKEW of this host's clock: hosts' clocks differ a little). Its serials are the
host certificates revoked and not yet expired (an expired one fails the handshake anyway).

When no API server answers, a reader keeps the last good CRL, also once its nextUpdate has passed (warning in the
log every STALE_WARNING seconds), until a server answers again: refusing every client then would turn an outage of
the API into one of the dataplane (every chassis cut from the databases), while the revocations it holds stay
enforced, and the API servers' own fronts, which read the store, refuse a host revoked meanwhile. OpenVPN (2.4 on)
takes the same side; OpenSSL's strict check (CRL_HAS_EXPIRED) the other. A reader with no CRL at all (never fetched
one, none kept on disk) refuses every client: it has no evidence of which certificates are good.
"""

from __future__ import annotations

import datetime
import logging
import ssl
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
from cryptography import x509 as cx
from cryptography.hazmat.primitives import hashes, serialization

from cloudnet.pki import join_token, x509

log = logging.getLogger("cloudnet.pki.crl")
VALIDITY = 60.0  # seconds from thisUpdate to nextUpdate
SKEW = 30.0  # seconds of clock difference between hosts tolerated
REFRESH = 2.0  # seconds between a reader's fetches
STALE_WARNING = 60.0  # seconds between warnings that the CRL in use is past its nextUpdate
MEDIA_TYPE = "application/pkix-crl"  # (RFC 2585: DER)


class CrlError(ValueError):
    """A CRL that is not taken (the message says why)."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def build(ca: x509.Authority, revoked: Iterable[tuple[int, datetime.datetime]],
          now: datetime.datetime | None = None, validity: float = VALIDITY) -> bytes:  # fmt: skip
    """The CA's CRL (DER) listing `revoked` (serial, revocation time), current from `now` for `validity` seconds."""
    now = now or _now()
    ski = ca.cert.extensions.get_extension_for_class(cx.SubjectKeyIdentifier).value
    builder = (
        cx.CertificateRevocationListBuilder()
        .issuer_name(ca.cert.subject)
        .last_update(now)
        .next_update(now + datetime.timedelta(seconds=validity))
        .add_extension(cx.CRLNumber(int(now.timestamp() * 1000)), critical=False)  # (rises with time, any server)
        .add_extension(cx.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
    )
    for serial, when in revoked:
        when = when if when.tzinfo is not None else when.replace(tzinfo=datetime.UTC)
        builder = builder.add_revoked_certificate(
            cx.RevokedCertificateBuilder().serial_number(serial).revocation_date(when).build()
        )
    return builder.sign(ca.key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)


def verify(der: bytes, ca: cx.Certificate, now: datetime.datetime | None = None,
           current: bool = True) -> cx.CertificateRevocationList:  # fmt: skip
    """The CRL in `der`, if `ca` issued and signed it and (`current`) it is current now; CrlError otherwise."""
    try:
        crl = cx.load_der_x509_crl(der)
    except ValueError as exc:
        raise CrlError(f"not a DER CRL: {exc}") from None
    if crl.issuer != ca.subject:
        raise CrlError(f"issued by {crl.issuer.rfc4514_string()}, not the cloud's CA ({ca.subject.rfc4514_string()})")
    try:
        signed = crl.is_signature_valid(ca.public_key())  # type: ignore[arg-type]
    except (TypeError, ValueError):
        signed = False
    if not signed:
        raise CrlError("its signature is not the cloud's CA's")
    if current:
        now = now or _now()
        skew = datetime.timedelta(seconds=SKEW)
        next_update = crl.next_update_utc
        if crl.last_update_utc > now + skew:
            raise CrlError(f"its thisUpdate {crl.last_update_utc} is ahead of this host's clock ({now})")
        if next_update is None or next_update < now - skew:
            raise CrlError(f"it is stale: nextUpdate {next_update}, now {now}")
    return crl


@dataclass(frozen=True)
class Held:
    """A verified CRL: its DER, its revoked serials (-> revocation time), its nextUpdate."""

    der: bytes
    revoked: dict[int, datetime.datetime]
    this_update: datetime.datetime
    next_update: datetime.datetime

    @staticmethod
    def of(der: bytes, crl: cx.CertificateRevocationList) -> Held:
        revoked = {entry.serial_number: entry.revocation_date_utc for entry in crl}
        next_update = crl.next_update_utc or crl.last_update_utc
        return Held(der, revoked, crl.last_update_utc, next_update)


class RevocationList:
    """The cloud's CRL as a reader without the store holds it: fetched every `refresh` seconds from the API servers
    `servers` (in turn, the one that answered last first) over mutual TLS (`context`: the CA pinned, this host's
    certificate presented), verified against `ca`, kept in `keep` (read at start: a restart with no server up has
    the last one). Called with a client certificate (DER): why it is refused now, or None (see the module's doc)."""

    def __init__(self, servers: Sequence[str], context: ssl.SSLContext, ca: Path, keep: Path,
                 refresh: float = REFRESH, timeout: float = 5.0) -> None:  # fmt: skip
        if not servers:
            raise ValueError("no API server to fetch the revocation list from")
        self.servers, self.context, self.ca, self.keep = list(servers), context, ca, keep
        self.refresh_every, self.timeout = refresh, timeout
        self.held: Held | None = None
        self._warned = 0.0
        self._fetching = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cloudnet-crl", daemon=True)

    def start(self) -> None:
        """The kept CRL (any age: see the module's doc), a first fetch, then fetches on a thread of its own."""
        try:
            der = self.keep.read_bytes()
            self.held = Held.of(der, verify(der, x509.load_cert(self.ca), current=False))
            log.info("revocation list of %s read from %s", self.held.this_update, self.keep)
        except FileNotFoundError:
            pass
        except (OSError, CrlError, x509.PkiError) as exc:
            log.warning("the kept revocation list %s is not taken: %s", self.keep, exc)
        self.fetch()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.refresh_every):
            self.fetch()

    def fetch(self) -> bool:
        """Ask the servers in turn for the CRL and take the first good one; whether one was taken. (One fetch at a
        time: SIGHUP asks for one beside the thread's.)"""
        with self._fetching:
            failures = []
            for server in list(self.servers):
                try:
                    r = httpx.get(server + join_token.CRL_PATH, verify=self.context, timeout=self.timeout)
                    if r.status_code != 200:
                        raise OSError(f"answered {r.status_code}: {r.text[:200]}")
                    taken = Held.of(r.content, verify(r.content, x509.load_cert(self.ca)))
                except CrlError as exc:  # (a server that answers with a list the CA did not sign: say so now)
                    log.warning("the revocation list %s served is not taken: %s", server, exc)
                    failures.append(f"{server}: {exc}")
                    continue
                except (httpx.HTTPError, x509.PkiError, OSError) as exc:
                    failures.append(f"{server}: {exc}")
                    continue
                self._take(taken, server)
                return True
            self._stale(failures)
            return False

    def _take(self, taken: Held, server: str) -> None:
        before = self.held
        self.held = taken
        if server != self.servers[0]:  # (the one that answered first next time)
            self.servers.remove(server)
            self.servers.insert(0, server)
        if before is None or before.revoked != taken.revoked:
            log.info("revocation list from %s: %d revoked certificate(s)", server, len(taken.revoked))
            try:
                x509.write_private(self.keep, taken.der)
            except OSError as exc:
                log.warning("cannot keep the revocation list in %s: %s", self.keep, exc)

    def _stale(self, failures: list[str]) -> None:
        held = self.held
        if held is None:
            log.warning("no revocation list from any API server (every client refused until one answers): %s",
                        "; ".join(failures))  # fmt: skip
        elif held.next_update < _now() and time.monotonic() - self._warned > STALE_WARNING:
            self._warned = time.monotonic()
            log.warning("the revocation list in use is stale (nextUpdate %s) and kept, as no API server gives a "
                        "current one: %s", held.next_update, "; ".join(failures))  # fmt: skip
        else:
            log.debug("revocation list not refreshed (the one of %s stays in use): %s", held.this_update,
                     "; ".join(failures))  # fmt: skip

    def __call__(self, der: bytes) -> str | None:
        held = self.held
        if held is None:
            return "no revocation list from the API servers yet"
        host, serial = x509.peer_of(der)
        when = held.revoked.get(serial)
        if when is not None:
            return f"certificate {serial:x} of host {host} was revoked at {when:%Y-%m-%dT%H:%M:%SZ} (the CA's CRL)"
        return None
