"""IPv6 automatic addresses, as Neutron gives them: on a SLAAC or DHCPv6-stateless subnet a port's address is its
MAC's EUI-64 (what the guest forms itself from the router advertisement, so port security lets it through), it
cannot be chosen, and such a subnet must be a /64; the IPv6 modes must agree."""

from __future__ import annotations

import ipaddress
from typing import Any

import httpx
import pytest

from tests.support.api import create, error

Json = dict[str, Any]


def eui64_by_hand(prefix: str, mac: str) -> str:
    """RFC 4291 appendix A, written out differently from the service's: flip bit 1 of the first octet, ff:fe."""
    parts = mac.split(":")
    first = format(int(parts[0], 16) ^ 2, "02x")
    iid = f"{first}{parts[1]}:{parts[2]}ff:fe{parts[3]}:{parts[4]}{parts[5]}"
    head = ipaddress.ip_address(prefix).exploded.split(":")[:4]
    return str(ipaddress.ip_address(":".join(head) + ":" + iid))


def subnet(api: httpx.Client, net: Json, cidr: str, **extra: Any) -> Json:
    return create(api, "subnets", "subnet", network_id=net["id"], cidr=cidr, **extra)


@pytest.mark.parametrize("mode", ["slaac", "dhcpv6-stateless"])
def test_a_port_gets_its_eui64(api: httpx.Client, mode: str) -> None:
    net = create(api, "networks", "network", name=f"auto-{mode}")
    v4 = subnet(api, net, "10.91.0.0/24")
    v6 = subnet(api, net, "2001:db8:91::/64", ipv6_ra_mode=mode, ipv6_address_mode=mode)
    port = create(api, "ports", "port", network_id=net["id"], mac_address="fa:16:3e:12:34:56")
    by_subnet = {f["subnet_id"]: f["ip_address"] for f in port["fixed_ips"]}
    assert (
        by_subnet[v6["id"]]
        == eui64_by_hand("2001:db8:91::", "fa:16:3e:12:34:56")
        == "2001:db8:91:0:f816:3eff:fe12:3456"
    )
    assert v4["id"] in by_subnet
    # Asking for the subnet alone gives the EUI-64 too.
    other = create(api, "ports", "port", network_id=net["id"], fixed_ips=[{"subnet_id": v6["id"]}])
    assert other["fixed_ips"] == [{"subnet_id": v6["id"],
                                   "ip_address": eui64_by_hand("2001:db8:91::", other["mac_address"])}]  # fmt: skip


def test_an_automatic_address_cannot_be_chosen(api: httpx.Client) -> None:
    net = create(api, "networks", "network", name="auto-chosen")
    v6 = subnet(api, net, "2001:db8:92::/64", ipv6_address_mode="slaac")
    r = api.post(
        "/ports",
        json={
            "port": {"network_id": net["id"], "fixed_ips": [{"subnet_id": v6["id"], "ip_address": "2001:db8:92::77"}]}
        },
    )
    assert "automatic addresses" in error(r, 400, "AllocationOnAutoAddressSubnet")
    # A router's interface takes the gateway address on it, as in Neutron.
    router = create(api, "routers", "router", name="r-auto")
    r = api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": v6["id"]})
    assert r.status_code == 200, r.text


def test_stateful_and_legacy_subnets_still_allocate_from_the_pool(api: httpx.Client) -> None:
    net = create(api, "networks", "network", name="auto-mixed")
    auto = subnet(api, net, "2001:db8:93::/64", ipv6_address_mode="slaac")
    stateful = subnet(api, net, "2001:db8:94::/64", ipv6_address_mode="dhcpv6-stateful")
    port = create(api, "ports", "port", network_id=net["id"])
    by_subnet = {f["subnet_id"]: f["ip_address"] for f in port["fixed_ips"]}
    assert by_subnet[auto["id"]] == eui64_by_hand("2001:db8:93::", port["mac_address"])
    assert ipaddress.ip_address(by_subnet[stateful["id"]]) in ipaddress.ip_network("2001:db8:94::/64")
    assert by_subnet[stateful["id"]] != eui64_by_hand("2001:db8:94::", port["mac_address"])  # (from the pool)


@pytest.mark.parametrize(
    ("cidr", "modes", "words"),
    [
        ("2001:db8:95::/64", {"ipv6_ra_mode": "slaac", "ipv6_address_mode": "dhcpv6-stateful"}, "must be the same"),
        ("2001:db8:96::/80", {"ipv6_address_mode": "slaac"}, "requires the prefix to be /64"),
        ("2001:db8:97::/56", {"ipv6_address_mode": "dhcpv6-stateless"}, "requires the prefix to be /64"),
    ],
)
def test_modes_that_cannot_work_are_refused(api: httpx.Client, cidr: str, modes: Json, words: str) -> None:
    net = create(api, "networks", "network", name="auto-bad")
    r = api.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": cidr, **modes}})
    assert words in error(r, 400)
