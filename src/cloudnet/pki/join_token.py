"""Join tokens: `<id>.<secret>.<CA fingerprint>`.

The id finds the token's row; the secret proves it (the store keeps its SHA-256 only); the fingerprint (SHA-256 of
the CA certificate, as kubeadm's discovery hash) lets a joining host authenticate the server before it sends the
secret: it fetches the CA, checks it against the fingerprint, and from then on trusts only servers that CA signed.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

# The API's join routes (api/host_join.py), public: the CA certificate is no secret, and a join authenticates with
# its token.
CA_PATH = "/v2.0/host-join/ca"
JOIN_PATH = "/v2.0/host-join"
RENEW_PATH = "/v2.0/hosts/{name}/certificates"  # a joined host's renewal, over its current certificate
CRL_PATH = "/v2.0/host-join/crl"  # the CA's revocation list (pki/crl.py), for a host certificate only
_TOKEN = re.compile(r"^([0-9a-f]{12})\.([A-Za-z0-9_-]{32,64})\.([0-9a-f]{64})$")


class TokenFormatError(ValueError):
    pass


@dataclass(frozen=True)
class JoinToken:
    id: str
    secret: str
    ca_fingerprint: str

    def __str__(self) -> str:
        return f"{self.id}.{self.secret}.{self.ca_fingerprint}"

    @property
    def secret_hash(self) -> str:
        return hash_secret(self.secret)


def new(ca_fingerprint: str) -> JoinToken:
    return JoinToken(secrets.token_hex(6), secrets.token_urlsafe(32), ca_fingerprint)


def parse(text: str) -> JoinToken:
    match = _TOKEN.match(text.strip())
    if match is None:
        raise TokenFormatError("a join token looks like <12 hex>.<secret>.<64 hex> (from `cloudnet host join-token`)")
    return JoinToken(*match.groups())


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def matches(secret: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_secret(secret).encode(), stored_hash.encode())
