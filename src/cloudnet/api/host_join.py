"""Joining hosts: an admin issues a join token for a host name; the new host fetches the CA (checking it against
the fingerprint its token carries), then redeems the token with a certificate request over TLS it now verifies, and
gets its certificate and what its agent needs; `remove` revokes a host's certificates and forgets it."""

from __future__ import annotations

import logging

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from cloudnet.api import neutron
from cloudnet.api.deps import AppState, call, context, state
from cloudnet.errors import Forbidden, NotFound, ServiceUnavailable
from cloudnet.pki import cloud, crl
from cloudnet.pki.join_token import CA_PATH, CRL_PATH, JOIN_PATH, RENEW_PATH
from cloudnet.pki.tls import PEER_KEY, Peer
from cloudnet.pki.x509 import Authority, PkiError
from cloudnet.services.hosts import host_join, hosts
from cloudnet.wire import signing

log = logging.getLogger(__name__)
router = APIRouter()
PEM_TYPE = "application/x-pem-file"


class TlsRequired(Forbidden):
    type = "TlsRequired"


class CertificateRequired(Forbidden):
    type = "HostCertificateRequired"


def _authority(st: AppState) -> Authority:
    if st.authority is None:  # (an app made without one, as tests make them: the state dir's, made on first use)
        try:
            st.authority = cloud.authority(st.config)
        except (PkiError, OSError) as exc:
            log.error("no CA: %s", exc)
            raise ServiceUnavailable(
                "This server's CA cannot be read: hosts cannot join it", type="NoAuthority"
            ) from None
    return st.authority


@router.get(CA_PATH)
async def ca_certificate(request: Request) -> Response:
    return Response(_authority(state(request)).pem, media_type=PEM_TYPE)


@router.get(CRL_PATH)
async def revocation_list(request: Request) -> Response:
    """The CA's CRL (DER), for hosts that cannot read the store (`cloudnet ovn join` members' TLS fronts): read over
    a host certificate the guard has checked (this cloud's, not revoked), never in clear nor with a token alone."""
    st = state(request)
    if request.scope.get(PEER_KEY) is None:
        raise CertificateRequired("The revocation list is read over a host certificate (TLS client certificate)")
    der = await call(st.crl.der, st.store, _authority(st))
    return Response(der, media_type=crl.MEDIA_TYPE, headers={"Cache-Control": "no-store"})


@router.post("/v2.0/hosts/{name}/join-tokens")
async def issue_token(request: Request, name: str) -> Response:
    st = state(request)
    body = neutron.unwrap_one(await neutron.body_of(request), "join_token")
    item = await call(host_join.issue_token, st.store, context(request), name, body, _authority(st).fingerprint)
    return neutron.JSON({"join_token": item}, status_code=201)


@router.post(JOIN_PATH)
async def join(request: Request) -> Response:
    st = state(request)
    authority = _authority(st)
    if request.url.scheme != "https":  # a token and a secret are never answered in clear
        raise TlsRequired("Joins need the API over TLS (cloudnet serve --tls)")
    body = neutron.unwrap_one(await neutron.body_of(request), "join")
    config = st.config
    item = await call(host_join.redeem, st.store, body, authority, tuple(config.ovn_cluster), config.ovn_listen)
    # The metadata secret: the agent's proxy signs instance identities with it (wire/signing.py); handed over this
    # once on the authenticated channel, so that nobody copies secret files between hosts.
    secret = None
    if config.metadata_listen != "off":
        secret = await call(signing.read_secret, config.metadata_secret_file)
    item.update(ca=authority.pem.decode(), ovn_sb=config.ovn_remote_sb, metadata_listen=config.metadata_listen,
                metadata_secret=secret)  # fmt: skip
    return neutron.JSON({"join": item}, status_code=201)


@router.post(RENEW_PATH)
async def renew(request: Request, name: str) -> Response:
    """A new certificate for a joined host, for a key it made, authenticated by its current certificate only (the
    guard has checked it is this host's, and not revoked): a token is not enough, nor an admin's."""
    st = state(request)
    peer: Peer | None = request.scope.get(PEER_KEY)
    if peer is None:
        raise CertificateRequired("A host renews its certificate over its current one (TLS client certificate)")
    body = neutron.unwrap_one(await neutron.body_of(request), "certificate")
    item = await call(host_join.renew, st.store, _authority(st), peer.host, peer.serial, name, body,
                      tuple(st.config.ovn_cluster), st.config.ovn_listen)  # fmt: skip
    return neutron.JSON({"certificate": item}, status_code=201)


@router.post("/v2.0/hosts/{name}/remove")
async def remove(request: Request, name: str) -> Response:
    """Revoke the host's certificates, then forget it (its agent can no longer register again)."""
    st = state(request)
    revoked = await call(host_join.revoke_host, st.store, context(request), name)
    freed = 0
    try:
        freed = await call(hosts.delete_host, st.store, context(request), name, st.config.agent_down_time, True)
    except NotFound as exc:  # never registered (joined, never ran): revoked all the same
        log.info("host %s had not registered: %s", name, exc)
    return neutron.JSON({"host": {"name": name, "certificates_revoked": revoked, "pool_ports_freed": freed}})
