"""Names of the network namespaces cloudnet reserves and provides.

Shared by the control plane, which refuses reserved names and hands out a fresh name for an instance that names
none, and the host agent, which makes and removes those namespaces (dataplane/linux/names.py has the rest).
"""

from __future__ import annotations

import hashlib
import uuid

# Where named namespaces live (`ip netns`), under either spelling.
NETNS_DIRS = ("/run/netns/", "/var/run/netns/")
RESERVED_NS_PREFIX = "cloudnet-"  # callers may not name their namespaces so
# Namespaces cloudnet provides: an instance's, when its create named none, and each parked pool device's own
# (handed to the instance that claims the port). The name is chosen once, at random, and never reused.
MANAGED_NS_PREFIX = "cloudnet-ns-"


def managed_ns_prefix(host: str) -> str:
    # Per host, like routers: two agents on one machine never collect each other's namespaces.
    return f"{MANAGED_NS_PREFIX}{hashlib.sha1(host.encode()).hexdigest()[:6]}-"


def new_managed_ns(host: str) -> str:
    """A fresh name for a namespace cloudnet provides on `host`."""
    return managed_ns_prefix(host) + uuid.uuid4().hex


def is_managed_ns(host: str, name: str) -> bool:
    return name.startswith(managed_ns_prefix(host))


def spelled(value: str) -> str:
    """The path a namespace name (under /run/netns) or an absolute path stands for, spelt plainly (no NUL or white
    space; no '.', '..' or empty components); ValueError otherwise. What the path holds is the host agent's to check
    before it enters it (dataplane/kernel/ns_guard.py)."""
    if "\x00" in value or any(c.isspace() for c in value):
        raise ValueError("a namespace name or path has no NUL or white space")
    if "/" not in value:
        if value in ("", ".", ".."):
            raise ValueError(f"{value!r} is not a namespace name")
        return NETNS_DIRS[0] + value
    parts = value.split("/")
    if not value.startswith("/") or "" in parts[1:] or any(p in (".", "..") for p in parts):
        raise ValueError("a namespace path must be absolute, without '.', '..' or empty components")
    return value


def is_reserved(path: str) -> bool:
    """A namespace path (as `spelled` gives it) names one cloudnet makes: callers may not name those."""
    name = next((path[len(d) :] for d in NETNS_DIRS if path.startswith(d)), None)
    return name is not None and name.startswith(RESERVED_NS_PREFIX)
