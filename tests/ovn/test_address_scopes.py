"""Address scopes on OVN, with real traffic on one chassis (as tests/ovn/test_traffic.py's rig): no SNAT row for a
subnet in the external subnet's scope (routed out with its own address, and in), SNAT as before for the others, and
drop policies between subnets of different scopes behind the router (tests/support/scope_site.py). What OVN's
router policies cannot tell apart (a new connection from outside into another scope from a reply) stays open."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import httpx

from cloudnet.config import ServerConfig
from cloudnet.dataplane.ovn import veth
from cloudnet.dataplane.ovn.driver import OvnDataplane
from cloudnet.northbound.sync import NorthboundSync
from cloudnet.store.db import Store
from tests.support.cloud import Cloud, ping, running_agent
from tests.support.ovn import ovn_sandbox
from tests.support.scope_site import OUT, check_scopes, scope_site
from tests.support.server import RunningServer


def test_scopes_decide_nat_and_reach_on_ovn(tmp_path: Path, sqlite_template: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    shutil.copyfile(sqlite_template, state / "cloudnet.db")
    config = ServerConfig(state_dir=state)
    config.dataplane = "ovn"
    store = Store(f"sqlite:///{state / 'cloudnet.db'}")
    server = RunningServer.start(config, store)
    api = httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=30)
    try:
        with ovn_sandbox() as sandbox:
            chassis = sandbox.add_chassis()
            cloud = Cloud(api=api, server=server, host=chassis.name, suffix=uuid.uuid4().hex[:6])
            sync = NorthboundSync(store, sandbox.nb_url, [], interval=0.1)
            sync.start()
            dataplane = None
            try:
                outside = cloud.outside("physnet1", f"{OUT}/24")
                veth.tx_checksum_off(outside, "eth0")  # (the userspace datapath completes no partial checksums)
                dataplane = OvnDataplane(chassis.name, chassis.ovs_url, sandbox.sb_url, host_ns=chassis.netns,
                                         uplinks=dict(cloud.uplinks))  # fmt: skip
                with (
                    running_agent(server.url, chassis.name, dataplane, report={"uplinks": dict(cloud.uplinks)}),
                    scope_site(cloud, outside) as site,
                ):
                    cloud.wait_for(lambda: ping(outside, site.gateway, wait=1), timeout=30, what="the gateway")

                    def settled() -> None:
                        sync.wait_synced()
                        sandbox.nbctl("--wait=hv", "sync")
                        sandbox.flush_datapath_caches()

                    check_scopes(site, settled, 0.5, outside_kept_out=False)
                    nats = sandbox.nbctl("--columns=logical_ip", "find", "NAT", "type=snat")
                    assert "10.72.0.0/24" not in nats and "10.74.0.0/24" in nats
            finally:
                if dataplane is not None:
                    dataplane.close()
                sync.stop()
                cloud.remove_namespaces()
                for link in cloud.root_links:
                    subprocess.run(["ip", "link", "del", link], capture_output=True)
    finally:
        api.close()
        server.stop()
        store.dispose()
