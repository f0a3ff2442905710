"""One OVN host as most OVN test modules need it: a real server (`--dataplane ovn`, SQLite from the template), an
OVN sandbox with one chassis, the server's northbound writer on it, and a Cloud for the chassis's host; the agent
(`site.agent()`) once the test has wired what it needs (an outside on an uplink: `site.cloud.outside(...)`)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from cloudnet.agent.agent import Agent
from cloudnet.config import ServerConfig
from cloudnet.dataplane.ovn.driver import OvnDataplane
from cloudnet.northbound.sync import NorthboundSync
from cloudnet.ovn import daemons
from cloudnet.store.db import Store
from tests.support.cloud import Cloud, running_agent
from tests.support.ovn import OvnSandbox, ovn_sandbox
from tests.support.server import RunningServer


@dataclass
class OvnSite:
    sandbox: OvnSandbox
    chassis: daemons.Chassis
    cloud: Cloud
    sync: NorthboundSync

    @contextlib.contextmanager
    def agent(self) -> Iterator[Agent]:
        """The chassis's agent, its uplinks those the cloud has (reported, so the host becomes a gateway)."""
        uplinks = dict(self.cloud.uplinks)
        dataplane = OvnDataplane(self.chassis.name, self.chassis.ovs_url, self.sandbox.sb_url,
                                 host_ns=self.chassis.netns, uplinks=uplinks)  # fmt: skip
        try:
            with running_agent(self.cloud.server.url, self.chassis.name, dataplane,
                               report={"uplinks": uplinks} if uplinks else None) as agent:  # fmt: skip
                yield agent
        finally:
            dataplane.close()


@contextlib.contextmanager
def ovn_site(state: Path, sqlite_template: Path) -> Iterator[OvnSite]:
    state.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(sqlite_template, state / "cloudnet.db")
    config = ServerConfig(state_dir=state)
    config.dataplane = "ovn"
    store = Store(f"sqlite:///{state / 'cloudnet.db'}")
    server = RunningServer.start(config, store)
    api = httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=30)
    try:
        with ovn_sandbox() as sandbox:
            chassis = sandbox.add_chassis()  # (no bridge mappings: the agent's uplinks make them)
            cloud = Cloud(api=api, server=server, host=chassis.name, suffix=uuid.uuid4().hex[:6])
            # No gateway chassis configured: an agent reporting an uplink makes its host the gateway.
            sync = NorthboundSync(store, sandbox.nb_url, [], interval=0.1)
            sync.start()
            try:
                yield OvnSite(sandbox, chassis, cloud, sync)
            finally:
                sync.stop()
                cloud.remove_namespaces()
                for link in cloud.root_links:  # (moved into the chassis' namespace: gone with it, else here)
                    subprocess.run(["ip", "link", "del", link], capture_output=True)
    finally:
        api.close()
        server.stop()
        store.dispose()
