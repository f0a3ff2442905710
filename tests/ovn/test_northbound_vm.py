"""What OVN's native DHCP and router advertisements give a VM (issue 28), as the northbound writer puts them in a
real NB: DHCPv4 options (router, DNS, domain, MTU, lease time, classless static routes with the metadata hop and the
host routes), DHCPv6 options per subnet mode, and `ipv6_ra_configs` on the router's interface ports per the
subnets' `ipv6_ra_mode`; ovn-northd turns them into the flows that answer (tests/ovn/test_vm_taps.py asks them
through a VM's tap)."""

from __future__ import annotations

from typing import Any

import httpx

from cloudnet.northbound.sync import NorthboundSync
from tests.ovn.nb import as_list, keyed
from tests.support.api import create, create_network, create_subnet
from tests.support.ovn import OvnSandbox

METADATA = "network:distributed"


def _metadata_port(api: httpx.Client, network_id: str) -> dict[str, Any]:
    return create(api, "ports", "port", network_id=network_id, device_owner=METADATA, device_id=f"ovnmeta-{network_id}")


def _attach(api: httpx.Client, router: dict[str, Any], subnet: dict[str, Any]) -> str:
    r = api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": subnet["id"]})
    assert r.status_code == 200, r.text
    return str(r.json()["port_id"])


def test_dhcpv4_gives_a_vm_its_router_dns_domain_mtu_lease_and_classless_routes(
    api: httpx.Client, ovn: OvnSandbox, nb_sync: NorthboundSync
) -> None:
    net = create_network(api, name="vm4", mtu=1380)
    routed = create_subnet(api, net["id"], "10.61.0.0/24", dns_nameservers=["192.0.2.53", "192.0.2.54"],
                           host_routes=[{"destination": "10.99.0.0/16", "nexthop": "10.61.0.254"}])  # fmt: skip
    meta = _metadata_port(api, net["id"])
    meta_ip = next(f["ip_address"] for f in meta["fixed_ips"] if f["subnet_id"] == routed["id"])
    isolated_net = create_network(api, name="vm4-isolated")
    isolated = create_subnet(api, isolated_net["id"], "10.62.0.0/24", gateway_ip=None)
    isolated_meta = _metadata_port(api, isolated_net["id"])["fixed_ips"][0]["ip_address"]
    off = create_subnet(api, create_network(api, name="vm4-off")["id"], "10.63.0.0/24", enable_dhcp=False)
    status = nb_sync.wait_synced()
    assert status.ok and status.refused == (), status

    dhcp = keyed(ovn, "DHCP_Options")
    options = dhcp[f"dhcp/{routed['id']}"]["options"]
    assert dhcp[f"dhcp/{routed['id']}"]["cidr"] == "10.61.0.0/24"
    assert options.pop("server_mac").startswith("fa:16:3e:")
    assert options == {
        "router": "10.61.0.1", "server_id": "10.61.0.1", "lease_time": "43200", "mtu": "1380",
        "dns_server": "{192.0.2.53, 192.0.2.54}", "domain_name": '"openstacklocal"',
        "classless_static_route": f"{{169.254.169.254/32,{meta_ip}, 10.99.0.0/16,10.61.0.254, 0.0.0.0/0,10.61.0.1}}",
    }  # fmt: skip
    # No gateway: no router option, the metadata port answers and is the route to 169.254.169.254 (on-link hop).
    options = dhcp[f"dhcp/{isolated['id']}"]["options"]
    assert "router" not in options and options["server_id"] == isolated_meta
    assert options["classless_static_route"] == f"{{169.254.169.254/32,{isolated_meta}}}"
    assert f"dhcp/{off['id']}" not in dhcp  # (DHCP off: nothing answers, the guest configures itself)


def test_ipv6_per_subnet_mode_dhcpv6_options_and_router_advertisements(
    api: httpx.Client, ovn: OvnSandbox, nb_sync: NorthboundSync
) -> None:
    router = create(api, "routers", "router", name="vm6")
    subnets, ifaces = {}, {}
    for mode, prefix in (("slaac", "fd00:61"), ("dhcpv6-stateful", "fd00:62"), ("dhcpv6-stateless", "fd00:63")):
        net = create_network(api, name=f"vm6-{mode}", mtu=1420)
        servers = [f"{prefix}::53", f"{prefix}::54"]
        subnets[mode] = create_subnet(api, net["id"], f"{prefix}::/64", ip_version=6, ipv6_ra_mode=mode,
                                      ipv6_address_mode=mode, dns_nameservers=servers)  # fmt: skip
        ifaces[mode] = _attach(api, router, subnets[mode])
    # Address mode without RA mode: an outside router's RAs, not OVN's.
    net = create_network(api, name="vm6-outside-ra")
    subnets["none"] = create_subnet(api, net["id"], "fd00:64::/64", ip_version=6, ipv6_address_mode="slaac")
    ifaces["none"] = _attach(api, router, subnets["none"])
    status = nb_sync.wait_synced()
    assert status.ok and status.refused == (), status

    dhcp = keyed(ovn, "DHCP_Options")
    assert f"dhcp/{subnets['slaac']['id']}" not in dhcp and f"dhcp/{subnets['none']['id']}" not in dhcp
    stateful = dhcp[f"dhcp/{subnets['dhcpv6-stateful']['id']}"]["options"]
    stateless = dhcp[f"dhcp/{subnets['dhcpv6-stateless']['id']}"]["options"]
    for options, prefix in ((stateful, "fd00:62"), (stateless, "fd00:63")):
        assert (
            options["dns_server"] == f"{{{prefix}::53, {prefix}::54}}"
            and options["domain_search"] == '"openstacklocal"'
        )
        assert options["server_id"].startswith("fa:16:3e:")
    assert "dhcpv6_stateless" not in stateful and stateless["dhcpv6_stateless"] == "true"

    lrps = keyed(ovn, "Logical_Router_Port")
    expected = {"slaac": "slaac", "dhcpv6-stateful": "dhcpv6_stateful", "dhcpv6-stateless": "dhcpv6_stateless"}
    for mode, address_mode in expected.items():
        prefix = subnets[mode]["cidr"].split("::")[0]
        assert lrps[f"lrp/{ifaces[mode]}"]["ipv6_ra_configs"] == {
            "address_mode": address_mode, "send_periodic": "true", "mtu": "1420", "rdnss": f"{prefix}::53",
            "min_interval": "30", "max_interval": "100",
        }, mode  # fmt: skip
    assert lrps[f"lrp/{ifaces['none']}"]["ipv6_ra_configs"] == {}


def test_a_guest_may_ask_dhcp_but_not_answer_it(api: httpx.Client, ovn: OvnSandbox, nb_sync: NorthboundSync) -> None:
    """Ports with port security and no group still reach OVN's DHCPv6 (client port 546 to server port 547 only);
    a guest's own server's answers (67 -> 68, 547 -> 546) are dropped above any group's allow."""
    net = create_network(api, name="vm6-acl")
    create_subnet(api, net["id"], "fd00:65::/64", ip_version=6, ipv6_address_mode="dhcpv6-stateful")
    create(api, "ports", "port", network_id=net["id"], security_groups=[])
    nb_sync.wait_synced()
    acls = keyed(ovn, "ACL")
    assert (
        acls["acl/drop/dhcp6"]["match"]
        == "inport == @cloudnet_pg_drop && ip6 && udp && udp.src == 546 && udp.dst == 547"
    )
    assert acls["acl/drop/dhcp6"]["direction"] == "from-lport" and acls["acl/drop/dhcp6"]["action"] == "allow"
    for key, (version, ports) in {"acl/drop/dhcp-server": (4, "67 && udp.dst == 68"),
                                  "acl/drop/dhcp6-server": (6, "547 && udp.dst == 546")}.items():  # fmt: skip
        acl = acls[key]
        assert acl["match"] == f"inport == @cloudnet_pg_drop && ip{version} && udp && udp.src == {ports}"
        assert (acl["direction"], acl["action"], acl["priority"]) == ("from-lport", "drop", 1003)
    allowed = [a for a in acls.values() if a["action"] != "drop" and ("udp.src == 547" in a["match"]
               or "udp.src == 67" in a["match"])]  # fmt: skip
    assert not allowed


def _flood_members(ovn: OvnSandbox) -> set[str]:
    """The logical ports in any switch's `_MC_flood` group (SB), by name."""
    names = dict(line.split() for line in ovn.sbctl("--bare", "--format=csv", "--no-headings",
                                                    "--columns=_uuid,logical_port", "list", "Port_Binding")
                 .replace(",", " ").splitlines() if line.strip())  # fmt: skip
    members = ovn.sbctl("--bare", "--columns=ports", "find", "Multicast_Group", "name=_MC_flood").split()
    return {names[m] for m in members if m in names}


def test_each_port_a_pass_adds_is_in_its_switchs_flood_group(
    api: httpx.Client, ovn: OvnSandbox, nb_sync: NorthboundSync
) -> None:
    """OVN 25.03's northd left a port out of its switch's flood groups when the NB transaction that added it also
    changed ACLs (northbound/staging.py): no broadcast, multicast or RA reached it. Each port here comes with such
    changes (its group's port group, its metadata identity ACLs), in a pass of its own."""
    net = create_network(api, name="flood")
    create_subnet(api, net["id"], "10.64.0.0/24")
    _metadata_port(api, net["id"])
    nb_sync.wait_synced()
    ports = []
    for _ in range(3):
        ports.append(create(api, "ports", "port", network_id=net["id"]))
        nb_sync.wait_synced()
    ovn.nbctl("--wait=sb", "sync")
    missing = {p["id"] for p in ports} - _flood_members(ovn)
    assert not missing, f"ports left out of _MC_flood: {missing}"
    lsps = keyed(ovn, "Logical_Switch_Port")
    assert all(as_list(lsps[f"lsp/{p['id']}"]["enabled"]) == [True] for p in ports)  # (staged disabled, then enabled)
