"""Routers' extra routes (Neutron's extraroute and extraroute-atomic): the `routes` attribute on PUT, the atomic
add/remove member actions, and Neutron's checks (nexthop on one of the router's subnets, max_routes, duplicates,
CIDRs, interfaces a route needs)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.api import create, error

GATEWAY = "network:router_gateway"


def routed(api: httpx.Client, admin: httpx.Client | None = None) -> dict[str, Any]:
    """A router on 10.0.0.0/24 (interface 10.0.0.1) and 10.0.1.0/24, with a gateway on 203.0.113.0/24."""
    ext = create(admin or api, "networks", "network", name="public", **{"router:external": True})
    create(admin or api, "subnets", "subnet", network_id=ext["id"], cidr="203.0.113.0/24")
    router = create(api, "routers", "router", name="r", external_gateway_info={"network_id": ext["id"]})
    subs = []
    for cidr in ("10.0.0.0/24", "10.0.1.0/24"):
        net = create(api, "networks", "network", name=f"n-{cidr}")
        sub = create(api, "subnets", "subnet", network_id=net["id"], cidr=cidr)
        r = api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]})
        assert r.status_code == 200, r.text
        subs.append(sub)
    return {"router": api.get(f"/routers/{router['id']}").json()["router"], "subnets": subs}


def put_routes(api: httpx.Client, router_id: str, routes: Any) -> httpx.Response:
    return api.put(f"/routers/{router_id}", json={"router": {"routes": routes}})


def test_routes_on_update(api: httpx.Client) -> None:
    setup = routed(api)
    rid = setup["router"]["id"]
    # a nexthop on the gateway's subnet is connected too
    routes = [{"destination": "192.168.10.0/24", "nexthop": "10.0.0.5"},
              {"destination": "198.51.100.0/24", "nexthop": "203.0.113.254"}]  # fmt: skip
    r = put_routes(api, rid, routes)
    assert r.status_code == 200, r.text
    body = r.json()["router"]
    assert body["routes"] == routes
    assert body["revision_number"] == setup["router"]["revision_number"] + 1
    assert api.get(f"/routers/{rid}").json()["router"]["routes"] == routes
    # the same routes again change nothing, not even the revision
    again = put_routes(api, rid, routes).json()["router"]
    assert again["revision_number"] == body["revision_number"] and again["updated_at"] == body["updated_at"]
    # null and [] clear them
    assert put_routes(api, rid, None).json()["router"]["routes"] == []
    assert put_routes(api, rid, []).json()["router"]["routes"] == []
    # routes are no attribute of a create
    error(api.post("/routers", json={"router": {"routes": routes}}), 400)


@pytest.mark.parametrize(
    ("routes", "type_", "words"),
    [
        ([{"destination": "192.168.0.0/24", "nexthop": "10.9.0.5"}], "InvalidRoutes", "not connected with router"),
        ([{"destination": "192.168.0.0/24", "nexthop": "10.0.0.1"}], "InvalidRoutes", "used by router"),
        ([{"destination": "192.168.0.1/24", "nexthop": "10.0.0.5"}], "HTTPBadRequest", "192.168.0.0/24"),
        ([{"destination": "not-a-cidr", "nexthop": "10.0.0.5"}], "HTTPBadRequest", "not-a-cidr"),
        ([{"destination": "192.168.0.0/24", "nexthop": "10.0.0.300"}], "HTTPBadRequest", "10.0.0.300"),
        ([{"destination": "fd00::/64", "nexthop": "10.0.0.5"}], "InvalidRoutes", "IP versions"),
        ([{"destination": "192.168.0.0/24"}], "HTTPBadRequest", "nexthop"),
        ([{"destination": "192.168.0.0/24", "nexthop": "10.0.0.5", "via": "x"}], "HTTPBadRequest", "nexthop"),
        ([{"destination": "192.168.0.0/24", "nexthop": "10.0.0.5"}] * 2, "HTTPBadRequest", "Duplicate"),
        ("192.168.0.0/24", "HTTPBadRequest", "not a list"),
        ([["192.168.0.0/24", "10.0.0.5"]], "HTTPBadRequest", "routes"),
        ([{"destination": f"192.168.{i}.0/24", "nexthop": "10.0.0.5"} for i in range(31)], "RoutesExhausted",
         "exceeds the maximum 30"),
        ([{"destination": f"192.168.{i}.0/24", "nexthop": "10.0.0.5"} for i in range(10_000)], "RoutesExhausted",
         "exceeds the maximum 30"),
    ],
)  # fmt: skip
def test_bad_routes_change_nothing(api: httpx.Client, routes: Any, type_: str, words: str) -> None:
    setup = routed(api)
    rid = setup["router"]["id"]
    assert words in error(put_routes(api, rid, routes), 400, type_)
    after = api.get(f"/routers/{rid}").json()["router"]
    assert after["routes"] == [] and after["revision_number"] == setup["router"]["revision_number"]


def test_thirty_routes_fit(api: httpx.Client) -> None:
    rid = routed(api)["router"]["id"]
    routes = [{"destination": f"192.168.{i}.0/24", "nexthop": "10.0.1.9"} for i in range(30)]
    assert put_routes(api, rid, routes).json()["router"]["routes"] == routes
    more = api.put(f"/routers/{rid}/add_extraroutes",
                   json={"router": {"routes": [{"destination": "172.16.0.0/12", "nexthop": "10.0.1.9"}]}})  # fmt: skip
    error(more, 400, "RoutesExhausted")


def test_atomic_add_and_remove(api: httpx.Client) -> None:
    setup = routed(api)
    rid = setup["router"]["id"]
    a = {"destination": "192.168.1.0/24", "nexthop": "10.0.0.5"}
    b = {"destination": "192.168.2.0/24", "nexthop": "10.0.1.5"}
    c = {"destination": "192.168.3.0/24", "nexthop": "10.0.1.6"}
    r = api.put(f"/routers/{rid}/add_extraroutes", json={"router": {"routes": [a, b]}})
    assert r.status_code == 200, r.text
    assert r.json()["router"]["id"] == rid and r.json()["router"]["routes"] == [a, b]
    # adding one that is there is no error, and no change
    rev = r.json()["router"]["revision_number"]
    r = api.put(f"/routers/{rid}/add_extraroutes", json={"router": {"routes": [b]}})
    assert r.json()["router"]["routes"] == [a, b] and r.json()["router"]["revision_number"] == rev
    r = api.put(f"/routers/{rid}/add_extraroutes", json={"router": {"routes": [c]}})
    assert r.json()["router"]["routes"] == [a, b, c]
    # removing: those given go, one that isn't there is no error
    r = api.put(f"/routers/{rid}/remove_extraroutes", json={"router": {"routes": [b, {**b, "nexthop": "10.0.1.7"}]}})
    assert r.status_code == 200, r.text
    assert r.json()["router"]["routes"] == [a, c]
    # hostile bodies: nothing changes
    for body in ({"routes": [b]}, {"router": {"routes": [b], "name": "x"}}, {"router": [b]}, [b],
                 {"router": {"routes": [{"destination": "8.8.8.0/24", "nexthop": "1.1.1.1"}]}}):  # fmt: skip
        assert api.put(f"/routers/{rid}/add_extraroutes", json=body).status_code == 400, body
    error(api.put(f"/routers/{rid}/add_extraroutes", content=b"{"), 400)
    assert api.get(f"/routers/{rid}").json()["router"]["routes"] == [a, c]
    error(api.put("/routers/no-such/add_extraroutes", json={"router": {"routes": [b]}}), 404, "RouterNotFound")


def test_interface_a_route_needs_stays(api: httpx.Client) -> None:
    setup = routed(api)
    rid, sub0, sub1 = setup["router"]["id"], *setup["subnets"]
    assert put_routes(api, rid, [{"destination": "192.168.1.0/24", "nexthop": "10.0.0.5"}]).status_code == 200
    r = api.put(f"/routers/{rid}/remove_router_interface", json={"subnet_id": sub0["id"]})
    message = error(r, 409, "RouterInterfaceInUseByRoute")
    assert message == (f"Router interface for subnet {sub0['id']} on router {rid} cannot be deleted, as it is "
                       "required by one or more routes.")  # fmt: skip
    # the other interface goes; this one once no route needs it
    assert api.put(f"/routers/{rid}/remove_router_interface", json={"subnet_id": sub1["id"]}).status_code == 200
    assert put_routes(api, rid, []).status_code == 200
    assert api.put(f"/routers/{rid}/remove_router_interface", json={"subnet_id": sub0["id"]}).status_code == 200


def test_routes_of_another_project(users: dict[str, httpx.Client]) -> None:
    alice, bob = users["alice"], users["bob"]
    setup = routed(alice, users["admin"])
    rid = setup["router"]["id"]
    route = {"destination": "192.168.1.0/24", "nexthop": "10.0.0.5"}
    error(put_routes(bob, rid, [route]), 404, "RouterNotFound")
    error(bob.put(f"/routers/{rid}/add_extraroutes", json={"router": {"routes": [route]}}), 404, "RouterNotFound")
    error(bob.put(f"/routers/{rid}/remove_extraroutes", json={"router": {"routes": [route]}}), 404)
    # bob's own router cannot borrow alice's subnets for a nexthop
    mine = create(bob, "routers", "router", name="bobs")
    error(put_routes(bob, mine["id"], [route]), 400, "InvalidRoutes")
    assert alice.get(f"/routers/{rid}").json()["router"]["routes"] == []
