"""The northbound writer's passes and the rows they write, in /metrics, against a real OVN sandbox."""

from __future__ import annotations

import httpx

from cloudnet.northbound.sync import NorthboundSync
from tests.ovn.nb import as_list, keyed
from tests.ovn.test_northbound import topology
from tests.ovn.test_northbound_policy import site
from tests.support.ovn import OvnSandbox
from tests.support.scrape import scrape
from tests.support.server import RunningServer

PASSES = "cloudnet_northbound_pass_duration_seconds_count"
ROWS = "cloudnet_northbound_rows_written_total"


def test_passes_and_rows_written_are_counted(
    api: httpx.Client, server: RunningServer, ovn: OvnSandbox, nb_sync: NorthboundSync
) -> None:
    assert nb_sync.wait_synced().ok
    before = scrape(server.url)
    topology(api)  # two switches, a router, their ports: rows NB did not have
    assert nb_sync.wait_synced().ok
    after = scrape(server.url)
    assert after.value(PASSES) > before.value(PASSES)
    assert after.value(ROWS) - before.value(ROWS) >= 5
    # A change NB has no row for (a network's description): a pass reads it, and writes nothing.
    (net, *_rest) = api.get("/networks").json()["networks"]
    r = api.put(f"/networks/{net['id']}", json={"network": {"description": "no row of NB's"}})
    assert r.status_code == 200, r.text
    assert nb_sync.wait_synced().ok
    again = scrape(server.url)
    assert again.value(PASSES) > after.value(PASSES)
    assert again.value(ROWS) == after.value(ROWS)


FORWARDS = "cloudnet_northbound_forward_elements"
FIREWALL = "cloudnet_northbound_firewall_elements"


def nb_elements(ovn: OvnSandbox) -> tuple[int, int]:
    """What NB holds of cloudnet's, read with ovn-nbctl: the forwards' VIPs; the groups' ACLs and addresses."""
    vips = sum(len(row["vips"]) for row in keyed(ovn, "Load_Balancer").values())
    addresses = sum(len(as_list(row["addresses"])) for row in keyed(ovn, "Address_Set").values() if row["addresses"])
    return vips, len(keyed(ovn, "ACL")) + addresses


def test_forward_and_firewall_elements_are_the_rows_nb_holds(
    api: httpx.Client, server: RunningServer, ovn: OvnSandbox, nb_sync: NorthboundSync
) -> None:
    s = site(api)  # a forward (tcp 80-81, udp 53 and 5353), a group with three rules (one a remote group), a FIP
    assert nb_sync.wait_synced().ok
    vips, firewall = nb_elements(ovn)
    assert vips == 5 and firewall > 3, (vips, firewall)  # (the floating IP's address VIP is the fifth)
    got = scrape(server.url)
    assert (got.value(FORWARDS), got.value(FIREWALL)) == (vips, firewall)
    # Taken away again: the counts follow NB.
    assert api.delete(f"/networks/{s['net']['id']}/forwards/192.0.2.50").status_code in (200, 204)
    assert api.delete(f"/security-group-rules/{s['r80']['id']}").status_code == 204
    assert nb_sync.wait_synced().ok
    now = nb_elements(ovn)
    assert now == (1, firewall - 1)
    got = scrape(server.url)
    assert (got.value(FORWARDS), got.value(FIREWALL)) == now
