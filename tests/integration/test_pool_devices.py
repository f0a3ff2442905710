"""Port pools on the host (root): instances from a pool pass traffic; with --park-pool-devices every ready
pool port has a pre-plumbed veth parked in the host's holding namespace, attach moves it into the
instance, release parks it again, devices beyond the pool are removed, and an agent restart reuses them."""

from __future__ import annotations

from typing import Any

import pytest

from cloudnet.dataplane.linux import names, netns
from tests.support.cloud import Cloud, ns_run, ping

FREE_OWNER = "compute:cloudnet-pool"


def _links(ns: str) -> dict[str, tuple[int, str]]:
    """name -> (ifindex, MAC) of a namespace's links."""
    out = ns_run(ns, "ip", "-o", "link", "show").stdout
    found = {}
    for line in out.splitlines():
        index, name, rest = line.split(":", 2)
        mac = rest.split("link/ether ")[1].split()[0] if "link/ether " in rest else ""
        found[name.strip().split("@")[0]] = (int(index), mac)
    return found


def _ready(cloud: Cloud, network_id: str) -> dict[str, dict[str, Any]]:
    r = cloud.api.get("/ports", params={"network_id": network_id, "device_owner": FREE_OWNER})
    assert r.status_code == 200, r.text
    return {p["id"]: p for p in r.json()["ports"] if p["binding:host_id"] == cloud.host}


def _warm_pool(cloud: Cloud, network_id: str) -> dict[str, Any]:
    """A claim through the API creates and fills the host's pool; the claimed port is given back."""
    body = {"claim": {"host": cloud.host, "network_id": network_id}}
    r = cloud.api.post("/port-pools/claim", json=body)
    assert r.status_code in (200, 201), r.text
    port = r.json()["port"]
    assert cloud.api.post("/port-pools/release", json={"port_id": port["id"]}).status_code in (200, 204)
    pool = next(p for p in cloud.api.get("/port-pools").json()["port_pools"] if p["network_id"] == network_id)
    return dict(pool)


def _parked_ok(cloud: Cloud, ready: dict[str, dict[str, Any]]) -> bool:
    """Every ready port has its device parked (peer with the port's MAC in the holding namespace, host
    end on the network's bridge), and nothing else is parked."""
    park = names.park_ns(cloud.host)
    if not netns.exists(park):
        return False
    parked = {n: mac for n, (_i, mac) in _links(park).items() if n != "lo"}
    want = {names.tap_peer(pid): p["mac_address"] for pid, p in ready.items()}
    if parked != want:
        return False
    host = ns_run(names.host_ns(cloud.host), "ip", "-o", "link", "show").stdout
    return all(f"{names.tap(pid)}@" in host and f"master {names.bridge(p['network_id'])}" in
               next(line for line in host.splitlines() if f" {names.tap(pid)}@" in line)
               for pid, p in ready.items())  # fmt: skip


def test_instance_from_a_pool_passes_traffic_and_its_network_is_plumbed_ahead(cloud: Cloud) -> None:
    cloud.start_agent()
    net, sub = cloud.network("pooled", "10.81.0.0/24")
    router = cloud.create("routers", "router", {"name": "pooled-r"})
    assert cloud.api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]}).is_success
    _warm_pool(cloud, net["id"])
    ready = _ready(cloud, net["id"])
    assert ready
    # No instance yet, but the host already has the network's bridge and router: plumbed ahead.
    cloud.wait_for(lambda: names.bridge(net["id"]) in _links(names.host_ns(cloud.host)), what="bridge ahead")
    cloud.wait_for(lambda: netns.exists(names.router_ns(cloud.host, router["id"])), what="router ahead")
    assert not netns.exists(names.park_ns(cloud.host))  # parking is off by default
    a = cloud.instance("pa", [{"network": net["id"]}])
    b = cloud.instance("pb", [{"network": net["id"]}])
    assert a["nets"][0]["port_id"] in ready and b["nets"][0]["port_id"] in ready  # both came from the pool
    assert ping(a["netns"], b["nets"][0]["fixed_ips"][0]["ip_address"])
    assert ping(a["netns"], sub["gateway_ip"])


def test_parked_devices_attach_release_prune_and_survive_an_agent_restart(cloud: Cloud) -> None:
    cloud.start_agent(park=True)
    net, _ = cloud.network("parked", "10.82.0.0/24")
    _warm_pool(cloud, net["id"])
    ready = _ready(cloud, net["id"])
    assert len(ready) >= 2
    cloud.wait_for(lambda: _parked_ok(cloud, _ready(cloud, net["id"])), what="every ready port parked")
    host_ns = names.host_ns(cloud.host)
    taps = {pid: _links(host_ns)[names.tap(pid)][0] for pid in ready}

    # Attach: the instance gets the parked device itself (its host end is not recreated).
    a = cloud.instance("qa", [{"network": net["id"]}])
    b = cloud.instance("qb", [{"network": net["id"]}])
    pa, pb = a["nets"][0]["port_id"], b["nets"][0]["port_id"]
    assert pa in ready and pb in ready
    assert _links(host_ns)[names.tap(pa)][0] == taps[pa]
    assert _links(a["netns"])["eth0"][1] == ready[pa]["mac_address"]
    assert names.tap_peer(pa) not in _links(names.park_ns(cloud.host))
    assert ping(a["netns"], b["nets"][0]["fixed_ips"][0]["ip_address"])

    # Release: the device is parked again, not destroyed (same host end), and the instance loses it.
    assert cloud.api.delete(f"/instances/{a['id']}").status_code == 204
    cloud.wait_for(lambda: names.tap_peer(pa) in _links(names.park_ns(cloud.host)), what="device parked again")
    assert _links(host_ns)[names.tap(pa)][0] == taps[pa]
    assert "eth0" not in _links(a["netns"])
    assert not ns_run(names.park_ns(cloud.host), "ip", "-o", "addr", "show", "dev", names.tap_peer(pa),
                      "scope", "global").stdout  # fmt: skip

    # Agent restart: the parked devices are found and reused, none recreated.
    before = {n: i for n, (i, _mac) in _links(host_ns).items() if n.startswith(names.TAP)}
    cloud.stop_agent()
    cloud.start_agent(park=True)
    cloud.wait_for(lambda: _parked_ok(cloud, _ready(cloud, net["id"])), what="parked after restart")
    after = {n: i for n, (i, _mac) in _links(host_ns).items() if n.startswith(names.TAP)}
    assert {n: i for n, i in after.items() if n in before} == before
    c = cloud.instance("qc", [{"network": net["id"]}])
    pc = c["nets"][0]["port_id"]
    assert _links(host_ns)[names.tap(pc)][0] == before[names.tap(pc)]
    assert ping(c["netns"], b["nets"][0]["fixed_ips"][0]["ip_address"])

    # Beyond the pool: a ready port deleted through the API takes its parked device with it.
    spare = next(iter(_ready(cloud, net["id"])))
    assert cloud.api.delete(f"/ports/{spare}").status_code == 204
    cloud.wait_for(lambda: names.tap(spare) not in _links(host_ns), what="pruned device")
    assert names.tap_peer(spare) not in _links(names.park_ns(cloud.host))


@pytest.mark.parametrize("park", [True, False])
def test_turning_parking_off_removes_the_holding_namespace(cloud: Cloud, park: bool) -> None:
    cloud.start_agent(park=True)
    net, _ = cloud.network("toggle", "10.83.0.0/24")
    _warm_pool(cloud, net["id"])
    cloud.wait_for(lambda: _parked_ok(cloud, _ready(cloud, net["id"])), what="parked")
    cloud.stop_agent()
    cloud.start_agent(park=park)
    if park:
        assert _parked_ok(cloud, _ready(cloud, net["id"]))
    else:
        assert not netns.exists(names.park_ns(cloud.host))
        assert not [n for n in _links(names.host_ns(cloud.host)) if n.startswith(names.TAP)]
