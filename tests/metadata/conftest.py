"""Fixtures for the metadata API: the REST API and the metadata API on one live store, and a booted instance."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cloudnet.metadata.model import Settings
from cloudnet.metadata.server import MetadataApp
from tests.support.api import create
from tests.support.metadata import Guest, RunningMetadata
from tests.support.server import RunningServer

SECRET = "metadata-test-secret"
VENDOR = {"cloud-init": "#cloud-config\nruncmd: [echo vendor]\n", "site": "lab-1"}
USER_DATA = "#cloud-config\nhostname: from-user-data\n"
KEYS = [{"name": "k1", "key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK1 one@example"},
        {"name": "k2", "key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK2 two@example"}]  # fmt: skip


@pytest.fixture
def metadata(server: RunningServer) -> Iterator[RunningMetadata]:
    """The metadata API on the REST API's store (so REST commits reach its cache through `on_commit`);
    the revision poll is quick so that commits made behind its back are also seen in tests' time."""
    app = MetadataApp(server.store, SECRET, Settings(vendor_data=VENDOR), poll_interval=0.05)
    running = RunningMetadata.start(app)
    yield running
    running.stop()


@pytest.fixture
def md(metadata: RunningMetadata) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=metadata.url, timeout=10) as client:
        yield client


@pytest.fixture
def host(api: httpx.Client) -> str:
    r = api.put("/hosts/node-1", json={"host": {"agent_version": "test"}})
    assert r.status_code == 200, r.text
    return "node-1"


@pytest.fixture
def network(api: httpx.Client) -> tuple[dict[str, Any], dict[str, Any]]:
    net = create(api, "networks", "network", name="md-net", mtu=1450)
    sub = create(api, "subnets", "subnet", network_id=net["id"], cidr="10.70.0.0/24", name="md-sub",
                 dns_nameservers=["10.70.0.53"],
                 host_routes=[{"destination": "172.16.0.0/16", "nexthop": "10.70.0.254"}])  # fmt: skip
    return net, sub


@pytest.fixture
def instance(api: httpx.Client, host: str, network: tuple[dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
    net, _sub = network
    return create(api, "instances", "instance", name="vm1", hostname="vm1", netns="ns-vm1", host=host,
                  user_data=USER_DATA, metadata={"role": "web"}, ssh_keys=KEYS,
                  nets=[{"network": net["id"], "v4-fixed-ip": "10.70.0.10"}])  # fmt: skip


@pytest.fixture
def guest(md: httpx.Client, instance: dict[str, Any]) -> Guest:
    return Guest(md, SECRET, instance)
