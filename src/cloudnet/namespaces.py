"""Names of the network namespaces cloudnet reserves and provides.

Shared by the control plane, which refuses reserved names and hands out a fresh name for an instance that names
none, and the host agent, which makes and removes those namespaces (dataplane/linux/names.py has the rest).
"""

from __future__ import annotations

import hashlib
import uuid

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
