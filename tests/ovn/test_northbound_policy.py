"""DHCP_Options, security groups (Port_Group/ACL/Address_Set), forwards (Load_Balancer) and floating IPs
(dnat_and_snat) in a real NB database, row by row, accepted by ovn-northd; repaired by the resync; client text never
reaches a match."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx

from cloudnet.northbound import desired_dhcp
from cloudnet.northbound.sync import NorthboundSync
from tests.ovn.nb import as_list, keyed, rows
from tests.support.api import create, create_network, create_subnet
from tests.support.ovn import OvnSandbox

HOSTILE = '" || 1 == 1 && inport == "x'
# What a match may hold: names of ours, numbers, addresses, operators; never a quote but around a port id.
MATCH = re.compile(r'[A-Za-z0-9_.:@$"{}, <>=!&|/-]+')


def lflows(ovn: OvnSandbox) -> list[str]:
    ovn.nbctl("--wait=sb", "sync")
    return ovn.sbctl("--bare", "--columns=match,actions", "list", "Logical_Flow").splitlines()


def site(api: httpx.Client) -> dict[str, Any]:
    ext = create_network(api, name="ext", **{"router:external": True, "provider:network_type": "flat",
                                             "provider:physical_network": "physnet1"})  # fmt: skip
    create_subnet(api, ext["id"], "192.0.2.0/24", gateway_ip="192.0.2.1")
    net = create_network(api, name="net", mtu=1400)
    routes = [{"destination": "10.9.0.0/16", "nexthop": "10.0.0.254"}]
    subnet = create_subnet(api, net["id"], "10.0.0.0/24", dns_nameservers=["192.0.2.53"], host_routes=routes)
    meta_ip = [{"subnet_id": subnet["id"], "ip_address": "10.0.0.2"}]
    meta = create(api, "ports", "port", network_id=net["id"], device_owner="network:distributed",
                  device_id=f"ovnmeta-{net['id']}", fixed_ips=meta_ip)  # fmt: skip
    router = create(api, "routers", "router", name="r", external_gateway_info={"network_id": ext["id"]})
    r = api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": subnet["id"]})
    assert r.status_code == 200, r.text
    web = create(api, "security-groups", "security_group", name=HOSTILE, description=HOSTILE)
    rule = {"security_group_id": web["id"], "direction": "ingress", "ethertype": "IPv4", "description": HOSTILE}
    r80 = create(api, "security-group-rules", "security_group_rule", **rule, protocol="tcp", port_range_min=80,
                 port_range_max=81, remote_ip_prefix="203.0.113.0/24")  # fmt: skip
    r22 = create(api, "security-group-rules", "security_group_rule", **rule, protocol="tcp", port_range_min=22,
                 port_range_max=22, remote_group_id=web["id"])  # fmt: skip
    ping = create(api, "security-group-rules", "security_group_rule", **rule, protocol="icmp", port_range_min=8)
    pairs = [{"ip_address": "10.0.0.100"}]
    ip10 = [{"subnet_id": subnet["id"], "ip_address": "10.0.0.10"}]
    p1 = create(api, "ports", "port", network_id=net["id"], name=HOSTILE, security_groups=[web["id"]],
                allowed_address_pairs=pairs, fixed_ips=ip10)  # fmt: skip
    p2 = create(api, "ports", "port", network_id=net["id"], port_security_enabled=False,
                fixed_ips=[{"subnet_id": subnet["id"], "ip_address": "10.0.0.11"}])  # fmt: skip
    forward = {"listen_address": "192.0.2.50", "description": HOSTILE, "ports": [
        {"protocol": "tcp", "listen_port": "80-81", "target_address": "10.0.0.10", "target_port": "8080-8081"},
        {"protocol": "udp", "listen_port": "53,5353", "target_address": "10.0.0.11", "target_port": "53"}]}  # fmt: skip
    r = api.post(f"/networks/{net['id']}/forwards", json=forward)
    assert r.status_code == 201, r.text
    p3 = create(api, "ports", "port", network_id=net["id"], port_security_enabled=False,
                fixed_ips=[{"subnet_id": subnet["id"], "ip_address": "10.0.0.12"}])  # fmt: skip
    fip = create(api, "floatingips", "floatingip", floating_network_id=ext["id"], port_id=p3["id"])
    return {"ext": ext, "net": net, "subnet": subnet, "meta": meta, "router": router, "web": web, "r80": r80,
            "r22": r22, "ping": ping, "p1": p1, "p2": p2, "p3": p3, "fip": fip}  # fmt: skip


def test_policy_rows_and_repair(api: httpx.Client, ovn: OvnSandbox, nb_sync: NorthboundSync) -> None:
    before = len(lflows(ovn))
    s = site(api)
    web, p1, p2, subnet = s["web"], s["p1"], s["p2"], s["subnet"]
    status = nb_sync.wait_synced()
    assert status.ok and status.refused == (), status

    # DHCP: the subnet's options, linked from its VIF ports (not from the router or metadata ports)
    dhcp = keyed(ovn, "DHCP_Options")
    assert f"dhcp/{subnet['id']}" in dhcp  # (and the external subnet's: DHCP is on there too)
    row = dhcp[f"dhcp/{subnet['id']}"]
    assert row["cidr"] == "10.0.0.0/24"
    options = row["options"]
    assert (
        options["classless_static_route"] == "{169.254.169.254/32,10.0.0.2, 10.9.0.0/16,10.0.0.254, 0.0.0.0/0,10.0.0.1}"
    )
    assert (options["router"], options["server_id"], options["mtu"]) == ("10.0.0.1", "10.0.0.1", "1400")
    assert options["dns_server"] == "{192.0.2.53}" and int(options["lease_time"]) > 0
    assert re.fullmatch(r"fa:16:3e(:[0-9a-f]{2}){3}", options["server_mac"])
    lsps = keyed(ovn, "Logical_Switch_Port")
    linked = {k.removeprefix("lsp/") for k, p in lsps.items() if as_list(p["dhcpv4_options"]) == [row["_uuid"]]}
    assert linked == {p1["id"], p2["id"], s["p3"]["id"]}
    # each of those ports' DHCP asks has a budget of its own (a QoS row on the switch: a meter per row)
    budgets = {k.removeprefix("qos/dhcp/"): q for k, q in keyed(ovn, "QoS").items()}
    assert set(budgets) == linked
    switch = next(ls for ls in rows(ovn, "Logical_Switch") if ls["name"] == f"cloudnet-{s['net']['id']}")
    assert {q["_uuid"] for q in budgets.values()} == set(as_list(switch["qos_rules"]))
    assert budgets[p1["id"]]["match"] == f'inport == "{p1["id"]}" && {desired_dhcp.DHCP_ASKS}'
    assert (budgets[p1["id"]]["direction"], budgets[p1["id"]]["bandwidth"]) == ("from-lport", {
        "rate": desired_dhcp.BUDGET_RATE_KBPS, "burst": desired_dhcp.BUDGET_BURST_KBIT})  # fmt: skip

    # security groups: the drop group holds the filtered port only; the group's ACLs, one per rule
    groups = {g["name"]: g for g in rows(ovn, "Port_Group")}
    uuid_of = {p["name"]: p["_uuid"] for p in rows(ovn, "Logical_Switch_Port")}
    pg = "pg_" + web["id"].replace("-", "_")
    assert set(groups) == {"cloudnet_pg_drop", pg}
    assert as_list(groups["cloudnet_pg_drop"]["ports"]) == [uuid_of[p1["id"]]]
    assert as_list(groups[pg]["ports"]) == [uuid_of[p1["id"]]]
    acls = keyed(ovn, "ACL")
    mine = {(a["direction"], a["priority"], a["match"], a["action"]) for k, a in acls.items()
            if k.startswith(f"acl/{web['id']}/")}  # fmt: skip
    address_set = f"cn_as_{web['id'].replace('-', '_')}_ip4"
    assert mine == {
        ("to-lport", 1002, f"outport == @{pg} && ip4 && ip4.src == 203.0.113.0/24 && tcp && tcp.dst >= 80 && "
                           "tcp.dst <= 81", "allow-related"),
        ("to-lport", 1002, f"outport == @{pg} && ip4 && ip4.src == ${address_set} && tcp && tcp.dst == 22",
         "allow-related"),
        ("to-lport", 1002, f"outport == @{pg} && ip4 && icmp4 && icmp4.type == 8", "allow-related"),
        ("from-lport", 1002, f"inport == @{pg} && ip4", "allow-related"),  # (a new group's default egress)
        ("from-lport", 1002, f"inport == @{pg} && ip6", "allow-related"),
    }  # fmt: skip
    drops = {(a["direction"], a["priority"], a["match"], a["action"]) for k, a in acls.items()
             if k in ("acl/drop/egress", "acl/drop/ingress")}  # fmt: skip
    assert drops == {("from-lport", 1001, "inport == @cloudnet_pg_drop && ip", "drop"),
                     ("to-lport", 1001, "outport == @cloudnet_pg_drop && ip", "drop")}  # fmt: skip
    sets = {a["name"]: sorted(as_list(a["addresses"])) for a in rows(ovn, "Address_Set")}
    assert sets[address_set] == ["10.0.0.10", "10.0.0.100"]  # (its members' fixed IPs and address pairs)
    # the metadata identity rule, on both ports whatever their port security: only their own fixed IPs
    identity = acls[f"acl/identity/{p2['id']}/4"]
    assert (
        identity["match"] == f'inport == "{p2["id"]}" && ip4 && ip4.dst == 169.254.169.254 && ip4.src != {{10.0.0.11}}'
    )
    assert identity["action"] == "drop" and f"acl/identity/{p1['id']}/4" in acls
    assert not any(k.startswith(f"acl/{p2['id']}") for k in acls)

    # forwards: one load balancer per protocol, a VIP per listen port, on the router and the switch; the floating IP:
    # a NAT row on the router, and its bare address as a VIP on the switch only (hairpin from its own target)
    fip_address = s["fip"]["floating_ip_address"]
    lbs = {lb["name"]: lb for lb in rows(ovn, "Load_Balancer")}
    ports = {n: lb for n, lb in lbs.items() if not n.endswith("-address")}
    assert {lb["protocol"]: lb["vips"] for lb in ports.values()} == {
        "tcp": {"192.0.2.50:80": "10.0.0.10:8080", "192.0.2.50:81": "10.0.0.10:8081"},
        "udp": {"192.0.2.50:53": "10.0.0.11:53", "192.0.2.50:5353": "10.0.0.11:53"},
    }
    [address] = [lb for n, lb in lbs.items() if n.endswith("-address")]
    assert address["vips"] == {fip_address: "10.0.0.12"} and as_list(address["protocol"]) == []
    lb_ids = sorted(lb["_uuid"] for lb in ports.values())
    router = keyed(ovn, "Logical_Router")[f"lr/{s['router']['id']}"]
    assert sorted(as_list(router["load_balancer"])) == lb_ids
    switch = keyed(ovn, "Logical_Switch")[f"ls/{s['net']['id']}"]
    assert sorted(as_list(switch["load_balancer"])) == sorted([*lb_ids, address["_uuid"]])
    nat = {(n["type"], n["external_ip"], n["logical_ip"]) for n in rows(ovn, "NAT")}
    assert ("dnat_and_snat", fip_address, "10.0.0.12") in nat

    # northd takes every row: the logical flows grow and carry our matches
    flows = lflows(ovn)
    assert len(flows) > before
    assert any("tcp.dst >= 80 && tcp.dst <= 81" in f for f in flows)
    assert any(fip_address in f for f in flows) and any("dnat" in f and "(10.0.0.12)" in f for f in flows)

    # hostile: the names and descriptions chosen by the client are nowhere in a match
    for acl in rows(ovn, "ACL"):
        assert MATCH.fullmatch(acl["match"]) and "1 == 1" not in acl["match"], acl["match"]

    # resync: rows removed or changed behind cloudnet's back come back
    ovn.nbctl("acl-del", pg)
    ovn.nbctl("set", "DHCP_Options", row["_uuid"], "options:router=10.0.0.99")
    ovn.nbctl("lb-del", lbs[f"cn-fwd-{_forward_id(ports)}-tcp"]["name"])
    ovn.nbctl("clear", "Logical_Switch_Port", p1["id"], "dhcpv4_options")
    status = nb_sync.wait_synced()  # (a change counter moved: the next pass repairs)
    _until(lambda: _repaired(ovn, web["id"], subnet["id"], p1["id"]))
    assert len(keyed(ovn, "Load_Balancer")) == 3

    # updates: a rule removed, the port leaves the group, the forward deleted
    assert api.delete(f"/security-group-rules/{s['r80']['id']}").status_code == 204
    assert api.put(f"/ports/{p1['id']}", json={"port": {"security_groups": []}}).status_code == 200
    assert api.delete(f"/floatingips/{s['fip']['id']}").status_code == 204
    assert api.delete(f"/networks/{s['net']['id']}/forwards/192.0.2.50").status_code in (200, 204)
    nb_sync.wait_synced()
    assert not any(k.startswith(f"acl/{web['id']}/") for k in keyed(ovn, "ACL"))  # (no member: no group)
    assert {g["name"] for g in rows(ovn, "Port_Group")} == {"cloudnet_pg_drop"}
    assert rows(ovn, "Load_Balancer") == [] and not any(n["type"] == "dnat_and_snat" for n in rows(ovn, "NAT"))
    assert api.delete(f"/ports/{p2['id']}").status_code == 204
    nb_sync.wait_synced()
    assert f"qos/dhcp/{p2['id']}" not in keyed(ovn, "QoS") and f"qos/dhcp/{p1['id']}" in keyed(ovn, "QoS")


def _forward_id(lbs: dict[str, Any]) -> str:
    return next(iter(lbs.values()))["external_ids"]["cloudnet:forward_id"]


def _repaired(ovn: OvnSandbox, group_id: str, subnet_id: str, port_id: str) -> bool:
    acls = [k for k in keyed(ovn, "ACL") if k.startswith(f"acl/{group_id}/")]
    dhcp = keyed(ovn, "DHCP_Options")[f"dhcp/{subnet_id}"]
    port = keyed(ovn, "Logical_Switch_Port")[f"lsp/{port_id}"]
    return len(acls) == 5 and dhcp["options"]["router"] == "10.0.0.1" and bool(port["dhcpv4_options"])


def _until(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not repaired in time"
        time.sleep(0.05)
