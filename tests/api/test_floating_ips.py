"""Floating IPs and port forwardings (Neutron's face) over the network forwards (LXD's face), against the live server.

One model: a floating IP associated to a port is a forward of the port's network to its fixed IP; its port
forwardings are the forward's port specifications; each face sees what the other made, and refuses what the
other holds with one error (IpAddressAlreadyAllocated).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from cloudnet.store import tables as t
from tests.support.api import check_error, create
from tests.support.server import RunningServer

Json = dict[str, Any]
PUBLIC = "192.0.2.0/24"


def attach(api: httpx.Client, router_id: str, subnet_id: str) -> None:
    r = api.put(f"/routers/{router_id}/add_router_interface", json={"subnet_id": subnet_id})
    assert r.status_code == 200, r.text


@dataclass
class Tenant:
    """A project's network (10.N.0.0/24) behind its router, whose gateway is on the external network."""

    api: httpx.Client
    network: Json
    subnet: Json
    router: Json

    def port(self, **body: Any) -> Json:
        return create(self.api, "ports", "port", network_id=self.network["id"], **body)


def tenant(api: httpx.Client, public_id: str, n: int, *, uplink: bool = True) -> Tenant:
    net = create(api, "networks", "network", name=f"net{n}")
    sub = create(api, "subnets", "subnet", network_id=net["id"], cidr=f"10.{n}.0.0/24")
    router = create(api, "routers", "router", name=f"r{n}", external_gateway_info={"network_id": public_id})
    if uplink:
        attach(api, router["id"], sub["id"])
    return Tenant(api, net, sub, router)


def public(admin: httpx.Client) -> Json:
    net = create(admin, "networks", "network", name="public", **{"router:external": True})
    create(admin, "subnets", "subnet", network_id=net["id"], cidr=PUBLIC)
    return net


def fip(api: httpx.Client, network_id: str, **body: Any) -> Json:
    return create(api, "floatingips", "floatingip", floating_network_id=network_id, **body)


def put(api: httpx.Client, fip_id: str, **body: Any) -> httpx.Response:
    return api.put(f"/floatingips/{fip_id}", json={"floatingip": body})


def forwards(api: httpx.Client, network_id: str) -> list[Json]:
    r = api.get(f"/networks/{network_id}/forwards")
    assert r.status_code == 200, r.text
    return list(r.json()["forwards"])


def test_floating_ip_lifecycle_is_a_forward(api: httpx.Client) -> None:
    ext = public(api)
    a = tenant(api, ext["id"], 1)
    port = a.port()
    fixed = port["fixed_ips"][0]["ip_address"]

    made = fip(api, ext["id"], description="web")
    assert made["status"] == "DOWN" and made["port_id"] is None and made["router_id"] is None
    assert made["floating_ip_address"].startswith("192.0.2.") and made["floating_network_id"] == ext["id"]
    assert made["project_id"] == made["tenant_id"] and made["revision_number"] == 0 and made["tags"] == []
    assert forwards(api, a.network["id"]) == []  # holds its address only

    r = put(api, made["id"], port_id=port["id"])
    assert r.status_code == 200, r.text
    got = r.json()["floatingip"]
    assert (got["port_id"], got["fixed_ip_address"], got["router_id"]) == (port["id"], fixed, a.router["id"])
    assert got["status"] == "ACTIVE" and got["port_details"]["network_id"] == a.network["id"]
    assert got["revision_number"] == 1 and got["description"] == "web"
    (fwd,) = forwards(api, a.network["id"])
    assert (fwd["id"], fwd["listen_address"], fwd["config"]) == (made["id"], made["floating_ip_address"],
                                                                 {"target_address": fixed})  # fmt: skip

    listed = api.get("/floatingips", params={"port_id": port["id"]}).json()["floatingips"]
    assert [f["id"] for f in listed] == [made["id"]]
    assert api.get("/floatingips", params={"status": "DOWN"}).json()["floatingips"] == []
    assert len(api.get("/floatingips", params={"status": ["DOWN", "ACTIVE"]}).json()["floatingips"]) == 1
    check_error(api.get("/floatingips", params={"floating_ip_address": "x"}), 400, "InvalidInput")
    check_error(api.get("/floatingips", params={"router_idx": "x"}), 400, "HTTPBadRequest")
    assert [f["id"] for f in api.get("/floatingips", params={"fixed_ip_address": fixed}).json()["floatingips"]] == [
        made["id"]
    ]

    # An update naming no port keeps the association (Neutron); port_id null drops it.
    assert put(api, made["id"], description="w2").json()["floatingip"]["port_id"] == port["id"]
    r = put(api, made["id"], port_id=None)
    assert r.status_code == 200 and r.json()["floatingip"]["status"] == "DOWN", r.text
    assert forwards(api, a.network["id"]) == []

    # Created associated; the port going disassociates it (and it keeps its address).
    again = fip(api, ext["id"], port_id=port["id"])
    assert again["fixed_ip_address"] == fixed
    assert api.delete(f"/ports/{port['id']}").status_code == 204
    left = api.get(f"/floatingips/{again['id']}").json()["floatingip"]
    assert (left["port_id"], left["status"], left["floating_ip_address"]) == (None, "DOWN",
                                                                              again["floating_ip_address"])  # fmt: skip
    for f in (made, again):
        assert api.delete(f"/floatingips/{f['id']}").status_code == 204
    check_error(api.get(f"/floatingips/{made['id']}"), 404, "FloatingIPNotFound")
    assert api.get("/floatingips").json()["floatingips"] == []


def whole_forward(api: httpx.Client) -> tuple[Json, Tenant, Json, Json]:
    """The external network, a tenant, its port, and a forward (made through the forwards API) to the port."""
    ext = public(api)
    a = tenant(api, ext["id"], 1)
    port = a.port()
    r = api.post(f"/networks/{a.network['id']}/forwards", json={
        "listen_address": "192.0.2.50", "config": {"target_address": port["fixed_ips"][0]["ip_address"]}})  # fmt: skip
    assert r.status_code == 201, r.text
    return ext, a, port, dict(r.json()["forward"])


def test_forward_shows_as_floating_ip_and_each_refuses_the_others_address(api: httpx.Client) -> None:
    ext, a, port, _forward = whole_forward(api)
    fixed = port["fixed_ips"][0]["ip_address"]
    (shown,) = api.get("/floatingips").json()["floatingips"]
    assert (shown["floating_ip_address"], shown["port_id"], shown["fixed_ip_address"]) == ("192.0.2.50", port["id"],
                                                                                          fixed)  # fmt: skip
    assert shown["floating_network_id"] == ext["id"] and shown["router_id"] == a.router["id"]

    # Neutron's face on the forward's address, and the forwards' face on a floating IP's: one error.
    r = api.post("/floatingips", json={"floatingip": {"floating_network_id": ext["id"],
                                                      "floating_ip_address": "192.0.2.50"}})  # fmt: skip
    check_error(r, 409, "IpAddressAlreadyAllocated", "192.0.2.50", shown["id"])
    loose = fip(api, ext["id"], floating_ip_address="192.0.2.60")
    r = api.post(f"/networks/{a.network['id']}/forwards", json={"listen_address": "192.0.2.60"})
    check_error(r, 409, "IpAddressAlreadyAllocated", "192.0.2.60", loose["id"])
    # A second floating IP for the same fixed IP.
    check_error(put(api, loose["id"], port_id=port["id"]), 409, "FloatingIPPortAlreadyAssociated", fixed)


def test_association_rules(api: httpx.Client) -> None:
    ext = public(api)
    a = tenant(api, ext["id"], 1)
    lone = tenant(api, ext["id"], 2, uplink=False)  # its router has no interface on it
    made = fip(api, ext["id"])
    check_error(put(api, made["id"], port_id=lone.port()["id"]), 404, "ExternalGatewayForFloatingIPNotFound")
    two = a.port(fixed_ips=[{"subnet_id": a.subnet["id"]}, {"subnet_id": a.subnet["id"]}])
    check_error(put(api, made["id"], port_id=two["id"]), 400, "BadRequest", "multiple fixed IPv4")
    check_error(put(api, made["id"], port_id=two["id"], fixed_ip_address="10.1.0.250"), 400, "BadRequest",
                "does not have fixed ip 10.1.0.250")  # fmt: skip
    check_error(put(api, made["id"], fixed_ip_address="10.1.0.5"), 400, "BadRequest", "without a port_id")
    check_error(put(api, made["id"], port_id="nope"), 404, "PortNotFound")
    r = api.post("/floatingips", json={"floatingip": {"floating_network_id": a.network["id"]}})
    check_error(r, 400, "BadRequest", "not a valid external network")
    r = api.post("/floatingips", json={"floatingip": {"floating_network_id": ext["id"],
                                                      "floating_ip_address": "198.51.100.7"}})  # fmt: skip
    check_error(r, 400, "InvalidIpForNetwork", "198.51.100.7")
    for bad in ({"description": "x" * 256}, {"tags": [f"t{i}" for i in range(51)]}, {"dns_name": "x"},
                {"floating_ip_address": "not-an-ip"}):  # fmt: skip
        r = api.post("/floatingips", json={"floatingip": {"floating_network_id": ext["id"], **bad}})
        assert r.status_code == 400, (bad, r.text)
    # The router the association needs stays while it is there.
    put(api, made["id"], port_id=a.port()["id"])
    r = api.put(f"/routers/{a.router['id']}/remove_router_interface", json={"subnet_id": a.subnet["id"]})
    assert r.status_code == 409, r.text


def test_projects_and_quota(users: dict[str, httpx.Client]) -> None:
    admin, alice, bob = users["admin"], users["alice"], users["bob"]
    ext = public(admin)
    a, b = tenant(alice, ext["id"], 1), tenant(bob, ext["id"], 2)
    mine = fip(alice, ext["id"], port_id=a.port()["id"])
    bobs = fip(bob, ext["id"])
    bob_port = b.port()
    check_error(bob.get(f"/floatingips/{mine['id']}"), 404, "FloatingIPNotFound")
    check_error(put(bob, mine["id"], port_id=bob_port["id"]), 404, "FloatingIPNotFound")
    check_error(bob.delete(f"/floatingips/{mine['id']}"), 404, "FloatingIPNotFound")
    check_error(put(alice, mine["id"], port_id=bob_port["id"]), 404, "PortNotFound")
    assert [f["id"] for f in bob.get("/floatingips").json()["floatingips"]] == [bobs["id"]]
    assert {f["id"] for f in admin.get("/floatingips").json()["floatingips"]} == {mine["id"], bobs["id"]}
    r = alice.post("/floatingips", json={"floatingip": {"floating_network_id": ext["id"],
                                                        "floating_ip_address": "192.0.2.77"}})  # fmt: skip
    check_error(r, 403, "PolicyNotAuthorized")
    alices_port = {"protocol": "tcp", "internal_port_id": a.port()["id"], "internal_port": 22, "external_port": 2222}
    r = alice.post(f"/floatingips/{bobs['id']}/port_forwardings", json={"port_forwarding": alices_port})
    check_error(r, 404, "FloatingIPNotFound")
    r = bob.post(f"/floatingips/{bobs['id']}/port_forwardings", json={"port_forwarding": alices_port})
    check_error(r, 404, "PortNotFound")
    r = admin.put("/quotas/bob", json={"quota": {"floatingip": 1}})
    assert r.status_code == 200, r.text
    check_error(bob.post("/floatingips", json={"floatingip": {"floating_network_id": ext["id"]}}), 409, "OverQuota")
    assert bob.get("/quotas/bob/details").json()["quota"]["floatingip"]["used"] == 1


def test_port_forwardings(api: httpx.Client) -> None:
    ext = public(api)
    a = tenant(api, ext["id"], 1)
    port, other = a.port(), a.port()
    made = fip(api, ext["id"])
    base = f"/floatingips/{made['id']}/port_forwardings"

    def pf(**body: Any) -> httpx.Response:
        return api.post(base, json={"port_forwarding": {"protocol": "tcp", "internal_port_id": port["id"], **body}})

    r = pf(internal_port=22, external_port=2222, description="ssh")
    assert r.status_code == 201, r.text
    ssh = r.json()["port_forwarding"]
    ip = port["fixed_ips"][0]["ip_address"]
    assert (ssh["internal_ip_address"], ssh["internal_port"], ssh["external_port"]) == (ip, 22, 2222)
    assert ssh["external_port_range"] == "2222:2222" and ssh["description"] == "ssh"
    r = pf(internal_port_range="8000:8009", external_port_range="9000:9009")
    assert r.status_code == 201, r.text
    ranged = r.json()["port_forwarding"]
    assert ranged["internal_port_range"] == "8000:8009" and ranged["external_port"] is None
    (fwd,) = forwards(api, a.network["id"])
    assert sorted((p["listen_port"], p["target_port"]) for p in fwd["ports"]) == [
        ("2222", "22"),
        ("9000-9009", "8000-8009"),
    ]
    shown = api.get(f"/floatingips/{made['id']}").json()["floatingip"]
    assert shown["status"] == "ACTIVE" and shown["port_id"] is None
    assert {p["id"] for p in shown["port_forwardings"]} == {ssh["id"], ranged["id"]}

    check_error(pf(internal_port=23, external_port=9005), 400, "BadRequest", "collision with the external_port")
    check_error(pf(internal_port=22, external_port=2223), 400, "BadRequest", "collision with the internal_port")
    check_error(pf(internal_port_range="1:3", external_port_range="10:11"), 400, "BadRequest", "N-N or 1-N")
    check_error(pf(internal_port=0, external_port=1), 400, "HTTPBadRequest")
    check_error(pf(protocol="sctp", internal_port=1, external_port=1), 400, "HTTPBadRequest")
    check_error(pf(internal_port=5, external_port=5, internal_ip_address="10.1.0.250"), 400, "BadRequest")
    check_error(put(api, made["id"], port_id=other["id"]), 409, "FipInUseByPortForwarding")
    check_error(api.delete(f"/floatingips/{made['id']}"), 409, "FipInUseByPortForwarding")
    whole = fip(api, ext["id"], port_id=other["id"])
    r = api.post(f"/floatingips/{whole['id']}/port_forwardings", json={"port_forwarding": {
        "protocol": "tcp", "internal_port_id": port["id"], "internal_port": 1, "external_port": 1}})  # fmt: skip
    check_error(r, 409, "FloatingIPPortAlreadyAssociated")
    r = api.post(base, json={"port_forwarding": {"protocol": "tcp", "internal_port_id": other["id"],
                                                 "internal_port": 80, "external_port": 80}})  # fmt: skip
    check_error(r, 409, "PortHasBindingFloatingIP")

    # Update, through either face, keeps its id; list filters; delete.
    r = api.put(f"{base}/{ssh['id']}", json={"port_forwarding": {"external_port": 2200}})
    assert r.status_code == 200 and r.json()["port_forwarding"]["external_port"] == 2200, r.text
    r = api.patch(f"/networks/{a.network['id']}/forwards/{made['floating_ip_address']}", json={"description": "d"})
    assert r.status_code == 200, r.text
    assert api.get(f"{base}/{ssh['id']}").json()["port_forwarding"]["external_port"] == 2200
    assert [p["id"] for p in api.get(base, params={"external_port": 2200}).json()["port_forwardings"]] == [ssh["id"]]
    check_error(api.get(base, params={"bogus": 1}), 400, "PortForwardingNotSupportFilterField")
    assert api.delete(f"{base}/{ranged['id']}").status_code == 204
    check_error(api.get(f"{base}/{ranged['id']}"), 404, "PortForwardingNotFound")
    assert api.delete(f"{base}/{ssh['id']}").status_code == 204
    assert api.get(f"/floatingips/{made['id']}").json()["floatingip"]["status"] == "DOWN"
    assert api.delete(f"/floatingips/{made['id']}").status_code == 204


def test_external_network_keeps_its_floating_ips_addresses(api: httpx.Client) -> None:
    ext = public(api)  # no router: only the floating IP holds an address of it
    made = fip(api, ext["id"], floating_ip_address="192.0.2.40")
    (sub,) = api.get("/subnets", params={"network_id": ext["id"]}).json()["subnets"]
    check_error(api.delete(f"/subnets/{sub['id']}"), 409, "SubnetInUse", "192.0.2.40")
    r = api.post("/ports", json={"port": {"network_id": ext["id"], "fixed_ips": [{"ip_address": "192.0.2.40"}]}})
    assert r.status_code in (400, 409), r.text
    picked = fip(api, ext["id"])["floating_ip_address"]
    assert picked not in ("192.0.2.40", "192.0.2.1", "192.0.2.0")
    # The external network going takes its unassociated floating IPs with it (Neutron).
    assert api.delete(f"/networks/{ext['id']}").status_code == 204
    check_error(api.get(f"/floatingips/{made['id']}"), 404, "FloatingIPNotFound")
    assert api.get("/floatingips").json()["floatingips"] == []


def events_of(api: httpx.Client, since: int, fid: str) -> list[str]:
    r = api.get("/events", params={"since": since})
    assert r.status_code == 200, r.text
    return [e["operation"] for e in r.json()["events"] if e["resource_id"] == fid]


def revision(api: httpx.Client) -> int:
    return int(api.get("/events", params={"since": 0, "limit": 1}).json()["revision"])


def test_a_floating_ip_lets_go_of_what_goes_and_stays_in_both_faces(api: httpx.Client) -> None:
    ext = public(api)
    a = tenant(api, ext["id"], 1)
    port, other = a.port(), a.port()
    whole = fip(api, ext["id"], port_id=port["id"])
    ranged = fip(api, ext["id"])
    r = api.post(f"/floatingips/{ranged['id']}/port_forwardings", json={"port_forwarding": {
        "protocol": "tcp", "internal_port_id": other["id"], "internal_port": 22, "external_port": 2222}})  # fmt: skip
    assert r.status_code == 201, r.text

    # The address taken off the port: disassociated, as Neutron does (one event).
    mark = revision(api)
    r = api.put(
        f"/ports/{port['id']}",
        json={"port": {"fixed_ips": [{"subnet_id": a.subnet["id"], "ip_address": "10.1.0.200"}]}},
    )
    assert r.status_code == 200, r.text
    assert r.json()["port"]["fixed_ips"] != port["fixed_ips"]
    got = api.get(f"/floatingips/{whole['id']}").json()["floatingip"]
    assert (got["port_id"], got["fixed_ip_address"], got["status"]) == (None, None, "DOWN")
    assert events_of(api, mark, whole["id"]) == ["update"]
    # The port of its port forwarding deleted: they go (Neutron), and it is associated to nothing.
    assert api.delete(f"/ports/{other['id']}").status_code == 204
    got = api.get(f"/floatingips/{ranged['id']}").json()["floatingip"]
    assert (got["port_forwardings"], got["status"]) == ([], "DOWN")
    assert forwards(api, a.network["id"]) == []

    # The forwards face lists both among the external network's forwards, and names them when refusing.
    listed = {f["listen_address"]: f for f in forwards(api, ext["id"])}
    assert set(listed) == {whole["floating_ip_address"], ranged["floating_ip_address"]}
    assert listed[whole["floating_ip_address"]]["network_id"] == ext["id"]
    address = whole["floating_ip_address"]
    r = api.post(f"/networks/{a.network['id']}/forwards", json={"listen_address": address})
    check_error(r, 409, "IpAddressAlreadyAllocated", whole["id"], f"listed among the forwards of network {ext['id']}")
    r = api.get(f"/networks/{ext['id']}/forwards/{address}")
    assert r.status_code == 200 and r.json()["forward"]["id"] == whole["id"], r.text
    # Changed through Neutron's face only (an association has a port); deleted through either.
    before = forwards(api, ext["id"])
    r = api.patch(f"/networks/{ext['id']}/forwards/{address}", json={"config": {"target_address": "10.1.0.9"}})
    check_error(r, 409, "FloatingIPNotAssociated", whole["id"])
    assert forwards(api, ext["id"]) == before
    assert api.delete(f"/networks/{ext['id']}/forwards/{address}").status_code == 204
    check_error(api.get(f"/floatingips/{whole['id']}"), 404, "FloatingIPNotFound")


def test_a_forward_stays_a_forward_when_neutron_disassociates_it(api: httpx.Client) -> None:
    ext, a, port, made = whole_forward(api)
    fixed = port["fixed_ips"][0]["ip_address"]
    got = put(api, made["id"], port_id=None).json()["floatingip"]
    assert (got["port_id"], got["fixed_ip_address"]) == (None, None)
    (kept,) = forwards(api, a.network["id"])  # still its network's forward, with no target
    assert (kept["id"], kept["config"]) == (made["id"], {})
    assert forwards(api, ext["id"]) == []
    # Its port going leaves a forward as it is (LXD), shown with the address no port holds.
    assert api.patch(f"/networks/{a.network['id']}/forwards/192.0.2.50",
                     json={"config": {"target_address": fixed}}).status_code == 200  # fmt: skip
    assert api.delete(f"/ports/{port['id']}").status_code == 204
    got = api.get(f"/floatingips/{made['id']}").json()["floatingip"]
    assert (got["port_id"], got["fixed_ip_address"]) == (None, fixed)
    assert [f["config"] for f in forwards(api, a.network["id"])] == [{"target_address": fixed}]


def test_a_network_going_disassociates_floating_ips_and_deletes_forwards(api: httpx.Client,
                                                                         server: RunningServer) -> None:  # fmt: skip
    """LXD deletes a network's forwards with it; Neutron's floating IPs outlive it, disassociated. (A network with
    either keeps its router link, so this is what earlier versions left on a detached network.)"""
    ext = public(api)
    a = tenant(api, ext["id"], 1, uplink=False)
    rows = {"0a": ("192.0.2.30", "floatingip"), "0b": ("192.0.2.31", "forward")}
    with server.store.write() as tx:
        for key, (address, origin) in rows.items():
            tx.conn.execute(t.forwards.insert().values(
                id=f"00000000-0000-4000-8000-0000000000{key}", network_id=a.network["id"],
                floating_network_id=ext["id"], listen_address=address, description="", origin=origin,
                config={"target_address": "10.1.0.9"}, ports=[], project_id=a.network["project_id"],
                created_at=tx.now, updated_at=tx.now, revision_number=0))  # fmt: skip
    assert api.delete(f"/networks/{a.network['id']}").status_code == 204
    (left,) = api.get("/floatingips").json()["floatingips"]
    assert (left["floating_ip_address"], left["port_id"], left["fixed_ip_address"]) == ("192.0.2.30", None, None)
    assert [f["listen_address"] for f in forwards(api, ext["id"])] == ["192.0.2.30"]


def test_other_projects_floating_ips_are_not_listed_under_the_external_network(
    users: dict[str, httpx.Client],
) -> None:
    admin, alice, bob = users["admin"], users["alice"], users["bob"]
    ext = public(admin)
    mine = fip(alice, ext["id"])
    bobs = fip(bob, ext["id"])
    base = f"/networks/{ext['id']}/forwards"
    assert [f["id"] for f in forwards(alice, ext["id"])] == [mine["id"]]
    assert [f["id"] for f in forwards(bob, ext["id"])] == [bobs["id"]]
    assert {f["id"] for f in forwards(admin, ext["id"])} == {mine["id"], bobs["id"]}
    address = mine["floating_ip_address"]
    check_error(bob.get(f"{base}/{address}"), 404, "NetworkForwardNotFound")
    check_error(bob.patch(f"{base}/{address}", json={"description": "x"}), 404, "NetworkForwardNotFound")
    check_error(bob.delete(f"{base}/{address}"), 404, "NetworkForwardNotFound")
    check_error(bob.post(base, json={"listen_address": "192.0.2.99"}), 404, "NetworkNotFound")
    # Bob is told the address is held, not by what (as Neutron's face tells him).
    b = tenant(bob, ext["id"], 2)
    r = bob.post(f"/networks/{b.network['id']}/forwards", json={"listen_address": address})
    message = check_error(r, 409, "IpAddressAlreadyAllocated", "a floating IP of another project")["message"]
    assert mine["id"] not in message and ext["id"] not in message
    assert alice.get(f"/floatingips/{mine['id']}").status_code == 200
