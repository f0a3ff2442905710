"""The northbound writer against a real OVN sandbox: NB holds, row by row, what the database implies after creates,
updates and deletes made through the API, and ovn-northd accepts it; also when the passes that follow port changes
read only what those touch (northbound/scoped.py) and visit only those rows."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from cloudnet.northbound.sync import NorthboundSync
from tests.ovn.converged import nb_differences
from tests.ovn.nb import as_list, by_name, keyed, rows
from tests.support.api import create, create_network, create_subnet
from tests.support.ovn import OvnSandbox
from tests.support.server import RunningServer

GATEWAY = "gw-chassis-1"


def topology(api: httpx.Client) -> dict[str, Any]:
    """An external provider network, a tenant network with ports, a router between them."""
    ext = create_network(api, name="ext", **{"router:external": True, "provider:network_type": "flat",
                                             "provider:physical_network": "physnet1"})  # fmt: skip
    create_subnet(api, ext["id"], "192.0.2.0/24", gateway_ip="192.0.2.1")
    net = create_network(api, name="net one", mtu=1400)
    subnet = create_subnet(api, net["id"], "10.0.0.0/24")
    pairs = [{"ip_address": "10.0.0.100"}, {"ip_address": "10.0.9.0/24", "mac_address": "fa:16:3e:00:00:99"}]
    p1 = create(api, "ports", "port", network_id=net["id"], name="p1", allowed_address_pairs=pairs,
                fixed_ips=[{"subnet_id": subnet["id"], "ip_address": "10.0.0.10"}])  # fmt: skip
    p2 = create(api, "ports", "port", network_id=net["id"], name="p2", port_security_enabled=False)
    meta = create(api, "ports", "port", network_id=net["id"], name="metadata", device_owner="network:distributed",
                  device_id=f"ovnmeta-{net['id']}")  # fmt: skip
    router = create(api, "routers", "router", name="r1", external_gateway_info={"network_id": ext["id"]})
    r = api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": subnet["id"]})
    assert r.status_code == 200, r.text
    router = api.get(f"/routers/{router['id']}").json()["router"]
    return {"ext": ext, "net": net, "subnet": subnet, "p1": p1, "p2": p2, "meta": meta, "router": router,
            "iface": r.json()["port_id"]}  # fmt: skip


def _ip(port: dict[str, Any]) -> str:
    return str(port["fixed_ips"][0]["ip_address"])


def test_nb_holds_what_the_database_implies(api: httpx.Client, ovn: OvnSandbox, nb_sync: NorthboundSync) -> None:
    t = topology(api)
    net, ext, p1, p2, meta, router = t["net"], t["ext"], t["p1"], t["p2"], t["meta"], t["router"]
    gw_port = api.get("/ports", params={"device_owner": "network:router_gateway"}).json()["ports"][0]
    iface = api.get(f"/ports/{t['iface']}").json()["port"]
    status = nb_sync.wait_synced()
    assert status.ok and status.refused == ()

    switches = keyed(ovn, "Logical_Switch")
    assert set(switches) == {f"ls/{net['id']}", f"ls/{ext['id']}"}
    ls = switches[f"ls/{net['id']}"]
    assert ls["name"] == f"cloudnet-{net['id']}" and ls["other_config"] == {"mtu": "1400"}
    assert ls["external_ids"]["cloudnet:name"] == "net one"
    assert ls["external_ids"]["cloudnet:network_id"] == net["id"]

    ports = by_name(ovn, "Logical_Switch_Port")
    all_ports = {p["id"] for p in api.get("/ports").json()["ports"]}
    assert set(ports) == all_ports | {f"provnet-{ext['id']}"}
    assert as_list(ports[p1["id"]]["addresses"]) == [f"{p1['mac_address']} 10.0.0.10"]
    assert sorted(as_list(ports[p1["id"]]["port_security"])) == sorted(
        [f"{p1['mac_address']} 10.0.0.10 10.0.0.100", "fa:16:3e:00:00:99 10.0.9.0/24"]
    )
    assert ports[p1["id"]]["type"] == "" and ports[p1["id"]]["enabled"] is True
    assert sorted(as_list(ports[p2["id"]]["addresses"])) == sorted([f"{p2['mac_address']} {_ip(p2)}", "unknown"])
    assert ports[p2["id"]]["port_security"] == []
    assert ports[meta["id"]]["type"] == "localport"
    assert as_list(ports[meta["id"]]["addresses"]) == [f"{meta['mac_address']} {_ip(meta)}"]
    localnet = ports[f"provnet-{ext['id']}"]
    assert localnet["type"] == "localnet" and localnet["options"] == {"network_name": "physnet1"}
    assert ports[iface["id"]]["type"] == "router"
    assert ports[iface["id"]]["options"] == {"router-port": f"lrp-{iface['id']}"}
    assert ports[gw_port["id"]]["options"] == {"router-port": f"lrp-{gw_port['id']}", "nat-addresses": "router"}

    routers = by_name(ovn, "Logical_Router")
    assert set(routers) == {f"cloudnet-{router['id']}"}
    lrps = by_name(ovn, "Logical_Router_Port")
    assert set(lrps) == {f"lrp-{iface['id']}", f"lrp-{gw_port['id']}"}
    assert as_list(lrps[f"lrp-{iface['id']}"]["networks"]) == ["10.0.0.1/24"]
    assert lrps[f"lrp-{iface['id']}"]["mac"] == iface["mac_address"]
    assert as_list(lrps[f"lrp-{gw_port['id']}"]["networks"]) == [f"{_ip(gw_port)}/24"]
    chassis = rows(ovn, "Gateway_Chassis")
    assert [(c["name"], c["chassis_name"], c["priority"]) for c in chassis] == [
        (f"lrp-{gw_port['id']}_{GATEWAY}", GATEWAY, 1)
    ]
    nat = rows(ovn, "NAT")
    assert [(n["type"], n["logical_ip"], n["external_ip"]) for n in nat] == [("snat", "10.0.0.0/24", _ip(gw_port))]
    routes = rows(ovn, "Logical_Router_Static_Route")
    assert [(r["ip_prefix"], r["nexthop"]) for r in routes] == [("0.0.0.0/0", "192.0.2.1")]
    ovn.nbctl("--wait=sb", "sync")  # northd took it: the ports are bound in SB as OVN's datapaths
    bindings = ovn.sbctl("--bare", "--columns=logical_port", "list", "Port_Binding").split()
    assert p1["id"] in bindings and f"cr-lrp-{gw_port['id']}" in bindings

    # updates
    assert api.put(f"/networks/{net['id']}", json={"network": {"mtu": 1300, "name": "renamed"}}).status_code == 200
    assert api.put(f"/ports/{p1['id']}", json={"port": {"admin_state_up": False, "allowed_address_pairs": []}}
                   ).status_code == 200  # fmt: skip
    r = api.put(f"/routers/{router['id']}", json={"router": {"external_gateway_info": {
        "network_id": ext["id"], "enable_snat": False}}})  # fmt: skip
    assert r.status_code == 200, r.text
    nb_sync.wait_synced()
    ls = keyed(ovn, "Logical_Switch")[f"ls/{net['id']}"]
    assert ls["other_config"] == {"mtu": "1300"} and ls["external_ids"]["cloudnet:name"] == "renamed"
    port = by_name(ovn, "Logical_Switch_Port")[p1["id"]]
    assert port["enabled"] is False and as_list(port["port_security"]) == [f"{p1['mac_address']} 10.0.0.10"]
    assert rows(ovn, "NAT") == []

    # deletes
    assert api.delete(f"/ports/{p2['id']}").status_code == 204
    r = api.put(f"/routers/{router['id']}/remove_router_interface", json={"subnet_id": t["subnet"]["id"]})
    assert r.status_code == 200, r.text
    nb_sync.wait_synced()
    assert p2["id"] not in by_name(ovn, "Logical_Switch_Port")
    assert set(by_name(ovn, "Logical_Router_Port")) == {f"lrp-{gw_port['id']}"}
    assert api.put(f"/routers/{router['id']}", json={"router": {"external_gateway_info": {}}}).status_code == 200
    assert api.delete(f"/routers/{router['id']}").status_code == 204
    assert api.delete(f"/ports/{p1['id']}").status_code == 204
    assert api.delete(f"/ports/{meta['id']}").status_code == 204
    assert api.delete(f"/networks/{net['id']}").status_code == 204
    nb_sync.wait_synced()
    assert set(keyed(ovn, "Logical_Switch")) == {f"ls/{ext['id']}"}
    assert set(by_name(ovn, "Logical_Switch_Port")) == {f"provnet-{ext['id']}"}
    for table in ("Logical_Router", "Logical_Router_Port", "Gateway_Chassis", "NAT", "Logical_Router_Static_Route"):
        assert rows(ovn, table) == [], table


def _exact(ovn: OvnSandbox, server: RunningServer, deadline: float = 10.0) -> None:
    """NB equals, row by row, what a full read of the database implies (polled: a repair may take a pass)."""
    end = time.monotonic() + deadline
    while found := nb_differences(ovn, server.store, [GATEWAY]):
        assert time.monotonic() < end, found
        time.sleep(0.05)


def test_port_changes_follow_from_the_log_and_nb_stays_exact(
    api: httpx.Client, ovn: OvnSandbox, server: RunningServer, nb_sync: NorthboundSync
) -> None:
    net = create_network(api, name="scoped")
    subnet = create_subnet(api, net["id"], "10.5.0.0/24")
    web = create(api, "security-groups", "security_group", name="web")
    create(
        api,
        "security-group-rules",
        "security_group_rule",
        security_group_id=web["id"],
        direction="ingress",
        ethertype="IPv4",
        protocol="tcp",
        port_range_min=22,
        port_range_max=22,
        remote_group_id=web["id"],
    )
    first = create(api, "ports", "port", network_id=net["id"], security_groups=[web["id"]])
    nb_sync.wait_synced()
    _exact(ovn, server)

    def port_change(change: Callable[[], Any]) -> None:
        change()
        assert nb_sync.wait_synced().read == "log"
        _exact(ovn, server)

    made: list[dict[str, Any]] = []
    port_change(lambda: made.append(create(api, "ports", "port", network_id=net["id"], security_groups=[web["id"]],
                                           allowed_address_pairs=[{"ip_address": "10.5.0.200"}])))  # fmt: skip
    port = made[0]["id"]
    ip = [{"subnet_id": subnet["id"], "ip_address": "10.5.0.77"}]
    port_change(lambda: api.put(f"/ports/{port}", json={"port": {"fixed_ips": ip}}).raise_for_status())
    port_change(lambda: api.put(f"/ports/{port}", json={"port": {"binding:host_id": "node-9"}}).raise_for_status())
    off = {"port_security_enabled": False, "security_groups": [], "allowed_address_pairs": []}
    port_change(lambda: api.put(f"/ports/{port}", json={"port": off}).raise_for_status())
    # behind the writer's back, between two port changes: the next scoped passes repair it too
    ovn.nbctl("lsp-del", first["id"])
    ovn.nbctl("set", "Address_Set", f"cn_as_{web['id'].replace('-', '_')}_ip4", "addresses=[]")
    port_change(lambda: api.delete(f"/ports/{port}").raise_for_status())
    assert first["id"] in by_name(ovn, "Logical_Switch_Port")
