"""List semantics: filters, fields, sorting and limit/marker pagination, as Neutron defines them."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.api import create, error

MISSING = "7e1d2c3b-4a5f-4e6d-8c7b-9a0f1e2d3c4b"


def listed(api: httpx.Client, collection: str, params: Any = None) -> list[dict[str, Any]]:
    r = api.get(f"/{collection}", params=params)
    assert r.status_code == 200, r.text
    return list(r.json()[collection.replace("-", "_")])


def names(api: httpx.Client, collection: str, params: Any = None) -> list[str]:
    return [x["name"] for x in listed(api, collection, params)]


@pytest.fixture
def nets(api: httpx.Client) -> dict[str, dict[str, Any]]:
    specs = [
        {"name": "alpha", "mtu": 1400},
        {"name": "bravo", "admin_state_up": False, "mtu": 1400},
        {"name": "charlie", "shared": True},
        {"name": "delta", "router:external": True, "mtu": 9000},
        {"name": "echo", "admin_state_up": False, "description": "five"},
    ]
    return {s["name"]: create(api, "networks", "network", **s) for s in specs}


def test_filters_on_attributes(api: httpx.Client, nets: dict[str, dict[str, Any]]) -> None:
    cases: list[tuple[Any, list[str]]] = [
        ({"name": "alpha"}, ["alpha"]),
        ({"name": "nobody"}, []),
        ({"admin_state_up": "false"}, ["bravo", "echo"]),
        ({"admin_state_up": "False"}, ["bravo", "echo"]),
        ({"admin_state_up": "0"}, ["bravo", "echo"]),
        ({"admin_state_up": "True"}, ["alpha", "charlie", "delta"]),
        ({"shared": "true"}, ["charlie"]),
        ({"router:external": "true"}, ["delta"]),
        ({"mtu": "1400"}, ["alpha", "bravo"]),
        ({"mtu": "1500"}, ["charlie", "echo"]),
        ({"mtu": "1400", "admin_state_up": "true"}, ["alpha"]),
        ({"description": "five"}, ["echo"]),
        ({"id": nets["delta"]["id"]}, ["delta"]),
        ({"project_id": "admin"}, ["alpha", "bravo", "charlie", "delta", "echo"]),
        ({"tenant_id": "someone-else"}, []),
        ({"status": "ACTIVE", "shared": "false", "router:external": "false"}, ["alpha", "bravo", "echo"]),
        ({"provider:network_type": "local"}, ["alpha", "bravo", "charlie", "delta", "echo"]),
        ({"revision_number": "0"}, ["alpha", "bravo", "charlie", "delta", "echo"]),
        # a repeated filter is an OR of its values
        ([("name", "alpha"), ("name", "echo")], ["alpha", "echo"]),
        ([("mtu", "1400"), ("mtu", "9000")], ["alpha", "bravo", "delta"]),
        ([("name", "alpha"), ("name", "echo"), ("admin_state_up", "false")], ["echo"]),
    ]
    for params, expected in cases:
        assert sorted(names(api, "networks", params)) == expected, params


def test_filters_on_subnets_and_ports(api: httpx.Client) -> None:
    net = create(api, "networks", "network", name="n")
    v4 = create(api, "subnets", "subnet", network_id=net["id"], cidr="10.0.0.0/24", name="v4")
    v6 = create(api, "subnets", "subnet", network_id=net["id"], cidr="2001:db8::/64", name="v6", enable_dhcp=False)
    assert names(api, "subnets", {"ip_version": "6"}) == ["v6"]
    assert names(api, "subnets", {"enable_dhcp": "false"}) == ["v6"]
    assert names(api, "subnets", {"cidr": "10.0.0.0/24"}) == ["v4"]
    assert names(api, "subnets", {"gateway_ip": "10.0.0.1"}) == ["v4"]
    assert sorted(names(api, "subnets", {"network_id": net["id"]})) == ["v4", "v6"]
    error(api.get("/subnets", params={"ip_version": "four"}), 400)

    create(api, "ports", "port", network_id=net["id"], name="p1", device_owner="compute:nova",
                fixed_ips=[{"ip_address": "10.0.0.10"}])  # fmt: skip
    create(api, "ports", "port", network_id=net["id"], name="p2", admin_state_up=False,
                fixed_ips=[{"ip_address": "10.0.0.20"}, {"subnet_id": v6["id"]}])  # fmt: skip
    p3 = create(api, "ports", "port", network_id=net["id"], name="p3", fixed_ips=[{"subnet_id": v6["id"]}])
    assert names(api, "ports", {"device_owner": "compute:nova"}) == ["p1"]
    assert names(api, "ports", {"admin_state_up": "false"}) == ["p2"]
    assert names(api, "ports", {"mac_address": p3["mac_address"].upper()}) == ["p3"]
    assert names(api, "ports", {"fixed_ips": "ip_address=10.0.0.10"}) == ["p1"]
    assert sorted(names(api, "ports", {"fixed_ips": f"subnet_id={v6['id']}"})) == ["p2", "p3"]
    assert names(api, "ports", {"fixed_ips": f"subnet_id={v4['id']}", "admin_state_up": "false"}) == ["p2"]
    assert sorted(names(api, "ports", {"fixed_ips": "ip_address_substr=10.0.0."})) == ["p1", "p2"]
    assert names(api, "ports", [("fixed_ips", "ip_address=10.0.0.20"), ("fixed_ips", f"subnet_id={v4['id']}")]) == [
        "p2"
    ]
    assert names(api, "ports", {"fixed_ips": "ip_address=10.0.0.99"}) == []
    assert sorted(names(api, "ports", [("name", "p1"), ("name", "p3")])) == ["p1", "p3"]
    assert sorted(names(api, "ports", {"device_id": ""})) == ["p1", "p2", "p3"]
    error(api.get("/ports", params={"fixed_ips": "mac=1"}), 400)
    error(api.get("/ports", params={"fixed_ips": "10.0.0.10"}), 400)


def test_bad_filters(api: httpx.Client, nets: dict[str, dict[str, Any]]) -> None:
    assert "bogus" in error(api.get("/networks", params={"bogus": "1"}), 400, "HTTPBadRequest")
    error(api.get("/networks", params={"admin_state_up": "maybe"}), 400)
    error(api.get("/networks", params={"mtu": "big"}), 400)
    error(api.get("/ports", params={"nope": "x"}), 400)
    error(api.get("/routers", params={"nope": "x"}), 400)
    error(api.get("/security-groups", params={"nope": "x"}), 400)
    error(api.get("/security-group-rules", params={"nope": "x"}), 400)
    error(api.get("/subnets", params={"nope": "x"}), 400)


def test_fields(api: httpx.Client, nets: dict[str, dict[str, Any]]) -> None:
    for params in ([("fields", "id"), ("fields", "name")], {"fields": "id,name"}, [("fields", "id,name")]):
        items = listed(api, "networks", params)
        assert len(items) == 5
        assert all(set(i) == {"id", "name"} for i in items), params
    one = api.get(f"/networks/{nets['alpha']['id']}", params=[("fields", "name"), ("fields", "mtu")])
    assert one.status_code == 200
    assert one.json() == {"network": {"name": "alpha", "mtu": 1400}}
    one = api.get(f"/networks/{nets['alpha']['id']}", params={"fields": "router:external,shared"})
    assert one.json() == {"network": {"router:external": False, "shared": False}}
    # unknown fields are simply absent
    assert listed(api, "networks", {"fields": "id,nonsense", "name": "alpha"}) == [{"id": nets["alpha"]["id"]}]
    # fields combine with filters, sorting and paging
    page = api.get("/networks", params={"fields": "name", "sort_key": "name", "limit": 2}).json()
    assert page["networks"] == [{"name": "alpha"}, {"name": "bravo"}]
    assert [link["rel"] for link in page["networks_links"]] == ["next", "previous"]

    net = create(api, "networks", "network", name="ported")
    sub = create(api, "subnets", "subnet", network_id=net["id"], cidr="10.5.0.0/24")
    port = create(api, "ports", "port", network_id=net["id"], tags=["t"])
    items = listed(api, "ports", [("fields", "fixed_ips"), ("fields", "tags"), ("fields", "security_groups")])
    assert items == [{"fixed_ips": [{"subnet_id": sub["id"], "ip_address": "10.5.0.2"}], "tags": ["t"],
                      "security_groups": port["security_groups"]}]  # fmt: skip
    assert listed(api, "ports", {"fields": "id"}) == [{"id": port["id"]}]


def test_sorting(api: httpx.Client, nets: dict[str, dict[str, Any]]) -> None:
    assert names(api, "networks", {"sort_key": "name"}) == ["alpha", "bravo", "charlie", "delta", "echo"]
    assert names(api, "networks", {"sort_key": "name", "sort_dir": "desc"}) == [
        "echo", "delta", "charlie", "bravo", "alpha",
    ]  # fmt: skip
    params = [("sort_key", "mtu"), ("sort_dir", "desc"), ("sort_key", "name"), ("sort_dir", "asc")]
    assert names(api, "networks", params) == ["delta", "charlie", "echo", "alpha", "bravo"]
    params = [("sort_key", "admin_state_up"), ("sort_dir", "asc"), ("sort_key", "name"), ("sort_dir", "desc")]
    assert names(api, "networks", params) == ["echo", "bravo", "delta", "charlie", "alpha"]
    params = [("sort_key", "mtu"), ("sort_key", "name")]  # directions default to ascending
    assert names(api, "networks", params) == ["alpha", "bravo", "charlie", "echo", "delta"]
    ids = [x["id"] for x in listed(api, "networks", {"sort_key": "id"})]
    assert ids == sorted(ids)

    assert "bogus" in error(api.get("/networks", params={"sort_key": "bogus"}), 400)
    error(api.get("/networks", params={"sort_key": "name", "sort_dir": "up"}), 400)
    error(api.get("/networks", params=[("sort_key", "name"), ("sort_dir", "asc"), ("sort_dir", "desc")]), 400)
    error(api.get("/networks", params={"sort_key": "tags"}), 400)


def follow(api: httpx.Client, collection: str, params: Any, rel: str) -> list[list[dict[str, Any]]]:
    """Every page, from the first request along `rel` links until there is none."""
    key = collection.replace("-", "_")
    r = api.get(f"/{collection}", params=params)
    pages = []
    for _ in range(100):
        assert r.status_code == 200, r.text
        body = r.json()
        pages.append(body[key])
        links = {link["rel"]: link["href"] for link in body.get(f"{key}_links", [])}
        if rel not in links:
            return pages
        r = api.get(links[rel])
    raise AssertionError("pagination does not end")


@pytest.mark.parametrize(
    "sort",
    [
        [],
        [("sort_key", "name"), ("sort_dir", "desc")],
        [("sort_key", "mtu"), ("sort_dir", "asc"), ("sort_key", "name"), ("sort_dir", "desc")],
        [("sort_key", "admin_state_up"), ("sort_dir", "desc")],
    ],
)
def test_pagination_walks_every_item_once(api: httpx.Client, sort: list[tuple[str, str]]) -> None:
    for i in range(11):
        create(api, "networks", "network", name=f"net-{i:02d}", mtu=1400 + (i % 3) * 100, admin_state_up=i % 2 == 0)
    everything = [x["id"] for x in listed(api, "networks", sort)]
    assert len(everything) == 11

    pages = follow(api, "networks", [*sort, ("limit", "3")], "next")
    assert [len(p) for p in pages] == [3, 3, 3, 2]
    assert [x["id"] for p in pages for x in p] == everything

    # back from the last item along the previous links
    marker = pages[-1][-1]["id"]
    back = follow(api, "networks", [*sort, ("limit", "4"), ("marker", marker), ("page_reverse", "true")], "previous")
    assert [x["id"] for p in reversed(back) for x in p] == everything[:-1]
    assert [len(p) for p in back] == [4, 4, 2]

    # page_reverse without a marker is the last page
    tail = api.get("/networks", params=[*sort, ("limit", "3"), ("page_reverse", "true")]).json()
    assert [x["id"] for x in tail["networks"]] == everything[-3:]
    # going backward Neutron always offers `next`; `previous` while the pages are full
    assert [link["rel"] for link in tail["networks_links"]] == ["next", "previous"]


def test_pagination_links(api: httpx.Client, nets: dict[str, dict[str, Any]]) -> None:
    """As Neutron's api_common.get_pagination_links: `next` unless a forward page came back short, `previous`
    unless a backward page came back short, hrefs = the request's query + marker (+ page_reverse=True)."""
    first = api.get("/networks", params={"limit": 2, "sort_key": "name", "admin_state_up": "true"}).json()
    assert [n["name"] for n in first["networks"]] == ["alpha", "charlie"]
    links = {x["rel"]: x["href"] for x in first["networks_links"]}
    assert list(links) == ["next", "previous"]
    # the link keeps the filters and sort, and points after the last item
    href = httpx.URL(links["next"])
    assert href.path == "/v2.0/networks"
    assert list(href.params.multi_items()) == [("limit", "2"), ("sort_key", "name"), ("admin_state_up", "true"),
                                               ("marker", nets["charlie"]["id"])]  # fmt: skip
    back = httpx.URL(links["previous"])
    assert list(back.params.multi_items())[-2:] == [("marker", nets["alpha"]["id"]), ("page_reverse", "True")]
    assert api.get(links["previous"]).json()["networks"] == []
    second = api.get(links["next"]).json()
    assert [n["name"] for n in second["networks"]] == ["delta"]
    assert [x["rel"] for x in second["networks_links"]] == ["previous"]
    prev = api.get(second["networks_links"][0]["href"]).json()
    assert [n["name"] for n in prev["networks"]] == ["alpha", "charlie"]
    assert [x["rel"] for x in prev["networks_links"]] == ["next", "previous"]

    # a full page has a next link even when nothing follows (Neutron does not look ahead); it leads to []
    whole = api.get("/networks", params={"limit": 5}).json()
    assert len(whole["networks"]) == 5
    nxt = [x["href"] for x in whole["networks_links"] if x["rel"] == "next"]
    empty = api.get(nxt[0]).json()
    assert empty["networks"] == []
    # an empty page going forward: only `previous`, without a marker
    assert [x["rel"] for x in empty["networks_links"]] == ["previous"]
    assert "marker" not in httpx.URL(empty["networks_links"][0]["href"]).params
    # no limit (or limit=0) gives no links at all
    assert "networks_links" not in api.get("/networks").json()
    assert "networks_links" not in api.get("/networks", params={"limit": 0}).json()
    assert len(listed(api, "networks", {"limit": 0})) == 5
    # hostile: a marker the caller cannot see, a bad limit
    assert error(api.get("/networks", params={"limit": 2, "marker": "no-such"}), 404, "NetworkNotFound")
    error(api.get("/networks", params={"limit": -1}), 400)
    error(api.get("/networks", params={"limit": "x"}), 400)


def test_pagination_on_other_collections(api: httpx.Client) -> None:
    for i in range(4):
        create(api, "routers", "router", name=f"r{i}")
        create(api, "security-groups", "security_group", name=f"g{i}")
    for collection, expected in (("routers", 4), ("security-groups", 5), ("security-group-rules", 4 + 4 * 2)):
        everything = [x["id"] for x in listed(api, collection)]
        assert len(everything) == expected
        pages = follow(api, collection, {"limit": 2}, "next")
        assert [x["id"] for p in pages for x in p] == everything, collection


def test_pagination_with_nullable_sort_key(api: httpx.Client) -> None:
    net = create(api, "networks", "network", name="n")
    for i in range(6):
        gateway = None if i % 2 else f"10.{i}.0.1"
        create(api, "subnets", "subnet", network_id=net["id"], cidr=f"10.{i}.0.0/24", name=f"s{i}", gateway_ip=gateway)
    for direction in ("asc", "desc"):
        sort = [("sort_key", "gateway_ip"), ("sort_dir", direction)]
        everything = [x["id"] for x in listed(api, "subnets", sort)]
        assert len(everything) == 6
        pages = follow(api, "subnets", [*sort, ("limit", "2")], "next")
        assert [x["id"] for p in pages for x in p] == everything, direction
        back = follow(api, "subnets", [*sort, ("limit", "2"), ("marker", everything[-1]), ("page_reverse", "true")],
                      "previous")  # fmt: skip
        assert [x["id"] for p in reversed(back) for x in p] == everything[:-1], direction


def test_timestamps_filter_and_sort(api: httpx.Client, nets: dict[str, dict[str, Any]]) -> None:
    alpha = nets["alpha"]
    same_second = sorted(n for n, x in nets.items() if x["created_at"] == alpha["created_at"])
    assert sorted(names(api, "networks", {"created_at": alpha["created_at"]})) == same_second
    assert names(api, "networks", {"created_at": "2001-01-01T00:00:00Z"}) == []
    assert "alpha" in names(api, "networks", {"updated_at": alpha["updated_at"]})
    error(api.get("/networks", params={"created_at": "yesterday"}), 400)
    everything = [x["id"] for x in listed(api, "networks", {"sort_key": "created_at"})]
    pages = follow(api, "networks", {"sort_key": "created_at", "limit": 2}, "next")
    assert [x["id"] for p in pages for x in p] == everything
    sg = create(api, "security-groups", "security_group", name="g")
    rules = listed(api, "security-group-rules", {"created_at": sg["created_at"], "security_group_id": sg["id"]})
    assert len(rules) == 2


def test_bad_paging_parameters(api: httpx.Client, nets: dict[str, dict[str, Any]]) -> None:
    for limit in ("-1", "abc", "1.5"):
        assert "limit" in error(api.get("/networks", params={"limit": limit}), 400, "HTTPBadRequest").lower()
    assert MISSING in error(api.get("/networks", params={"limit": 2, "marker": MISSING}), 404, "NetworkNotFound")
    error(api.get("/ports", params={"marker": MISSING}), 404, "PortNotFound")
    error(api.get("/networks", params={"marker": "not-a-uuid"}), 404)


def test_marker_of_another_project_is_unknown(users: dict[str, httpx.Client]) -> None:
    alice, bob = users["alice"], users["bob"]
    for i in range(3):
        create(alice, "networks", "network", name=f"a{i}")
    theirs = create(bob, "networks", "network", name="b")
    error(alice.get("/networks", params={"limit": 1, "marker": theirs["id"]}), 404, "NetworkNotFound")
    pages = follow(alice, "networks", {"limit": 1, "sort_key": "name"}, "next")
    assert [x["name"] for p in pages for x in p] == ["a0", "a1", "a2"]
