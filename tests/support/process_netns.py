"""Run a test's own process in a throwaway network namespace.

The agent refuses to plug an instance into its own namespace or the host's. A test that asks it to must not
bet the machine on that refusal: with the process (its main thread, which `/proc/<pid>/ns/net` names) moved into
a namespace of the test's own, "the agent's own namespace" is a throwaway one. Threads started afterwards (the
API server, the agent) start there too; the named namespaces cloudnet makes are unaffected.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import uuid
from collections.abc import Iterator

from cloudnet.dataplane.linux import netns

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


@contextlib.contextmanager
def process_in_throwaway_netns() -> Iterator[str]:
    """Move the calling (main) thread into a new namespace with `lo` up; yields its name; always comes back."""
    name = f"cntest-proc-{uuid.uuid4().hex[:8]}"
    netns.create(name)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    target = netns.fd_of(name)
    try:
        _setns(target)
        try:
            yield name
        finally:
            _setns(own)
    finally:
        os.close(target)
        os.close(own)
        netns.remove(name)
