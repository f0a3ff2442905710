"""Port security (networks and ports) and allowed address pairs through the live API, on both backends: Neutron's
defaults and refusals (409/400 with its error types), replace semantics, bounds, and who may set them."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.api import check_error, create, create_network, create_subnet

Json = dict[str, Any]


def post_port(client: httpx.Client, network_id: str, **attrs: Any) -> httpx.Response:
    return client.post("/ports", json={"port": {"network_id": network_id, **attrs}})


def new_port(client: httpx.Client, network_id: str, **attrs: Any) -> Json:
    r = post_port(client, network_id, **attrs)
    assert r.status_code == 201, r.text
    return dict(r.json()["port"])


def put_port(client: httpx.Client, port_id: str, **attrs: Any) -> httpx.Response:
    return client.put(f"/ports/{port_id}", json={"port": attrs})


def show(client: httpx.Client, port_id: str) -> Json:
    r = client.get(f"/ports/{port_id}")
    assert r.status_code == 200, r.text
    return dict(r.json()["port"])


def security(port: Json) -> tuple[bool, list[str], list[Json]]:
    return port["port_security_enabled"], port["security_groups"], port["allowed_address_pairs"]


def default_group(client: httpx.Client) -> str:
    (sg,) = client.get("/security-groups", params={"name": "default"}).json()["security_groups"]
    return str(sg["id"])


@pytest.fixture
def net(api: httpx.Client) -> Json:
    network = create_network(api, name="net")
    create_subnet(api, network["id"], "10.0.0.0/24")
    create_subnet(api, network["id"], "2001:db8::/64")
    return network


# -- port security on networks and new ports ----------------------------------------------------------------


def test_network_port_security_is_the_default_of_its_new_ports(api: httpx.Client) -> None:
    on = create_network(api, name="on")
    off = create_network(api, name="off", port_security_enabled=False)
    assert (on["port_security_enabled"], off["port_security_enabled"]) == (True, False)
    assert api.get(f"/networks/{off['id']}").json()["network"]["port_security_enabled"] is False
    for network in (on, off):
        create_subnet(api, network["id"], "10.1.0.0/24" if network is on else "10.2.0.0/24")
    default = default_group(api)

    # A port that says nothing takes its network's; without port security, no default group either.
    assert security(new_port(api, on["id"])) == (True, [default], [])
    assert security(new_port(api, off["id"])) == (False, [], [])
    # What the port says wins.
    assert security(new_port(api, off["id"], port_security_enabled=True)) == (True, [default], [])
    assert security(new_port(api, on["id"], port_security_enabled=False)) == (False, [], [])

    # Turned on for the network: its new ports have it, its existing ports keep theirs (as in Neutron).
    before = new_port(api, off["id"])
    r = api.put(f"/networks/{off['id']}", json={"network": {"port_security_enabled": True}})
    assert r.status_code == 200, r.text
    assert r.json()["network"]["port_security_enabled"] is True
    assert r.json()["network"]["revision_number"] == off["revision_number"] + 1
    assert security(new_port(api, off["id"])) == (True, [default], [])
    assert security(show(api, before["id"])) == (False, [], [])
    check_error(api.put(f"/networks/{off['id']}", json={"network": {"port_security_enabled": "maybe"}}), 400,
                "HTTPBadRequest")  # fmt: skip


def test_trusted_ports_never_have_port_security(api: httpx.Client, net: Json) -> None:
    """network:* owners (DHCP, routers, metadata) are not filtered: port security off whatever is asked, and
    groups refused as on any port without it."""
    dhcp = new_port(api, net["id"], device_owner="network:dhcp", port_security_enabled=True)
    assert security(dhcp) == (False, [], [])
    sg = create(api, "security-groups", "security_group", name="web")
    check_error(post_port(api, net["id"], device_owner="network:dhcp", security_groups=[sg["id"]]), 400,
                "PortSecurityAndIPRequiredForSecurityGroups")  # fmt: skip
    router = create(api, "routers", "router", name="r")
    subnet = api.get("/subnets", params={"network_id": net["id"], "ip_version": 4}).json()["subnets"][0]["id"]
    r = api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": subnet})
    assert r.status_code == 200, r.text
    assert security(show(api, r.json()["port_id"]))[1:] == ([], [])


# -- the rules of turning it off and on -------------------------------------------------------------------


def test_port_security_off_means_no_groups_and_no_pairs(api: httpx.Client, net: Json) -> None:
    web = create(api, "security-groups", "security_group", name="web")["id"]
    pair = {"ip_address": "10.0.0.200"}
    port = new_port(api, net["id"], security_groups=[web], allowed_address_pairs=[pair])
    mac = port["mac_address"]
    assert security(port) == (True, [web], [{"ip_address": "10.0.0.200", "mac_address": mac}])

    # Off with groups or pairs still there: 409 (Neutron's order: pairs first), nothing changed.
    check_error(put_port(api, port["id"], port_security_enabled=False), 409, "AddressPairAndPortSecurityRequired")
    check_error(put_port(api, port["id"], port_security_enabled=False, allowed_address_pairs=[]), 409,
                "PortSecurityPortHasSecurityGroup")  # fmt: skip
    check_error(put_port(api, port["id"], port_security_enabled=False, security_groups=[]), 409,
                "AddressPairAndPortSecurityRequired")  # fmt: skip
    check_error(put_port(api, port["id"], port_security_enabled=False, security_groups=[web],
                         allowed_address_pairs=[]), 400, "PortSecurityAndIPRequiredForSecurityGroups")  # fmt: skip
    assert show(api, port["id"]) == port

    off = put_port(api, port["id"], port_security_enabled=False, security_groups=[], allowed_address_pairs=[])
    assert off.status_code == 200, off.text
    assert security(off.json()["port"]) == (False, [], [])
    # Without port security: no pairs (409) and no groups (400) can be added; empty lists are fine.
    check_error(put_port(api, port["id"], allowed_address_pairs=[pair]), 409, "AddressPairAndPortSecurityRequired")
    check_error(put_port(api, port["id"], security_groups=[web]), 400, "PortSecurityAndIPRequiredForSecurityGroups")
    assert put_port(api, port["id"], security_groups=[], allowed_address_pairs=None, name="x").status_code == 200
    assert security(show(api, port["id"])) == (False, [], [])

    # On again, with both in the same request.
    on = put_port(api, port["id"], port_security_enabled=True, security_groups=[web], allowed_address_pairs=[pair])
    assert on.status_code == 200, on.text
    assert security(on.json()["port"]) == (True, [web], [{"ip_address": "10.0.0.200", "mac_address": mac}])
    # A null list is an empty one (Neutron's convert_none_to_empty_list).
    cleared = put_port(api, port["id"], security_groups=None, allowed_address_pairs=None).json()["port"]
    assert security(cleared) == (True, [], [])


def test_new_port_without_port_security_refuses_pairs_and_groups(api: httpx.Client, net: Json) -> None:
    web = create(api, "security-groups", "security_group", name="web")["id"]
    before = {p["id"] for p in api.get("/ports").json()["ports"]}
    pair = [{"ip_address": "10.0.0.9"}]
    check_error(post_port(api, net["id"], port_security_enabled=False, allowed_address_pairs=pair), 409,
                "AddressPairAndPortSecurityRequired")  # fmt: skip
    check_error(post_port(api, net["id"], port_security_enabled=False, allowed_address_pairs=pair,
                          security_groups=[web]), 409, "AddressPairAndPortSecurityRequired")  # fmt: skip
    check_error(post_port(api, net["id"], port_security_enabled=False, security_groups=[web]), 400,
                "PortSecurityAndIPRequiredForSecurityGroups")  # fmt: skip
    # A bulk create with one such port creates none.
    r = api.post("/ports", json={"ports": [{"network_id": net["id"]},
                                           {"network_id": net["id"], "port_security_enabled": False,
                                            "allowed_address_pairs": pair}]})  # fmt: skip
    check_error(r, 409, "AddressPairAndPortSecurityRequired")
    assert {p["id"] for p in api.get("/ports").json()["ports"]} == before


# -- allowed address pairs ----------------------------------------------------------------------------------


def test_allowed_address_pairs_stored_shown_and_replaced(api: httpx.Client, net: Json) -> None:
    pairs = [
        {"ip_address": "10.0.0.100"},
        {"ip_address": "10.0.1.0/24", "mac_address": "FA-16-3E-00-00-01"},
        {"ip_address": "2001:db8::100"},
        {"ip_address": "2001:db8:1::/64", "mac_address": "fa:16:3e:00:00:02"},
        {"ip_address": "0.0.0.0/0"},  # Neutron allows "anything" (but no other range with multicast in it)
        {"ip_address": "10.0.0.100", "mac_address": "fa:16:3e:00:00:03"},  # same address, another MAC
    ]
    port = new_port(api, net["id"], allowed_address_pairs=pairs)
    mac = port["mac_address"]
    given = [("10.0.0.100", mac), ("10.0.1.0/24", "fa:16:3e:00:00:01"), ("2001:db8::100", mac),
             ("2001:db8:1::/64", "fa:16:3e:00:00:02"), ("0.0.0.0/0", mac),
             ("10.0.0.100", "fa:16:3e:00:00:03")]  # fmt: skip
    # The port's MAC where none was given, in canonical form; shown by MAC, then address (as read back).
    expected = [{"ip_address": ip, "mac_address": m} for ip, m in sorted(given, key=lambda g: (g[1], g[0]))]
    assert port["allowed_address_pairs"] == expected
    assert show(api, port["id"])["allowed_address_pairs"] == expected
    listed = api.get("/ports", params={"id": port["id"], "fields": ["id", "allowed_address_pairs"]}).json()["ports"]
    assert listed == [{"id": port["id"], "allowed_address_pairs": expected}]

    # Replaced as a whole; the revision moves; [] and null clear it.
    r = put_port(api, port["id"], allowed_address_pairs=[{"ip_address": "10.0.0.101"}])
    assert r.status_code == 200, r.text
    assert r.json()["port"]["allowed_address_pairs"] == [{"ip_address": "10.0.0.101", "mac_address": mac}]
    assert r.json()["port"]["revision_number"] == port["revision_number"] + 1
    assert show(api, port["id"])["allowed_address_pairs"] == [{"ip_address": "10.0.0.101", "mac_address": mac}]
    assert put_port(api, port["id"], allowed_address_pairs=[]).json()["port"]["allowed_address_pairs"] == []
    put_port(api, port["id"], allowed_address_pairs=[{"ip_address": "10.0.0.102"}])
    assert put_port(api, port["id"], allowed_address_pairs=None).json()["port"]["allowed_address_pairs"] == []
    # Deleting the port deletes its pairs with it.
    assert put_port(api, port["id"], allowed_address_pairs=pairs[:2]).status_code == 200
    assert api.delete(f"/ports/{port['id']}").status_code == 204
    again = new_port(api, net["id"], mac_address=mac, allowed_address_pairs=pairs[:1])
    assert again["allowed_address_pairs"] == [{"ip_address": "10.0.0.100", "mac_address": mac}]


LONG = "1" * 10_000
BAD_PAIRS: list[tuple[Any, str]] = [
    ("10.0.0.5", "HTTPBadRequest"),
    ({"ip_address": "10.0.0.5"}, "HTTPBadRequest"),
    ([{"ip_address": f"10.0.0.{i}"} for i in range(11)], "AllowedAddressPairExhausted"),
    (["10.0.0.5"], "HTTPBadRequest"),
    ([{"mac_address": "fa:16:3e:00:00:01"}], "AllowedAddressPairsMissingIP"),
    ([{"ip_address": "10.0.0.5"}, {"ip_address": "10.0.0.5"}], "DuplicateAddressPairInRequest"),
    ([{"ip_address": "10.0.0.5", "mac_address": "fa:16:3e:00:00:01"},
      {"ip_address": "10.0.0.5", "mac_address": "FA:16:3E:00:00:01"}], "DuplicateAddressPairInRequest"),
    ([{"ip_address": "10.0.0.5", "subnet_id": "x"}], "HTTPBadRequest"),
    ([{"ip_address": "10.0.0.256"}], "HTTPBadRequest"),
    ([{"ip_address": "10.0.0.0/33"}], "HTTPBadRequest"),
    ([{"ip_address": "010.0.0.1"}], "HTTPBadRequest"),
    ([{"ip_address": "10.0.0.0/255.255.255.0"}], "HTTPBadRequest"),
    ([{"ip_address": "10.0.0.0/"}], "HTTPBadRequest"),
    ([{"ip_address": "fe80::1%eth0"}], "HTTPBadRequest"),
    ([{"ip_address": " 10.0.0.1"}], "HTTPBadRequest"),
    ([{"ip_address": ""}], "HTTPBadRequest"),
    ([{"ip_address": 167772165}], "HTTPBadRequest"),
    ([{"ip_address": None}], "HTTPBadRequest"),
    ([{"ip_address": LONG}], "HTTPBadRequest"),
    ([{"ip_address": "224.0.0.5"}], "HTTPBadRequest"),
    ([{"ip_address": "239.1.0.0/16"}], "HTTPBadRequest"),
    ([{"ip_address": "192.0.0.0/2"}], "HTTPBadRequest"),  # holds 224.0.0.0/4
    ([{"ip_address": "ff02::1"}], "HTTPBadRequest"),
    ([{"ip_address": "::/0"}], "HTTPBadRequest"),  # holds ff00::/8 (Neutron exempts only 0.0.0.0/0)
    ([{"ip_address": "10.0.0.5", "mac_address": "zz:16:3e:00:00:01"}], "HTTPBadRequest"),
    ([{"ip_address": "10.0.0.5", "mac_address": "01:00:5e:00:00:01"}], "HTTPBadRequest"),
    ([{"ip_address": "10.0.0.5", "mac_address": "ff:ff:ff:ff:ff:ff"}], "HTTPBadRequest"),
    ([{"ip_address": "10.0.0.5", "mac_address": "00:00:00:00:00:00"}], "HTTPBadRequest"),
    ([{"ip_address": "10.0.0.5", "mac_address": None}], "HTTPBadRequest"),
    ([{"ip_address": "10.0.0.5", "mac_address": LONG}], "HTTPBadRequest"),
]  # fmt: skip


def test_allowed_address_pairs_refused_as_neutron_does(api: httpx.Client, net: Json) -> None:
    port = new_port(api, net["id"], allowed_address_pairs=[{"ip_address": "10.0.0.50"}])
    before = {p["id"] for p in api.get("/ports").json()["ports"]}
    failures = []
    for pairs, type_ in BAD_PAIRS:
        for r in (post_port(api, net["id"], allowed_address_pairs=pairs),
                  put_port(api, port["id"], allowed_address_pairs=pairs)):  # fmt: skip
            body = r.json().get("NeutronError", {})
            if r.status_code != 400 or body.get("type") != type_ or not 0 < len(body.get("message", "")) < 300:
                failures.append((str(pairs)[:80], r.status_code, r.text[:300]))
    assert failures == []
    assert show(api, port["id"]) == port
    assert {p["id"] for p in api.get("/ports").json()["ports"]} == before
    # A pair without a MAC is the port's own MAC: giving it twice that way is a duplicate too.
    twice = [{"ip_address": "10.0.0.5"}, {"ip_address": "10.0.0.5", "mac_address": port["mac_address"]}]
    check_error(put_port(api, port["id"], allowed_address_pairs=twice), 400, "DuplicateAddressPairInRequest")
    # Ten is the most (Neutron's max_allowed_address_pair).
    ten = [{"ip_address": f"10.0.0.{i}"} for i in range(10)]
    assert len(put_port(api, port["id"], allowed_address_pairs=ten).json()["port"]["allowed_address_pairs"]) == 10


# -- who may set them ---------------------------------------------------------------------------------------


def test_only_the_network_owner_may_weaken_port_security(users: dict[str, httpx.Client]) -> None:
    """On a shared network, a member's port is filtered and address-checked whatever the member asks (Neutron's
    create_port/update_port:port_security_enabled and :allowed_address_pairs: admin, service, network owner)."""
    admin, alice, bob = users["admin"], users["alice"], users["bob"]
    shared = create_network(admin, name="shared", shared=True)
    create_subnet(admin, shared["id"], "10.5.0.0/24")
    pair = [{"ip_address": "10.5.0.200"}]
    for body in ({"port_security_enabled": False}, {"port_security_enabled": True}, {"allowed_address_pairs": pair},
                 {"allowed_address_pairs": []}):  # fmt: skip
        check_error(post_port(alice, shared["id"], **body), 403, "PolicyNotAuthorized")
    port = new_port(alice, shared["id"])
    assert security(port) == (True, [default_group(alice)], [])
    for body in ({"port_security_enabled": False, "security_groups": []}, {"allowed_address_pairs": pair}):
        check_error(put_port(alice, port["id"], **body), 403, "PolicyNotAuthorized")
    assert show(alice, port["id"]) == port
    # Her groups she may still change (her own project's only).
    assert put_port(alice, port["id"], security_groups=[]).json()["port"]["security_groups"] == []
    theirs = create(bob, "security-groups", "security_group", name="bob's")
    check_error(put_port(alice, port["id"], security_groups=[theirs["id"]]), 404, "SecurityGroupNotFound")
    # The admin may do it for her; bob can neither see nor change her port.
    assert put_port(admin, port["id"], allowed_address_pairs=pair).status_code == 200
    check_error(put_port(bob, port["id"], allowed_address_pairs=[]), 404, "PortNotFound")
    check_error(bob.get(f"/ports/{port['id']}"), 404, "PortNotFound")
    # On her own network she decides.
    own = create_network(alice, name="own")
    create_subnet(alice, own["id"], "10.6.0.0/24")
    mine = new_port(alice, own["id"], port_security_enabled=False)
    assert security(mine) == (False, [], [])
    assert put_port(alice, mine["id"], port_security_enabled=True, allowed_address_pairs=pair).status_code == 200
