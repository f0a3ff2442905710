"""The northbound writer's scoped passes on big columns: a running writer updates a load balancer's VIPs and the
drop port group's ports by their difference (mutations) and leaves NB exactly as the database implies (the pass after
reads them back and finds nothing to repair), and a big column changed behind its back is read again and repaired:
while it runs, and at the full resync of a writer that starts after VIPs changed while none ran (the VIPs are kept
out of the IDL: northbound/bigmaps.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from cloudnet.northbound.sync import NorthboundSync
from tests.ovn.nb import as_list, by_name, keyed
from tests.support.api import create, create_network, create_subnet
from tests.support.ovn import OvnSandbox
from tests.support.server import RunningServer


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _written(sync: NorthboundSync, caplog: pytest.LogCaptureFixture) -> None:
    """The pass that wrote the database's latest change, then the next one (our commit's echo moved NB): that one
    reads the rows the first wrote back from NB and must find nothing to repair. (Polled for, and any repair read
    from the writer's log since the caller cleared it: on a busy machine the echo's pass may be done before the
    waiter here has woken up.)"""
    sync.wait_synced()
    deadline = time.monotonic() + 10
    while sync.status.last_report != "no difference":
        assert time.monotonic() < deadline, f"no pass after the write found nothing: {sync.status.last_report}"
        time.sleep(0.05)
    repairs = [r.getMessage() for r in caplog.records if "repaired" in r.getMessage()]
    assert repairs == [], repairs


def _vips(ovn: OvnSandbox) -> dict[str, str]:
    (lb,) = keyed(ovn, "Load_Balancer").values()
    return dict(lb["vips"])


def _routed_network(api: httpx.Client) -> dict[str, Any]:
    """A tenant network whose router has its gateway on an external network (where forwards listen)."""
    ext = create_network(api, name="ext", **{"router:external": True, "provider:network_type": "flat",
                                             "provider:physical_network": "physnet1"})  # fmt: skip
    create_subnet(api, ext["id"], "192.0.2.0/24", gateway_ip="192.0.2.1")
    net = create_network(api, name="net")
    subnet = create_subnet(api, net["id"], "10.0.0.0/24")
    router = create(api, "routers", "router", name="r", external_gateway_info={"network_id": ext["id"]})
    assert api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": subnet["id"]}).status_code == 200
    return net


def test_big_columns_follow_by_difference_and_are_repaired(
    api: httpx.Client, ovn: OvnSandbox, nb_sync: NorthboundSync, caplog: pytest.LogCaptureFixture
) -> None:
    net = _routed_network(api)
    r = api.post("/ports", json={"ports": [{"network_id": net["id"]} for _ in range(70)]})
    assert r.status_code == 201, r.text
    ports = r.json()["ports"]
    target = ports[0]["fixed_ips"][0]["ip_address"]
    spec = {"protocol": "tcp", "listen_port": "1000-1099", "target_address": target}
    r = api.post(f"/networks/{net['id']}/forwards", json={"listen_address": "192.0.2.50", "ports": [spec]})
    assert r.status_code == 201, r.text
    nb_sync.wait_synced()
    assert _vips(ovn) == {f"192.0.2.50:{p}": f"{target}:{p}" for p in range(1000, 1100)}

    # the forward changes: VIPs removed, added and retargeted, written as mutations of the known map
    ports_now = [{"protocol": "tcp", "listen_port": "1000-1049", "target_address": target, "target_port": "8000"},
                 {"protocol": "tcp", "listen_port": "2000-2019", "target_address": target}]  # fmt: skip
    caplog.clear()
    r = api.put(f"/networks/{net['id']}/forwards/192.0.2.50", json={"ports": ports_now})
    assert r.status_code == 200, r.text
    _written(nb_sync, caplog)
    wanted = {f"192.0.2.50:{p}": f"{target}:8000" for p in range(1000, 1050)}
    wanted |= {f"192.0.2.50:{p}": f"{target}:{p}" for p in range(2000, 2020)}
    assert _vips(ovn) == wanted

    # the drop group's ports (a big reference set) follow a port deleted, by difference too
    caplog.clear()
    assert api.delete(f"/ports/{ports[-1]['id']}").status_code == 204
    _written(nb_sync, caplog)
    uuid_of = {p["name"]: p["_uuid"] for p in by_name(ovn, "Logical_Switch_Port").values()}
    (drop,) = [g for g in by_name(ovn, "Port_Group").values() if g["name"] == "cloudnet_pg_drop"]
    assert sorted(as_list(drop["ports"])) == sorted(uuid_of[p["id"]] for p in ports[:-1])

    # behind its back: a VIP retargeted and one added in the known map: read again and repaired
    lb_name = next(iter(keyed(ovn, "Load_Balancer").values()))["name"]
    caplog.clear()
    ovn.nbctl("set", "Load_Balancer", lb_name, 'vips:"192.0.2.50:1000"="10.9.9.9:1"',
              'vips:"192.0.2.50:3000"="10.9.9.9:1"')  # fmt: skip
    _until(lambda: _vips(ovn) == wanted, "the load balancer's VIPs were not repaired")
    _until(lambda: any("repaired" in r.getMessage() for r in caplog.records), "the repair was not reported")


def test_vips_changed_while_no_writer_ran_are_repaired_at_start_and_while_it_runs(
    api: httpx.Client, ovn: OvnSandbox, server: RunningServer, nb_sync: NorthboundSync,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    net = _routed_network(api)
    target = create(api, "ports", "port", network_id=net["id"])["fixed_ips"][0]["ip_address"]
    spec = {"protocol": "tcp", "listen_port": "1000-1199", "target_address": target}
    r = api.post(f"/networks/{net['id']}/forwards", json={"listen_address": "192.0.2.60", "ports": [spec]})
    assert r.status_code == 201, r.text
    nb_sync.wait_synced()
    wanted = {f"192.0.2.60:{p}": f"{target}:{p}" for p in range(1000, 1200)}
    assert _vips(ovn) == wanted
    nb_sync.stop()
    lb_name = next(iter(keyed(ovn, "Load_Balancer").values()))["name"]
    try:
        # while no writer runs: a VIP removed, one retargeted, one added
        ovn.nbctl("remove", "Load_Balancer", lb_name, "vips", '"192.0.2.60:1000"')
        ovn.nbctl("set", "Load_Balancer", lb_name, 'vips:"192.0.2.60:1001"="10.9.9.9:1"',
                  'vips:"192.0.2.60:3000"="10.9.9.9:1"')  # fmt: skip
        sync = NorthboundSync(server.store, ovn.nb_url, ["gw-1"], interval=0.1)
        sync.start()
        try:
            status = sync.wait_synced()
            assert "(vips)" in status.last_report, status.last_report
            assert _vips(ovn) == wanted
            # while it runs: VIPs removed behind its back (an update2 difference of the kept map)
            caplog.clear()
            ovn.nbctl("remove", "Load_Balancer", lb_name, "vips", '"192.0.2.60:1002"', '"192.0.2.60:1199"')
            _until(lambda: _vips(ovn) == wanted, "the removed VIPs were not put back")
            _until(lambda: any("repaired" in r.getMessage() for r in caplog.records), "the repair was not reported")
            caplog.clear()
            _written(sync, caplog)  # (what it keeps of the map is NB's: the pass after finds nothing)
        finally:
            sync.stop()
    finally:
        ovn.nbctl("--if-exists", "lb-del", lb_name)
