"""Networks through the live API on both backends: Neutron defaults, provider segments, policy, errors."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from cloudnet.store import tables as t
from cloudnet.store.db import Store
from tests.support.api import check_error
from tests.support.server import RunningServer

Json = dict[str, Any]


def create(client: httpx.Client, **attrs: Any) -> Json:
    resp = client.post("/networks", json={"network": attrs})
    assert resp.status_code == 201, resp.text
    return resp.json()["network"]


def network_ids(client: httpx.Client, **params: Any) -> set[str]:
    resp = client.get("/networks", params=params)
    assert resp.status_code == 200, resp.text
    return {n["id"] for n in resp.json()["networks"]}


# -- create / show / list / update / delete ------------------------------------------------------


def test_create_has_neutron_defaults_and_show_and_list_agree(api: httpx.Client) -> None:
    net = create(api, name="net1")
    assert uuid.UUID(net["id"])
    assert net["name"] == "net1"
    assert net["description"] == ""
    assert net["mtu"] == 1500
    assert net["status"] == "ACTIVE"
    assert net["admin_state_up"] is True
    assert net["shared"] is False
    assert net["router:external"] is False
    assert net["provider:network_type"] == "local"
    assert net["provider:physical_network"] is None
    assert net["provider:segmentation_id"] is None
    assert net["subnets"] == []
    assert net["tags"] == []
    assert net["revision_number"] == 0
    assert net["project_id"] == net["tenant_id"] == "admin"
    assert net["created_at"] == net["updated_at"]
    assert net["created_at"].endswith("Z")

    shown = api.get(f"/networks/{net['id']}")
    assert shown.status_code == 200
    assert shown.json()["network"] == net

    listed = api.get("/networks").json()["networks"]
    assert [n for n in listed if n["id"] == net["id"]] == [net]


@pytest.mark.ovn_dataplane
def test_on_ovn_an_overlay_network_leaves_room_for_geneve(api: httpx.Client) -> None:
    assert create(api, name="overlay")["mtu"] == 1500 - 58  # (the same frame, tunnelled between chassis)
    flat = create(api, name="flat", **{"provider:network_type": "flat", "provider:physical_network": "physnet9"})
    assert flat["mtu"] == 1500  # a provider network is not tunnelled
    assert create(api, name="asked", mtu=1400)["mtu"] == 1400


@pytest.mark.ovn_dataplane
def test_on_ovn_an_overlay_mtu_beyond_the_tunnel_is_refused(api: httpx.Client) -> None:
    tight = create(api, name="tight", mtu=1500 - 58)  # the largest that fits
    for mtu in (1500 - 57, 1500, 9000):
        check_error(api.post("/networks", json={"network": {"name": "big", "mtu": mtu}}), 400, "InvalidInput",
                    "Invalid input for operation: Requested MTU is too big, maximum is 1442.")  # fmt: skip
        check_error(api.put(f"/networks/{tight['id']}", json={"network": {"mtu": mtu}}), 400, "InvalidInput",
                    "Requested MTU is too big, maximum is 1442.")  # fmt: skip
    # Hostile sizes are bounded before any of this: never stored, never compared as huge integers.
    for mtu in (-1, 0, 67, 9217, 10**30, -(10**30), "1442; drop", True, 1442.5, [1442]):
        check_error(api.post("/networks", json={"network": {"name": "x", "mtu": mtu}}), 400, "HTTPBadRequest", "mtu")
        check_error(api.put(f"/networks/{tight['id']}", json={"network": {"mtu": mtu}}), 400, "HTTPBadRequest",
                    "mtu")  # fmt: skip
    # A bulk create with one network too big creates none of them.
    bulk = api.post("/networks", json={"networks": [{"name": "ok-1"}, {"name": "big", "mtu": 1500}]})
    check_error(bulk, 400, "InvalidInput", "maximum is 1442")
    assert not [n for n in api.get("/networks").json()["networks"] if n["name"] == "ok-1"]
    assert api.get(f"/networks/{tight['id']}").json()["network"]["mtu"] == 1500 - 58
    assert api.put(f"/networks/{tight['id']}", json={"network": {"mtu": 1400}}).json()["network"]["mtu"] == 1400
    # A provider network is not tunnelled: its MTU is not bounded by the tunnel.
    flat = create(api, name="flat-big", mtu=1500, **{"provider:network_type": "flat",
                                                      "provider:physical_network": "physnet8"})  # fmt: skip
    assert api.put(f"/networks/{flat['id']}", json={"network": {"mtu": 1500}}).status_code == 200


def test_create_with_explicit_attributes(api: httpx.Client) -> None:
    net = create(api, name="jumbo", description="big frames", mtu=9000, admin_state_up=False, tags=["b", "a"])
    assert (net["mtu"], net["admin_state_up"], net["description"]) == (9000, False, "big frames")
    assert net["tags"] == ["a", "b"]
    assert api.get(f"/networks/{net['id']}").json()["network"]["mtu"] == 9000


def test_list_filters_and_fields(api: httpx.Client) -> None:
    a = create(api, name="alpha", mtu=1400)
    b = create(api, name="beta")
    assert network_ids(api, name="alpha") == {a["id"]}
    assert network_ids(api, mtu=1500) == {b["id"]}
    assert network_ids(api, **{"provider:network_type": "local"}) == {a["id"], b["id"]}
    resp = api.get("/networks", params={"fields": ["id", "name"], "name": "beta"})
    assert resp.json()["networks"] == [{"id": b["id"], "name": "beta"}]
    check_error(api.get("/networks", params={"bogus": "1"}), 400, "HTTPBadRequest", "bogus")


def test_update_changes_values_and_bumps_revision(api: httpx.Client) -> None:
    net = create(api, name="before")
    resp = api.put(
        f"/networks/{net['id']}",
        json={"network": {"name": "after", "description": "d", "mtu": 1450, "admin_state_up": False}},
    )
    assert resp.status_code == 200, resp.text
    updated = resp.json()["network"]
    assert (updated["name"], updated["description"], updated["mtu"], updated["admin_state_up"]) == (
        "after",
        "d",
        1450,
        False,
    )
    assert updated["revision_number"] == net["revision_number"] + 1
    assert api.get(f"/networks/{net['id']}").json()["network"] == updated


def test_update_errors_change_nothing(api: httpx.Client) -> None:
    net = create(api, name="keep")
    check_error(
        api.put(f"/networks/{net['id']}", json={"network": {"name": "x", "mtu": "abc"}}),
        400,
        "HTTPBadRequest",
        "mtu",
        "abc",
    )
    check_error(
        api.put(f"/networks/{net['id']}", json={"network": {"name": "x", "foo": 1}}),
        400,
        "HTTPBadRequest",
        "Unrecognized attribute(s)",
        "foo",
    )
    check_error(
        api.put(f"/networks/{net['id']}", json={"network": {"provider:segmentation_id": 5}}),
        400,
        "HTTPBadRequest",
        "Unrecognized attribute(s)",
    )
    assert api.get(f"/networks/{net['id']}").json()["network"] == net


def test_mtu_below_ipv6_minimum_is_refused_with_an_ipv6_subnet(api: httpx.Client) -> None:
    net = create(api)
    assert api.put(f"/networks/{net['id']}", json={"network": {"mtu": 1200}}).json()["network"]["mtu"] == 1200
    check_error(
        api.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "2001:db8::/64"}}),
        400,
        "InvalidInput",
        "1280",
    )
    assert api.put(f"/networks/{net['id']}", json={"network": {"mtu": 1500}}).status_code == 200
    _subnet(api, net["id"], "2001:db8::/64")
    check_error(api.put(f"/networks/{net['id']}", json={"network": {"mtu": 1200}}), 400, "InvalidInput", "1280")
    assert api.get(f"/networks/{net['id']}").json()["network"]["mtu"] == 1500


def test_external_network_used_by_a_router_gateway(api: httpx.Client) -> None:
    ext = create(api, name="public", **{"router:external": True})
    _subnet(api, ext["id"], "203.0.113.0/24")
    router = api.post(
        "/routers", json={"router": {"name": "r", "external_gateway_info": {"network_id": ext["id"]}}}
    ).json()["router"]
    check_error(
        api.put(f"/networks/{ext['id']}", json={"network": {"router:external": False}}),
        409,
        "ExternalNetworkInUse",
        ext["id"],
    )
    check_error(api.delete(f"/networks/{ext['id']}"), 409, "NetworkInUse", ext["id"])
    assert api.get(f"/networks/{ext['id']}").json()["network"]["router:external"] is True
    resp = api.put(f"/routers/{router['id']}", json={"router": {"external_gateway_info": None}})
    assert resp.status_code == 200, resp.text
    assert api.put(f"/networks/{ext['id']}", json={"network": {"router:external": False}}).status_code == 200
    assert api.delete(f"/networks/{ext['id']}").status_code == 204


def test_delete_then_gone(api: httpx.Client) -> None:
    net = create(api)
    assert api.delete(f"/networks/{net['id']}").status_code == 204
    check_error(api.get(f"/networks/{net['id']}"), 404, "NetworkNotFound", net["id"])
    check_error(api.delete(f"/networks/{net['id']}"), 404, "NetworkNotFound", net["id"])
    assert net["id"] not in network_ids(api)


# -- validation -----------------------------------------------------------------------------------


def test_unknown_attribute_is_rejected(api: httpx.Client) -> None:
    before = network_ids(api)
    check_error(
        api.post("/networks", json={"network": {"name": "n", "colour": "red"}}),
        400,
        "HTTPBadRequest",
        "Unrecognized attribute(s)",
        "colour",
    )
    assert network_ids(api) == before


def test_bad_values_name_the_field(api: httpx.Client) -> None:
    cases: list[tuple[Json, str]] = [
        ({"mtu": "abc"}, "mtu"),
        ({"mtu": 20}, "mtu"),
        ({"mtu": 9217}, "mtu"),
        ({"admin_state_up": "maybe"}, "admin_state_up"),
        ({"name": 5}, "name"),
        ({"name": "x" * 256}, "name"),
        ({"tags": "a"}, "tags"),
        ({"provider:network_type": "gre"}, "provider:network_type"),
    ]
    for attrs, field in cases:
        err = check_error(api.post("/networks", json={"network": attrs}), 400, "HTTPBadRequest", field)
        assert err["message"].startswith(f"Invalid input for {field}"), (attrs, err)
    for body in ({"network": []}, {"networks": []}, {"networks": {}}, {"net": {}}, [], "x"):
        resp = api.post("/networks", json=body)
        check_error(resp, 400, "HTTPBadRequest")
    check_error(api.post("/networks", content=b"{not json"), 400, "HTTPBadRequest", "Malformed")
    check_error(api.post("/networks"), 400, "HTTPBadRequest", "body required")
    assert network_ids(api) == set()


# -- provider attributes --------------------------------------------------------------------------


def test_provider_validation(api: httpx.Client) -> None:
    vlan = {"provider:network_type": "vlan", "provider:physical_network": "physnet1"}
    flat = {"provider:network_type": "flat", "provider:physical_network": "physnet1"}
    cases: list[tuple[Json, str]] = [
        ({"provider:network_type": "flat"}, "physical_network required for flat"),
        ({"provider:network_type": "vlan", "provider:segmentation_id": 10}, "physical_network required for vlan"),
        (vlan, "segmentation_id required"),
        ({**vlan, "provider:segmentation_id": 0}, "out of range (1 through 4094)"),
        ({**vlan, "provider:segmentation_id": 4095}, "out of range (1 through 4094)"),
        ({**vlan, "provider:segmentation_id": -1}, "out of range"),
        ({**vlan, "provider:physical_network": ""}, "provider:physical_network"),
        ({**flat, "provider:segmentation_id": 3}, "segmentation_id specified for flat"),
        ({"provider:network_type": "local", "provider:physical_network": "physnet1"}, "physical_network not allowed"),
        ({"provider:segmentation_id": 7}, "segmentation_id specified for local"),
        ({"provider:physical_network": "physnet1"}, "physical_network not allowed"),
    ]
    for attrs, fragment in cases:
        check_error(api.post("/networks", json={"network": attrs}), 400, "HTTPBadRequest", fragment)
    assert network_ids(api) == set()
    for segid in (1, 4094):
        net = create(api, **vlan, **{"provider:segmentation_id": segid})
        assert (net["provider:network_type"], net["provider:physical_network"], net["provider:segmentation_id"]) == (
            "vlan",
            "physnet1",
            segid,
        )
        assert api.get(f"/networks/{net['id']}").json()["network"]["provider:segmentation_id"] == segid


def test_flat_and_local_provider_networks(api: httpx.Client) -> None:
    flat = create(api, **{"provider:network_type": "flat", "provider:physical_network": "physnet1"})
    assert (flat["provider:network_type"], flat["provider:physical_network"], flat["provider:segmentation_id"]) == (
        "flat",
        "physnet1",
        None,
    )
    local = create(api, **{"provider:network_type": "local"})
    assert (local["provider:network_type"], local["provider:physical_network"]) == ("local", None)
    assert network_ids(api, **{"provider:network_type": "flat"}) == {flat["id"]}
    assert network_ids(api, **{"provider:physical_network": "physnet1"}) == {flat["id"]}


def test_duplicate_vlan_is_a_conflict_until_deleted(api: httpx.Client) -> None:
    seg = {"provider:network_type": "vlan", "provider:physical_network": "physnet1", "provider:segmentation_id": 100}
    first = create(api, name="first", **seg)
    check_error(
        api.post("/networks", json={"network": {"name": "second", **seg}}),
        409,
        "VlanIdInUse",
        "VLAN 100",
        "physnet1",
    )
    assert network_ids(api) == {first["id"]}
    # The same VLAN id on another physical network, or another VLAN on the same one, is free.
    create(api, **{**seg, "provider:physical_network": "physnet2"})
    create(api, **{**seg, "provider:segmentation_id": 101})
    assert network_ids(api, **{"provider:segmentation_id": 100, "provider:physical_network": "physnet1"}) == {
        first["id"]
    }
    assert api.delete(f"/networks/{first['id']}").status_code == 204
    create(api, name="again", **seg)


def test_duplicate_flat_is_a_conflict(api: httpx.Client) -> None:
    seg = {"provider:network_type": "flat", "provider:physical_network": "physnet1"}
    first = create(api, **seg)
    check_error(api.post("/networks", json={"network": seg}), 409, "FlatNetworkInUse", "physnet1")
    # A VLAN on the same physical network is a different segment.
    vlan = create(api, **{**seg, "provider:network_type": "vlan", "provider:segmentation_id": 5})
    assert network_ids(api) == {first["id"], vlan["id"]}


def test_bulk_create_is_all_or_nothing(api: httpx.Client) -> None:
    seg = {"provider:network_type": "vlan", "provider:physical_network": "physnet1", "provider:segmentation_id": 9}
    resp = api.post("/networks", json={"networks": [{"name": "a"}, {"name": "b", **seg}, {"name": "c", **seg}]})
    check_error(resp, 409, "VlanIdInUse", "VLAN 9")
    assert network_ids(api) == set()
    resp = api.post("/networks", json={"networks": [{"name": "a"}, {"name": "b", "mtu": "x"}]})
    check_error(resp, 400, "HTTPBadRequest", "mtu")
    assert network_ids(api) == set()
    resp = api.post("/networks", json={"networks": [{"name": "a"}, {"name": "b", **seg}]})
    assert resp.status_code == 201, resp.text
    assert [n["name"] for n in resp.json()["networks"]] == ["a", "b"]
    assert network_ids(api) == {n["id"] for n in resp.json()["networks"]}


# -- subnets attribute and delete semantics -------------------------------------------------------


def _subnet(api: httpx.Client, network_id: str, cidr: str, **attrs: Any) -> Json:
    resp = api.post("/subnets", json={"subnet": {"network_id": network_id, "cidr": cidr, **attrs}})
    assert resp.status_code == 201, resp.text
    return resp.json()["subnet"]


def test_subnets_attribute_lists_subnet_ids(api: httpx.Client) -> None:
    net = create(api)
    other = create(api)
    s1 = _subnet(api, net["id"], "10.0.0.0/24")
    s2 = _subnet(api, net["id"], "2001:db8::/64")
    _subnet(api, other["id"], "10.1.0.0/24")
    shown = api.get(f"/networks/{net['id']}").json()["network"]
    assert sorted(shown["subnets"]) == sorted([s1["id"], s2["id"]])
    listed = {n["id"]: n for n in api.get("/networks").json()["networks"]}
    assert sorted(listed[net["id"]]["subnets"]) == sorted([s1["id"], s2["id"]])
    assert network_ids(api, subnets=s1["id"]) == {net["id"]}
    assert api.delete(f"/subnets/{s1['id']}").status_code == 204
    assert api.get(f"/networks/{net['id']}").json()["network"]["subnets"] == [s2["id"]]


def test_delete_with_ports_in_use_is_refused_and_deletes_nothing(api: httpx.Client) -> None:
    net = create(api)
    sub = _subnet(api, net["id"], "10.0.0.0/24")
    port = api.post("/ports", json={"port": {"network_id": net["id"], "device_owner": "compute:nova"}})
    assert port.status_code == 201, port.text
    port_id = port.json()["port"]["id"]

    check_error(api.delete(f"/networks/{net['id']}"), 409, "NetworkInUse", net["id"], "ports still in use")

    assert api.get(f"/networks/{net['id']}").status_code == 200
    assert api.get(f"/subnets/{sub['id']}").status_code == 200
    kept = api.get(f"/ports/{port_id}").json()["port"]
    assert kept["fixed_ips"] == [{"subnet_id": sub["id"], "ip_address": "10.0.0.2"}]

    assert api.delete(f"/ports/{port_id}").status_code == 204
    assert api.delete(f"/networks/{net['id']}").status_code == 204


def test_delete_cascades_subnets_and_dhcp_ports(api: httpx.Client, store: Store) -> None:
    net = create(api, tags=["n"])
    keep = create(api)
    s4 = _subnet(api, net["id"], "10.0.0.0/24", tags=["s"])
    s6 = _subnet(api, net["id"], "2001:db8::/64")
    kept_subnet = _subnet(api, keep["id"], "10.0.0.0/24")
    dhcp = api.post("/ports", json={"port": {"network_id": net["id"], "device_owner": "network:dhcp", "tags": ["p"]}})
    assert dhcp.status_code == 201, dhcp.text

    assert api.delete(f"/networks/{net['id']}").status_code == 204

    for sid in (s4["id"], s6["id"]):
        check_error(api.get(f"/subnets/{sid}"), 404, "SubnetNotFound", sid)
    check_error(api.get(f"/ports/{dhcp.json()['port']['id']}"), 404, "PortNotFound")
    assert api.get("/subnets", params={"network_id": net["id"]}).json()["subnets"] == []
    assert [s["id"] for s in api.get("/subnets").json()["subnets"]] == [kept_subnet["id"]]
    assert api.get("/ports").json()["ports"] == []
    # Nothing is left behind in the database either: no addresses, no tags of the deleted resources.
    with store.engine.connect() as conn:
        assert conn.execute(select(t.ip_allocations)).all() == []
        assert conn.execute(select(t.tags)).all() == []


# -- ids and visibility ---------------------------------------------------------------------------


def test_unknown_or_malformed_ids_are_404(api: httpx.Client) -> None:
    net = create(api)
    for bad_id in ("not-a-uuid", str(uuid.uuid4()), "x" * 300, "1", "%20", "%00", "ab%00cd", "'; DROP TABLE networks"):
        check_error(api.get(f"/networks/{bad_id}"), 404, "NetworkNotFound", "could not be found")
        check_error(api.put(f"/networks/{bad_id}", json={"network": {"name": "x"}}), 404, "NetworkNotFound")
        check_error(api.delete(f"/networks/{bad_id}"), 404, "NetworkNotFound")
    assert api.get(f"/networks/{net['id']}").json()["network"] == net
    # Ids are matched exactly: another spelling of the same UUID is not the network.
    check_error(api.get(f"/networks/{net['id'].upper()}"), 404, "NetworkNotFound")


def test_projects_do_not_see_each_others_networks(users: dict[str, httpx.Client]) -> None:
    alice, bob = users["alice"], users["bob"]
    mine = create(alice, name="alice-net")
    assert mine["project_id"] == "alice"
    check_error(bob.get(f"/networks/{mine['id']}"), 404, "NetworkNotFound", mine["id"])
    check_error(bob.put(f"/networks/{mine['id']}", json={"network": {"name": "x"}}), 404, "NetworkNotFound")
    check_error(bob.delete(f"/networks/{mine['id']}"), 404, "NetworkNotFound")
    assert network_ids(bob) == set()
    assert network_ids(alice) == {mine["id"]}
    assert mine["id"] in network_ids(users["admin"])
    assert alice.get(f"/networks/{mine['id']}").json()["network"]["name"] == "alice-net"


def test_shared_and_external_networks_are_visible_to_all(users: dict[str, httpx.Client]) -> None:
    admin, alice = users["admin"], users["alice"]
    shared = create(admin, name="shared", shared=True)
    external = create(admin, name="ext", **{"router:external": True})
    private = create(admin, name="private")
    assert network_ids(alice) == {shared["id"], external["id"]}
    assert alice.get(f"/networks/{shared['id']}").json()["network"]["shared"] is True
    assert alice.get(f"/networks/{external['id']}").json()["network"]["router:external"] is True
    check_error(alice.get(f"/networks/{private['id']}"), 404, "NetworkNotFound")
    assert network_ids(alice, shared=True) == {shared["id"]}
    assert network_ids(alice, **{"router:external": True}) == {external["id"]}


def test_visible_but_not_owned_networks_cannot_be_changed(users: dict[str, httpx.Client]) -> None:
    admin, alice = users["admin"], users["alice"]
    shared = create(admin, name="shared", shared=True)
    check_error(alice.put(f"/networks/{shared['id']}", json={"network": {"name": "mine"}}), 403, "PolicyNotAuthorized")
    check_error(alice.delete(f"/networks/{shared['id']}"), 403, "PolicyNotAuthorized")
    assert admin.get(f"/networks/{shared['id']}").json()["network"] == shared


def test_members_may_not_set_privileged_attributes(users: dict[str, httpx.Client]) -> None:
    forbidden: list[Json] = [
        {"shared": True},
        {"router:external": True},
        {"provider:network_type": "local"},
        {"provider:network_type": "flat", "provider:physical_network": "physnet1"},
        {"provider:network_type": "vlan", "provider:physical_network": "physnet1", "provider:segmentation_id": 7},
        {"project_id": "bob"},
        {"tenant_id": "bob"},
    ]
    for attrs in forbidden:
        check_error(users["alice"].post("/networks", json={"network": attrs}), 403, "PolicyNotAuthorized")
    assert network_ids(users["admin"]) == set()
    # Spelling out the defaults is not privileged.
    net = create(users["alice"], shared=False, project_id="alice", **{"router:external": False})
    assert (net["project_id"], net["shared"], net["router:external"]) == ("alice", False, False)


def test_members_may_not_make_their_network_shared_or_external(users: dict[str, httpx.Client]) -> None:
    alice = users["alice"]
    net = create(alice, name="n", shared=False)
    for attrs in ({"shared": True}, {"router:external": True}):
        check_error(alice.put(f"/networks/{net['id']}", json={"network": attrs}), 403, "PolicyNotAuthorized")
    assert alice.get(f"/networks/{net['id']}").json()["network"] == net
    updated = alice.put(f"/networks/{net['id']}", json={"network": {"name": "renamed"}})
    assert updated.status_code == 200
    assert updated.json()["network"]["name"] == "renamed"


def test_admin_may_create_in_another_project(users: dict[str, httpx.Client]) -> None:
    net = create(users["admin"], name="for-bob", project_id="bob")
    assert net["project_id"] == "bob"
    assert network_ids(users["bob"]) == {net["id"]}
    assert network_ids(users["alice"]) == set()


# -- races -----------------------------------------------------------------------------------------


def _parallel_posts(server: RunningServer, path: str, bodies: list[Json]) -> list[httpx.Response]:
    """POST each body from its own thread and client, all released together by a barrier."""
    barrier = threading.Barrier(len(bodies))

    def one(body: Json) -> httpx.Response:
        with httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=60) as client:
            client.get("/networks", params={"limit": 1}).raise_for_status()  # connect before the race
            barrier.wait(timeout=60)
            return client.post(path, json=body)

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        return list(pool.map(one, bodies))


def test_parallel_creates_of_one_segment_have_one_winner(api: httpx.Client, server: RunningServer) -> None:
    vlan = {"provider:network_type": "vlan", "provider:physical_network": "physnet1", "provider:segmentation_id": 42}
    flat = {"provider:network_type": "flat", "provider:physical_network": "physnet2"}
    bodies = [{"network": dict(seg, name=f"n{i}")} for i in range(12) for seg in (vlan, flat)]
    responses = _parallel_posts(server, "/networks", bodies)
    outcome = Counter(
        (r.status_code, r.json()["NeutronError"]["type"] if r.status_code != 201 else "created") for r in responses
    )
    assert outcome == Counter({(201, "created"): 2, (409, "VlanIdInUse"): 11, (409, "FlatNetworkInUse"): 11})
    assert len(network_ids(api)) == 2


def test_delete_racing_port_creates_is_clean(api: httpx.Client, server: RunningServer) -> None:
    """Either the delete wins (the later ports find no network) or a port does (NetworkInUse): never a 500."""
    for _round in range(3):
        net = create(api)
        _subnet(api, net["id"], "10.0.0.0/24")
        barrier = threading.Barrier(9)

        def act(i: int, network_id: str = net["id"], barrier: threading.Barrier = barrier) -> httpx.Response:
            with httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=60) as c:
                c.get("/networks", params={"limit": 1}).raise_for_status()
                barrier.wait(timeout=60)
                if i == 0:
                    return c.delete(f"/networks/{network_id}")
                return c.post("/ports", json={"port": {"network_id": network_id, "device_owner": "compute:x"}})

        with ThreadPoolExecutor(max_workers=9) as pool:
            deleted, *ports = pool.map(act, range(9))
        created = [p.json()["port"]["id"] for p in ports if p.status_code == 201]
        refused = [p.json()["NeutronError"]["type"] for p in ports if p.status_code != 201]
        remaining = {p["id"] for p in api.get("/ports", params={"network_id": net["id"]}).json()["ports"]}
        if deleted.status_code == 204:
            assert created == [] and remaining == set()
            assert refused == ["NetworkNotFound"] * 8
            check_error(api.get(f"/networks/{net['id']}"), 404, "NetworkNotFound")
        else:
            check_error(deleted, 409, "NetworkInUse")
            assert refused == []
            assert remaining == set(created) and len(created) == 8
            for port_id in created:
                assert api.delete(f"/ports/{port_id}").status_code == 204
            assert api.delete(f"/networks/{net['id']}").status_code == 204
