"""Joining hosts: single-use join tokens, the host certificates the CA signs for them, and their revocation.

A token is issued by an admin for one host name and lives `ttl` seconds; redeeming it spends it (one UPDATE that
matches only an unspent, unexpired token of that name, so two redeemers racing get one certificate between them)
and signs the joining host's key for that name. Every signed certificate is recorded: the API accepts a client
certificate only while its row is here unrevoked.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509 import Certificate, CertificateSigningRequest
from cryptography.x509.oid import NameOID
from pydantic import Field
from sqlalchemy import select, update

from cloudnet.errors import BadRequest, Forbidden
from cloudnet.pki import join_token, x509
from cloudnet.services import common
from cloudnet.services.context import Context
from cloudnet.services.hosts.hosts import admin_only
from cloudnet.services.validation import Body, parse
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx

log = logging.getLogger(__name__)
J = t.join_tokens
C = t.host_certificates
DEFAULT_TTL = 900
MAX_TTL = 7 * 86400
_revocation_listeners: list[Callable[[], None]] = []  # (on_revoke)


class JoinRefused(Forbidden):
    type = "JoinRefused"


class RenewalRefused(Forbidden):
    type = "RenewalRefused"


class TokenRequest(Body):
    ttl: int = Field(DEFAULT_TTL, ge=10, le=MAX_TTL)


class JoinRequest(Body):
    host: str = Field(max_length=63)
    token: str = Field(max_length=200)
    csr: str = Field(max_length=8192)
    ovn_member: str | None = Field(None, max_length=45)  # a member of OVN's clusters at this address (`ovn join`)


def check_host_name(name: str) -> None:
    if not x509.HOST_NAME.match(name):
        raise BadRequest(f"Invalid host name {name!r}: letters, digits, '.', '-' and '_', at most 63, a letter or "
                         "digit first (it goes into the host's certificate)")  # fmt: skip


def serial_key(serial: int) -> str:
    return format(serial, "x")


def issue_token(store: Store, ctx: Context, host: str, body: dict[str, Any], ca_fingerprint: str) -> dict[str, Any]:
    """A new join token for `host` (its secret shown this once: the store keeps its hash)."""
    admin_only(ctx)
    check_host_name(host)
    spec = parse(TokenRequest, body)
    token = join_token.new(ca_fingerprint)
    with store.write() as tx:
        expires = tx.now + timedelta(seconds=spec.ttl)
        tx.conn.execute(J.insert().values(id=token.id, host=host, secret_hash=token.secret_hash, created_at=tx.now,
                                          expires_at=expires, used_at=None))  # fmt: skip
    log.info("join token %s issued for host %s, expires %s", token.id, host, common.fmt_time(expires))
    return {"token": str(token), "host": host, "expires_at": common.fmt_time(expires)}


def _refuse(token_id: str, host: str, why: str) -> JoinRefused:
    log.warning("join refused: token %s for host %s: %s", token_id, host, why)
    return JoinRefused(f"Join refused: {why}")


def _refuse_renewal(host: str, why: str) -> RenewalRefused:
    log.warning("certificate renewal refused: host %s: %s", host, why)
    return RenewalRefused(f"Renewal refused: {why}")


def redeem(store: Store, body: dict[str, Any], ca: x509.Authority, members: tuple[str, ...] = (),
           own: str | None = None) -> dict[str, Any]:  # fmt: skip
    """Spend the token and sign the request's key for the token's host: {"host", "certificate"}. Refused (403,
    logged) when the token is unknown, spent, expired, for another host, or not for this CA. With `ovn_member`, the
    certificate of a member of OVN's clusters at that address (server and client: its Raft peers verify it), which
    must be one of this server's `members` (--ovn-cluster) and not its `own` (the server's member)."""
    spec = parse(JoinRequest, body)
    check_host_name(spec.host)
    try:
        token = join_token.parse(spec.token)
    except join_token.TokenFormatError as exc:
        raise _refuse("?", spec.host, str(exc)) from None
    if token.ca_fingerprint != ca.fingerprint:
        raise _refuse(token.id, spec.host, "the token was issued by another CA")
    if why := _not_a_member(spec.ovn_member, members, own):
        raise _refuse(token.id, spec.host, why)
    try:
        csr = x509.load_csr(spec.csr)
    except x509.PkiError as exc:
        raise BadRequest(str(exc)) from None
    with store.write() as tx:
        row = tx.conn.execute(select(J).where(J.c.id == token.id)).first()
        if row is None or not join_token.matches(token.secret, row.secret_hash):
            raise _refuse(token.id, spec.host, "unknown token")
        if row.host != spec.host:
            raise _refuse(token.id, spec.host, f"the token was issued for host {row.host}, not {spec.host}")
        if row.used_at is not None:
            raise _refuse(token.id, spec.host, f"the token was used already (at {common.fmt_time(row.used_at)})")
        if row.expires_at.replace(tzinfo=None) <= tx.now:
            raise _refuse(token.id, spec.host, f"the token expired at {common.fmt_time(row.expires_at)}")
        spent = tx.conn.execute(
            update(J).where(J.c.id == token.id, J.c.used_at.is_(None)).values(used_at=tx.now)
        ).rowcount
        if not spent:  # another redeemer won the race
            raise _refuse(token.id, spec.host, "the token was used already")
        cert = _sign(tx, ca, spec.host, csr, spec.ovn_member)
    log.info("host %s joined with token %s: certificate %x%s", spec.host, token.id, cert.serial_number,
             f" (OVN cluster member at {spec.ovn_member})" if spec.ovn_member else "")  # fmt: skip
    return {"host": spec.host, "certificate": x509.cert_pem(cert).decode()}


def _not_a_member(address: str | None, members: tuple[str, ...], own: str | None) -> str | None:
    """Why a member certificate for `address` is refused (None: it is not asked for, or it may be signed)."""
    if address is None or (address in members and address != own):
        return None
    others = ", ".join(a for a in members if a != own) or "none"
    return f"{address!r} is not an address of another member of this cloud's OVN clusters ({others})"


def _sign(tx: Tx, ca: x509.Authority, host: str, csr: CertificateSigningRequest,
          member: str | None = None) -> Certificate:  # fmt: skip
    """Sign `csr`'s key for `host` (an OVN cluster member's certificate with `member`, its address) and record the
    certificate (the API accepts it while its row is unrevoked)."""
    try:
        cert = ca.host_cert(host, csr) if member is None else ca.member_cert(host, member, csr)
    except x509.PkiError as exc:
        raise BadRequest(str(exc)) from None
    _record(tx, host, cert)
    return cert


def _record(tx: Tx, host: str, cert: Certificate) -> None:
    tx.conn.execute(C.insert().values(serial=serial_key(cert.serial_number), host=host, issued_at=tx.now,
                                      not_after=cert.not_valid_after_utc.replace(tzinfo=None),
                                      revoked_at=None))  # fmt: skip


def record_own(store: Store, cert: Certificate) -> None:
    """Record a certificate this server made for itself (OVN's databases': other servers' NB writers and
    ovn-northd connect to a cluster member's TLS front with it, which lets in recorded certificates only), under the
    name it carries (revocable as that host's)."""
    host, _serial = x509.peer_of(cert.public_bytes(Encoding.DER))
    with store.write() as tx:
        _record(tx, host, cert)


class RenewRequest(Body):
    csr: str = Field(max_length=8192)
    ovn_member: str | None = Field(None, max_length=45)  # as at the join


def renew(store: Store, ca: x509.Authority, peer_host: str, peer_serial: int, host: str, body: dict[str, Any],
          members: tuple[str, ...] = (), own: str | None = None) -> dict[str, Any]:  # fmt: skip
    """A new certificate of `host` for the request's key, asked over the host's current certificate (`peer_*`):
    refused (403, logged) for another host, a CSR naming another host, or a certificate that is unknown or revoked
    by now (`ovn_member`, `members`, `own`: as for `redeem`). The current certificate stays valid until it expires:
    connections made with it go on."""
    spec = parse(RenewRequest, body)
    if peer_host != host:
        raise _refuse_renewal(host, f"host {peer_host}'s certificate may not renew host {host}'s")
    if why := _not_a_member(spec.ovn_member, members, own):
        raise _refuse_renewal(host, why)
    try:
        csr = x509.load_csr(spec.csr)
    except x509.PkiError as exc:
        raise BadRequest(str(exc)) from None
    names = [a.value for a in csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if names != [host]:
        raise _refuse_renewal(host, f"the certificate request names {names or 'no host'}, not {host}")
    with store.write() as tx:
        row = tx.conn.execute(select(C.c.host, C.c.revoked_at).where(C.c.serial == serial_key(peer_serial))).first()
        if row is None or row.host != host or row.revoked_at is not None:
            raise _refuse_renewal(host, f"certificate {peer_serial:x} is not a valid certificate of {host}")
        cert = _sign(tx, ca, host, csr, spec.ovn_member)
    log.info("host %s renewed its certificate %x: now %x", host, peer_serial, cert.serial_number)
    return {"host": host, "certificate": x509.cert_pem(cert).decode()}


def sign_own(store: Store, ca: x509.Authority, host: str, csr: CertificateSigningRequest) -> Certificate:
    """The certificate of the agent `cloudnet up` runs beside the server (it joins with no token: it is the
    server's own)."""
    with store.write() as tx:
        return _sign(tx, ca, host, csr)


def revoke_host(store: Store, ctx: Context, host: str) -> int:
    """Revoke every certificate of `host` and spend its unused join tokens; how many certificates were revoked."""
    admin_only(ctx)
    with store.write() as tx:
        revoked = tx.conn.execute(
            update(C).where(C.c.host == host, C.c.revoked_at.is_(None)).values(revoked_at=tx.now)
        ).rowcount
        tx.conn.execute(update(J).where(J.c.host == host, J.c.used_at.is_(None)).values(used_at=tx.now))
    log.warning("host %s removed: %d certificate(s) revoked", host, revoked)
    for listener in list(_revocation_listeners):
        listener()
    return int(revoked)


def on_revoke(listener: Callable[[], None]) -> Callable[[], None]:
    """Call `listener` after every revocation this process commits (what holds connections over host certificates
    closes the revoked host's at once, not at its next refresh); returns what unregisters it."""
    _revocation_listeners.append(listener)
    return lambda: _revocation_listeners.remove(listener)


def peer_refusal(store: Store, serial: int, host: str, instance_id: str | None) -> str | None:
    """Why a request over a client certificate (of `host`, serial `serial`) is refused, or None: the certificate
    must be one the CA signed for a host and not revoked; an instance it names must be bound to that host."""
    with store.read() as conn:
        row = conn.execute(select(C.c.host, C.c.revoked_at).where(C.c.serial == serial_key(serial))).first()
        if row is None or row.host != host:
            return f"certificate {serial:x} of host {host} was not issued to a host by this cloud"
        if row.revoked_at is not None:
            return f"certificate {serial:x} of host {host} was revoked at {common.fmt_time(row.revoked_at)}"
        if instance_id is not None:
            bound = conn.execute(select(t.instances.c.host).where(t.instances.c.id == instance_id)).scalar()
            if bound is not None and bound != host:
                return f"host {host} may not act for instance {instance_id} (bound to another host)"
    return None


def certificate_table(store: Store) -> dict[int, tuple[str, bool]]:
    """Every certificate the CA signed for a host: serial -> (host, revoked)."""
    with store.read() as conn:
        rows = conn.execute(select(C.c.serial, C.c.host, C.c.revoked_at)).all()
    return {int(row.serial, 16): (row.host, row.revoked_at is not None) for row in rows}
