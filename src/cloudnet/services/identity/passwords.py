"""Password hashes of the tokens file's users: scrypt (stdlib), never the password itself at rest.

The stored form is `scrypt$N$r$p$SALT$KEY` (salt and key in unpadded base64url), so the cost can be raised later
without breaking hashes already written. Checking takes the same time whether the user exists or not: an unknown
user is checked against a dummy hash of the same cost.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

SCHEME = "scrypt"
# 2^14 x 8 x 1: 16 MiB and ~50 ms a check, the usual interactive-login cost; a failed-attempt limit bounds how
# often anyone can make the server pay it (services/identity/keystone.py).
COST = (1 << 14, 8, 1)
MAX_PASSWORD = 4096  # characters: an unbounded password would make hashing a denial of service
_MAXMEM = 64 * 1024 * 1024


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _derive(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, maxmem=_MAXMEM, dklen=32)


def hash_password(password: str) -> str:
    if not password or len(password) > MAX_PASSWORD:
        raise ValueError(f"a password has 1-{MAX_PASSWORD} characters")
    n, r, p = COST
    salt = secrets.token_bytes(16)
    return f"{SCHEME}${n}${r}${p}${_b64(salt)}${_b64(_derive(password, salt, n, r, p))}"


def parse_hash(encoded: str) -> tuple[int, int, int, bytes, bytes]:
    """The parts of a stored hash; ValueError when it is not one this module writes (checked when the file is
    read, so a typo in the tokens file is reported then, not taken for a wrong password)."""
    parts = encoded.split("$") if isinstance(encoded, str) else []
    if len(parts) != 6 or parts[0] != SCHEME:
        raise ValueError(f"password_hash must look like {SCHEME}$N$r$p$SALT$KEY (see `cloudnet user set`)")
    n, r, p = (int(x) for x in parts[1:4])
    if n < 2 or n & (n - 1) or n > 1 << 20 or not 1 <= r <= 32 or not 1 <= p <= 16 or 128 * n * r * p > _MAXMEM:
        raise ValueError("password_hash has an unsupported scrypt cost")
    salt, key = _unb64(parts[4]), _unb64(parts[5])
    if len(salt) < 8 or len(key) != 32:
        raise ValueError("password_hash has a malformed salt or key")
    return n, r, p, salt, key


_DUMMY = parse_hash(f"{SCHEME}${COST[0]}${COST[1]}${COST[2]}${_b64(bytes(16))}${_b64(bytes(32))}")


def verify_password(password: str, encoded: str | None) -> bool:
    """Whether `password` matches `encoded` (None: an unknown user, which never matches but costs the same)."""
    n, r, p, salt, key = _DUMMY if encoded is None else parse_hash(encoded)
    candidate = password if password and len(password) <= MAX_PASSWORD else ""
    derived = _derive(candidate, salt, n, r, p)
    return hmac.compare_digest(derived, key) and encoded is not None and bool(candidate)
