"""A small test harness around one host agent and the namespaces a test creates."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from cloudnet.agent.agent import Agent
from cloudnet.agent.client import ApiClient
from cloudnet.dataplane.base import metadata_ns_prefix
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux.driver import LinuxDataplane
from cloudnet.namespaces import managed_ns_prefix
from tests.support.server import RunningServer


def ns_run(
    ns: str, *cmd: str, timeout: float = 20, check: bool = False, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True, timeout=timeout,
                          check=check, input=input)  # fmt: skip


def ping(ns: str, address: str, count: int = 1, wait: float = 1.0) -> bool:
    return ns_run(ns, "ping", "-n", "-c", str(count), "-W", str(wait), address).returncode == 0


@contextlib.contextmanager
def running_agent(
    url: str,
    host: str,
    dataplane: Any,
    report: dict[str, Any] | None = None,
    observers: list[Any] | None = None,
    resync_interval: float = 60.0,
) -> Iterator[Agent]:
    """The host's real agent on its own thread, through its first sync; stopped on the way out."""
    agent = Agent(ApiClient(url, host, "admin"), dataplane, report=report, heartbeat_interval=0.5, poll_timeout=1,
                  observers=observers, resync_interval=resync_interval)  # fmt: skip
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    try:
        if not agent.synced.wait(15):
            raise RuntimeError("agent did not complete its first sync")
        yield agent
    finally:
        agent.stop()
        thread.join(timeout=40)
        agent.client.close()


@dataclass
class Cloud:
    api: httpx.Client
    server: RunningServer
    host: str
    suffix: str
    uplinks: dict[str, str] = field(default_factory=dict)
    namespaces: list[str] = field(default_factory=list)
    root_links: list[str] = field(default_factory=list)
    agent: Agent | None = None
    _running: contextlib.ExitStack | None = None

    # -- agent --

    def start_agent(
        self, observers: list[Any] | None = None, park: bool = False, resync_interval: float = 60.0,
        vm_owner: tuple[int, int] = (0, 0),
    ) -> Agent:  # fmt: skip
        self._running = contextlib.ExitStack()
        dataplane = LinuxDataplane(self.host, self.uplinks, park=park, vm_owner=vm_owner)
        self.agent = self._running.enter_context(
            running_agent(self.server.url, self.host, dataplane, observers=observers, resync_interval=resync_interval)
        )
        return self.agent

    def stop_agent(self) -> None:
        if self._running is not None:
            self._running.close()
        self.agent, self._running = None, None

    # -- topology --

    def remove_namespaces(self) -> None:
        """The test's namespaces, and those this host's agent made (metadata, managed instances): an agent stopped
        with instances still there leaves its own behind (on OVN, nothing else removes them)."""
        for name in self.namespaces:
            netns.remove(name)
        for prefix in (metadata_ns_prefix(self.host), managed_ns_prefix(self.host)):
            for name in netns.names(prefix):
                netns.remove(name)

    def namespace(self, label: str) -> str:
        name = f"cntest-{label}-{self.suffix}"
        netns.ensure(name)
        self.namespaces.append(name)
        return name

    def outside(self, physnet: str = "physnet1", cidr: str = "192.0.2.1/24") -> str:
        """A namespace playing "the outside", wired to an uplink interface the agent bridges."""
        ns = self.namespace("out")
        uplink = f"cnup{self.suffix}"
        subprocess.run(["ip", "link", "add", uplink, "type", "veth", "peer", "name", "eth0", "netns", ns], check=True)
        self.root_links.append(uplink)
        ns_run(ns, "ip", "addr", "add", cidr, "dev", "eth0", check=True)
        ns_run(ns, "ip", "link", "set", "eth0", "up", check=True)
        self.uplinks[physnet] = uplink
        return ns

    def create(self, collection: str, member: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.api.post(f"/{collection}", json={member: body})
        assert r.status_code == 201, r.text
        return dict(r.json()[member])

    def network(self, name: str, cidr: str, **extra: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        net = self.create("networks", "network", {"name": name, **extra})
        sub = self.create("subnets", "subnet", {"network_id": net["id"], "cidr": cidr, "name": f"{name}-sub"})
        return net, sub

    def instance(self, name: str, nets: list[dict[str, Any]], netns_name: str | None = None) -> dict[str, Any]:
        ns = netns_name or self.namespace(name)
        inst = self.create("instances", "instance", {"name": name, "host": self.host, "netns": ns, "nets": nets})
        return self.wait_active(inst["id"])

    def wait_active(self, instance_id: str, timeout: float = 15) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:  # readiness: the agent reported every port ACTIVE
            inst = self.api.get(f"/instances/{instance_id}").json()["instance"]
            if inst["status"] == "ACTIVE":
                return dict(inst)
            if time.monotonic() > deadline:
                raise AssertionError(f"instance {instance_id} not ACTIVE after {timeout}s: {inst}")
            time.sleep(0.02)

    def wait_for(self, check: Any, timeout: float = 15, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.02)
