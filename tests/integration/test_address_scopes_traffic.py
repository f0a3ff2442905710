"""Address scopes on a router of the Linux dataplane, with real traffic, as Neutron's L3 agent treats them: a subnet
in the external subnet's scope reaches the outside with its own address (routed, no SNAT) and is reachable from it;
one in another scope is SNATed as before and the outside cannot open connections to it; new connections between
internal subnets of different scopes (no scope counting as one of its own) are dropped, replies never are
(tests/support/scope_site.py)."""

from __future__ import annotations

from cloudnet.dataplane.linux import names
from tests.support.cloud import Cloud, ns_run
from tests.support.scope_site import OUT, check_scopes, scope_site


def test_scopes_decide_nat_and_reach(cloud: Cloud) -> None:
    outside = cloud.outside("physnet1", f"{OUT}/24")
    cloud.start_agent()
    with scope_site(cloud, outside) as site:
        check_scopes(site, lambda: None, 1.0, outside_kept_out=True)
        ruleset = ns_run(names.router_ns(cloud.host, site.router["id"]), "nft", "list", "ruleset").stdout
        assert "oifname != {" in ruleset  # (n is still kept apart from the others)
