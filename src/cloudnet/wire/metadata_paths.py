"""How a metadata request path reads, as nova reads it: the part the metadata API (metadata/trees.py) and the
agent's proxy (agent/metadata/guest.py, which refuses forwarded IMDSv2 token requests) must agree on."""

from __future__ import annotations

import functools
import posixpath


@functools.lru_cache(maxsize=1024)  # guests ask the same few dozen paths over and over
def tokens(path: str) -> tuple[str, ...]:
    """Nova's path handling: normalised (trailing slashes and `..` collapse), and EC2 unless it says otherwise.
    `/` is `("ec2",)`."""
    norm = posixpath.normpath("/" + path.lstrip("/"))
    parts = [p for p in norm.split("/") if p]
    if not parts or parts[0] not in ("ec2", "openstack"):
        parts.insert(0, "ec2")
    return tuple(parts)


def is_token_request(path: str) -> bool:
    """IMDSv2's `PUT /latest/api/token` (exactly that path, as AWS serves it)."""
    return tokens(path) == ("ec2", "latest", "api", "token")
