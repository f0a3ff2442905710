"""Run a test's own process in a throwaway network namespace.

The agent refuses to plug an instance into its own namespace or the host's. A test that asks it to must not
bet the machine on that refusal: with the process (its main thread, which `/proc/<pid>/ns/net` names) moved into
a namespace of the test's own, "the agent's own namespace" is a throwaway one. Threads started afterwards (the
API server, the agent) start there too; the named namespaces cloudnet makes are unaffected.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

from cloudnet.dataplane.kernel import netns


@contextlib.contextmanager
def process_in_throwaway_netns() -> Iterator[str]:
    """Move the calling (main) thread into a new namespace with `lo` up; yields its name; always comes back."""
    name = f"cntest-proc-{uuid.uuid4().hex[:8]}"
    netns.create(name)
    try:
        with netns.entered(name):
            yield name
    finally:
        netns.remove(name)
