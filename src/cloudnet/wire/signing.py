"""The identity signature between the metadata proxy and the metadata API, and the secret behind it.

The proxy vouches for "this request comes from instance X" by sending
`X-Instance-ID-Signature: hex(HMAC-SHA256(secret, X))` (neutron's `sign_instance_id`); the API recomputes it
and compares in constant time (nova's `_validate_shared_secret`). An empty secret would still produce a
valid-looking HMAC, so it is refused outright instead of merely logged as nova does.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
from pathlib import Path


class SecretError(RuntimeError):
    """The shared secret is missing, empty or unreadable: nothing may be signed or checked with it."""


def _key(secret: str) -> bytes:
    if not secret:
        raise SecretError("the metadata shared secret is empty: refusing to sign or verify instance identities")
    return secret.encode()


def sign(secret: str, instance_id: str) -> str:
    """Lowercase hex HMAC-SHA256 of the instance id (64 characters)."""
    return hmac.new(_key(secret), instance_id.encode(), hashlib.sha256).hexdigest()


def verify(secret: str, instance_id: str, signature: str) -> bool:
    """Constant-time check; an empty or malformed signature never matches."""
    if not signature:
        return False
    expected = sign(secret, instance_id)
    # compare_digest wants ASCII str or bytes: a non-ASCII header value is simply a mismatch.
    return hmac.compare_digest(expected.encode(), signature.encode("utf-8", "surrogateescape"))


def read_secret(path: Path) -> str:
    """The secret in `path` (surrounding whitespace ignored); an empty or missing one is an error."""
    try:
        value = path.read_text().strip()
    except FileNotFoundError:
        raise SecretError(f"metadata secret {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SecretError(f"cannot read metadata secret {path}: {exc}") from None
    if not value:
        raise SecretError(
            f"metadata secret {path} is empty: write a shared secret into it, or delete it to have one generated"
        )
    return value


def load_or_create_secret(path: Path) -> str:
    """The secret of this deployment, generated at first start into `path` (`<state>/metadata_secret`, 0600).

    Agents on other hosts need the same value (copy the file): the proxy signs with it, the API checks."""
    state_dir = path.parent
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists():
        # Written to a private temporary file, then linked into place: link() fails if the name exists, so two
        # servers starting at once on one state dir agree on one secret and nobody ever reads a half-written one.
        tmp = state_dir / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32) + "\n")
                f.flush()
                os.fsync(f.fileno())
            with contextlib.suppress(FileExistsError):  # another server won the race: use its secret
                os.link(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    if path.stat().st_mode & 0o077:
        os.chmod(path, 0o600)  # a secret readable by others is no secret: tighten it rather than refuse to start
    return read_secret(path)
