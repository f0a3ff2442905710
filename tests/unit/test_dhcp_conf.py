"""dnsmasq's files and command line for a network, in Neutron's DHCP agent formats (dataplane/linux/dhcp_conf.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cloudnet.dataplane.linux import dhcp_conf

NET, SUB, SUB2, V6 = "net-1", "sub-a", "sub-b", "sub-6"


def _state(gateway: str | None = "10.0.0.1", routes: list[dict[str, str]] | None = None,
           meta_ip: str = "10.0.0.2", dhcp2: bool = True) -> dict[str, Any]:  # fmt: skip
    def subnet(sid: str, cidr: str, version: int = 4, **extra: Any) -> dict[str, Any]:
        return {"id": sid, "network_id": NET, "cidr": cidr, "ip_version": version, "gateway_ip": None,
                "host_routes": [], "dns_nameservers": [], "enable_dhcp": True, **extra}  # fmt: skip

    meta = {"id": "meta", "network_id": NET, "mac_address": "fa:16:3e:00:00:02",
            "fixed_ips": [{"subnet_id": SUB, "ip_address": meta_ip}, {"subnet_id": SUB2, "ip_address": "10.1.0.2"},
                          {"subnet_id": V6, "ip_address": "fd00::2"}]}  # fmt: skip
    subnets = {
        SUB: subnet(SUB, "10.0.0.0/24", gateway_ip=gateway, host_routes=routes or [],
                    dns_nameservers=["192.0.2.53", "2001:db8::53", "192.0.2.54"]),
        SUB2: subnet(SUB2, "10.1.0.0/24", enable_dhcp=dhcp2),
        V6: subnet(V6, "fd00::/64", 6),
        "other": {**subnet("other", "10.9.0.0/24"), "network_id": "net-2"},
    }  # fmt: skip
    p1 = {
        "id": "p1",
        "network_id": NET,
        "mac_address": "FA:16:3E:AA:BB:CC",
        "fixed_ips": [{"subnet_id": SUB, "ip_address": "10.0.0.5"}, {"subnet_id": V6, "ip_address": "fd00::5"}],
    }
    p2 = {"id": "p2", "network_id": NET, "mac_address": "fa:16:3e:aa:bb:dd",
          "fixed_ips": [{"subnet_id": SUB2, "ip_address": "10.1.0.9"}]}  # fmt: skip
    networks = {NET: {"id": NET, "mtu": 1450, "metadata_port": meta}}
    return {"networks": networks, "subnets": subnets, "ports": {"p1": p1}, "pool_ports": {"p2": p2}}


def test_served_subnets_are_the_dhcp_enabled_ipv4_ones_the_metadata_port_is_on() -> None:
    assert [s["id"] for s in dhcp_conf.dhcp_subnets(_state())[NET]] == [SUB, SUB2]
    assert [s["id"] for s in dhcp_conf.dhcp_subnets(_state(dhcp2=False))[NET]] == [SUB]
    assert "net-2" not in dhcp_conf.dhcp_subnets(_state())  # (no metadata port there)


def test_hosts_file_has_a_static_lease_per_address_of_this_hosts_ports() -> None:
    state = _state()
    ports = dhcp_conf.ports_by_network(state)[NET]
    assert dhcp_conf.hosts_lines(ports, {SUB, SUB2}) == [
        "fa:16:3e:aa:bb:cc,host-10-0-0-5,10.0.0.5",
        "fa:16:3e:aa:bb:dd,host-10-1-0-9,10.1.0.9",
    ]
    assert dhcp_conf.hosts_lines(ports, {SUB2}) == ["fa:16:3e:aa:bb:dd,host-10-1-0-9,10.1.0.9"]


@pytest.mark.parametrize("mac", ["fa:16:3e:aa:bb:cc\n00:11:22:33:44:55", "fa:16:3e:aa:bb", "zz:16:3e:aa:bb:cc"])
def test_nothing_but_a_mac_reaches_the_hosts_file(mac: str) -> None:
    port = {
        "id": "p",
        "network_id": NET,
        "mac_address": mac,
        "fixed_ips": [{"subnet_id": SUB, "ip_address": "10.0.0.5"}],
    }
    with pytest.raises(ValueError):
        dhcp_conf.hosts_lines([port], {SUB})


def test_options_give_dns_router_and_classless_routes_ending_with_the_default() -> None:
    state = _state(routes=[{"destination": "10.99.0.0/16", "nexthop": "10.0.0.254"}])
    lines = dhcp_conf.opts_lines(state, NET, dhcp_conf.dhcp_subnets(state)[NET])
    routes = "10.99.0.0/16,10.0.0.254,169.254.169.254/32,10.0.0.2,10.1.0.0/24,0.0.0.0,0.0.0.0/0,10.0.0.1"
    assert lines[:4] == [
        f"tag:subnet-{SUB},option:dns-server,192.0.2.53,192.0.2.54",
        f"tag:subnet-{SUB},option:classless-static-route,{routes}",
        f"tag:subnet-{SUB},249,{routes}",
        f"tag:subnet-{SUB},option:router,10.0.0.1",
    ]
    # A subnet without a gateway: an empty router option (no option 3), the default route left out of 121.
    assert lines[-1] == f"tag:subnet-{SUB2},option:router"
    assert lines[-2].endswith("169.254.169.254/32,10.1.0.2,10.0.0.0/24,0.0.0.0")


def test_no_metadata_route_when_the_metadata_hop_is_the_gateway() -> None:
    state = _state(meta_ip="10.0.0.1", dhcp2=False)
    assert dhcp_conf.opts_lines(state, NET, dhcp_conf.dhcp_subnets(state)[NET]) == [
        f"tag:subnet-{SUB},option:dns-server,192.0.2.53,192.0.2.54",
        f"tag:subnet-{SUB},option:router,10.0.0.1",
    ]


def test_command_line_is_neutrons_for_dhcp_only() -> None:
    state = _state()
    cmd = dhcp_conf.command(dhcp_conf.Files(Path("/run/x")), "md-meta", 1450, dhcp_conf.dhcp_subnets(state)[NET])
    assert cmd[0] == "dnsmasq" and "--port=0" in cmd and "--conf-file=/dev/null" in cmd
    assert "--interface=md-meta" in cmd and "--bind-dynamic" in cmd
    assert f"--dhcp-range=set:subnet-{SUB},10.0.0.0,static,255.255.255.0,86400s" in cmd
    assert "--dhcp-option-force=option:mtu,1450" in cmd and "--dhcp-lease-max=512" in cmd
    assert "--dhcp-hostsfile=/run/x/host" in cmd and "--dhcp-hostsdir=/run/x/hosts.d" in cmd
    assert "--dhcp-optsfile=/run/x/opts" in cmd


def test_ipv6_subnets_are_served_in_dhcpv6_modes_only_and_leased_when_stateful() -> None:
    for mode, served, leased in (("slaac", False, False), ("dhcpv6-stateless", True, False),
                                 ("dhcpv6-stateful", True, True), (None, False, False)):  # fmt: skip
        state = _state(dhcp2=False)
        state["subnets"][V6].update(ipv6_address_mode=mode, dns_nameservers=["2001:db8::53", "192.0.2.53"])
        subnets = dhcp_conf.dhcp_subnets(state)[NET]
        assert (V6 in [s["id"] for s in subnets]) == served, mode
        assert (V6 in dhcp_conf.leased(subnets)) == leased, mode
        if served:
            assert [line for line in dhcp_conf.opts_lines(state, NET, subnets) if V6 in line] == [
                f"tag:subnet-{V6},option6:dns-server,[2001:db8::53]",
                f"tag:subnet-{V6},option6:domain-search,openstacklocal",
            ]
            cmd = dhcp_conf.command(dhcp_conf.Files(Path("/run/x")), "md-meta", 1450, subnets)
            assert f"--dhcp-range=set:subnet-{V6},fd00::,static,64,86400s" in cmd
        if leased:
            ports = dhcp_conf.ports_by_network(state)[NET]
            assert "fa:16:3e:aa:bb:cc,host-fd00--5,[fd00::5]" in dhcp_conf.hosts_lines(ports, dhcp_conf.leased(subnets))
