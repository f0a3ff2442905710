"""Address scopes on OVN, with real traffic on one chassis (as tests/ovn/test_traffic.py's rig): no SNAT row for a
subnet in the external subnet's scope (routed out with its own address, and in), SNAT as before for the others, and
drop policies between subnets of different scopes behind the router (tests/support/scope_site.py). What OVN's
router policies cannot tell apart (a new connection from outside into another scope from a reply) stays open."""

from __future__ import annotations

from pathlib import Path

from cloudnet.dataplane.ovn import veth
from tests.support.cloud import ping
from tests.support.ovn_site import ovn_site
from tests.support.scope_site import OUT, check_scopes, scope_site


def test_scopes_decide_nat_and_reach_on_ovn(tmp_path: Path, sqlite_template: Path) -> None:
    with ovn_site(tmp_path / "state", sqlite_template) as site:
        cloud, sandbox = site.cloud, site.sandbox
        outside = cloud.outside("physnet1", f"{OUT}/24")
        veth.tx_checksum_off(outside, "eth0")  # (the userspace datapath completes no partial checksums)
        with site.agent(), scope_site(cloud, outside) as scopes:
            cloud.wait_for(lambda: ping(outside, scopes.gateway, wait=1), timeout=30, what="the gateway")

            def settled() -> None:
                site.sync.wait_synced()
                sandbox.nbctl("--wait=hv", "sync")
                sandbox.flush_datapath_caches()

            check_scopes(scopes, settled, 0.5, outside_kept_out=False)
            nats = sandbox.nbctl("--columns=logical_ip", "find", "NAT", "type=snat")
            assert "10.72.0.0/24" not in nats and "10.74.0.0/24" in nats
