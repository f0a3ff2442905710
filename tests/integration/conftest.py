"""Fixtures for tests that touch the kernel: a server, this test's own agent, and throwaway namespaces."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator

import httpx
import pytest

from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux import nft
from cloudnet.dataplane.linux.driver import LinuxDataplane
from tests.support.cloud import Cloud
from tests.support.forward_site import Site, forward_site
from tests.support.server import RunningServer
from tests.support.vm_fixtures import accelerator, tiny_guest, vms  # noqa: F401 -- fixtures of VM tests


@pytest.fixture
def backend() -> str:
    """Kernel tests exercise the dataplane, not the database: SQLite only."""
    return "sqlite"


@pytest.fixture(autouse=True)
def _needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")


@pytest.fixture
def cloud(server: RunningServer, api: httpx.Client) -> Iterator[Cloud]:
    """A host agent of the test's own (unique host name) plus helpers to build topologies."""
    suffix = uuid.uuid4().hex[:6]
    c = Cloud(api=api, server=server, host=f"h-{suffix}", suffix=suffix)
    try:
        yield c
    finally:
        c.stop_agent()
        LinuxDataplane(c.host).teardown()
        for name in c.namespaces:
            netns.remove(name)
        for link in c.root_links:
            subprocess.run(["ip", "link", "del", link], capture_output=True)


@pytest.fixture
def site(cloud: Cloud) -> Iterator[Site]:
    """Forwards' world (tests/support/forward_site.py), with this test's agent running."""
    with forward_site(cloud) as s:
        yield s


@pytest.fixture
def ns() -> Iterator[str]:
    """An empty namespace of this test's own (nftables tests), removed with its libnftables context."""
    name = f"cnt-nft-{uuid.uuid4().hex[:8]}"
    netns.ensure(name)
    try:
        yield name
    finally:
        nft.forget(name)
        netns.remove(name)
