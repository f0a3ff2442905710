"""IMDSv2 session tokens (`PUT /latest/api/token`), self-validating so that no server has to remember them.

A token is `base64url(expiry_ms | nonce | mac)` with `mac = HMAC-SHA256(key, instance_id | expiry_ms | nonce)`
truncated to 16 bytes, the key derived from the deployment's shared secret. Any `cloudnet serve` holding the
secret accepts a token another one issued (several stateless servers, or one restarted), a token is bound to
the instance it was issued to, and nothing grows with the number of tokens handed out.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import struct
import time
from collections.abc import Callable

MIN_TTL = 1
MAX_TTL = 21600  # six hours, AWS's ceiling
TTL_HEADER = "x-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "x-aws-ec2-metadata-token"
_PAYLOAD = struct.Struct("!Q8s")  # expiry in ms since the epoch, random nonce
_MAC_LEN = 16
_TOKEN_LEN = _PAYLOAD.size + _MAC_LEN


def parse_ttl(value: str | None) -> int | None:
    """The requested lifetime in seconds, or None when absent or outside 1..21600 (AWS answers 400)."""
    if value is None:
        return None
    value = value.strip()
    if not value.isascii() or not value.isdigit():
        return None
    ttl = int(value)
    return ttl if MIN_TTL <= ttl <= MAX_TTL else None


class TokenIssuer:
    def __init__(self, secret: str, clock: Callable[[], float] = time.time) -> None:
        if not secret:
            raise ValueError("an IMDSv2 token key needs a non-empty secret")
        # A key of its own: a token can never double as an instance signature, nor the other way round.
        self._key = hmac.new(secret.encode(), b"cloudnet imdsv2 session token", hashlib.sha256).digest()
        self._clock = clock

    def _mac(self, instance_id: str, payload: bytes) -> bytes:
        return hmac.new(self._key, instance_id.encode() + b"|" + payload, hashlib.sha256).digest()[:_MAC_LEN]

    def issue(self, instance_id: str, ttl: int) -> str:
        expiry = int((self._clock() + ttl) * 1000)
        payload = _PAYLOAD.pack(expiry, os.urandom(8))
        return base64.urlsafe_b64encode(payload + self._mac(instance_id, payload)).decode().rstrip("=")

    def valid(self, instance_id: str, token: str) -> bool:
        """Issued by a holder of the secret, for this instance, and not yet expired."""
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (binascii.Error, ValueError):
            return False
        if len(raw) != _TOKEN_LEN:
            return False
        payload, mac = raw[: _PAYLOAD.size], raw[_PAYLOAD.size :]
        if not hmac.compare_digest(mac, self._mac(instance_id, payload)):
            return False
        expiry_ms, _nonce = _PAYLOAD.unpack(payload)
        return bool(expiry_ms > self._clock() * 1000)
