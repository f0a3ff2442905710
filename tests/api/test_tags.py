"""Neutron's tag extension: /{collection}/{id}/tags[/{tag}], tags in create bodies, and tag filters."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.support.api import create, error
from tests.support.server import RunningServer

MISSING = "2c4f0a9e-5d1b-4f3e-8a7c-6b9d0e1f2a33"


@pytest.fixture
def resources(api: httpx.Client) -> dict[str, dict[str, Any]]:
    """One of each taggable kind, keyed by URL collection."""
    net = create(api, "networks", "network", name="n")
    return {
        "networks": net,
        "subnets": create(api, "subnets", "subnet", network_id=net["id"], cidr="10.0.0.0/24"),
        "ports": create(api, "ports", "port", network_id=net["id"]),
        "routers": create(api, "routers", "router", name="r"),
        "security-groups": create(api, "security-groups", "security_group", name="g"),
    }


MEMBER = {
    "networks": "network",
    "subnets": "subnet",
    "ports": "port",
    "routers": "router",
    "security-groups": "security_group",
}


def show(api: httpx.Client, collection: str, ident: str) -> dict[str, Any]:
    r = api.get(f"/{collection}/{ident}")
    assert r.status_code == 200, r.text
    return dict(r.json()[MEMBER[collection]])


def test_tag_lifecycle_on_every_kind(api: httpx.Client, resources: dict[str, dict[str, Any]]) -> None:
    for collection, res in resources.items():
        base = f"/{collection}/{res['id']}/tags"
        rev = show(api, collection, res["id"])["revision_number"]
        assert api.get(base).json() == {"tags": []}

        r = api.put(base, json={"tags": ["red", "blue", "green"]})
        assert r.status_code == 200, (collection, r.text)
        assert r.json() == {"tags": ["blue", "green", "red"]}
        assert api.get(base).json() == {"tags": ["blue", "green", "red"]}
        shown = show(api, collection, res["id"])
        assert shown["tags"] == ["blue", "green", "red"]
        assert shown["revision_number"] == rev + 1

        # replace drops what is not listed
        assert api.put(base, json={"tags": ["red", "amber"]}).json() == {"tags": ["amber", "red"]}

        r = api.put(f"{base}/violet")
        assert r.status_code == 201, (collection, r.text)
        assert r.content == b""
        assert api.put(f"{base}/violet").status_code == 201  # idempotent
        assert api.get(base).json() == {"tags": ["amber", "red", "violet"]}

        assert api.get(f"{base}/violet").status_code == 204
        assert "nope" in error(api.get(f"{base}/nope"), 404, "TagNotFound")

        assert api.delete(f"{base}/amber").status_code == 204
        assert api.get(base).json() == {"tags": ["red", "violet"]}
        error(api.delete(f"{base}/amber"), 404, "TagNotFound")
        error(api.get(f"{base}/amber"), 404, "TagNotFound")

        # POST adds to what is there (Neutron's "add tags"), answering all of them; again: no change, no revision
        r = api.post(base, json={"tags": ["red", "amber", "blue"]})
        assert r.status_code == 201, (collection, r.text)
        assert r.json() == {"tags": ["amber", "blue", "red", "violet"]}
        rev = show(api, collection, res["id"])["revision_number"]
        assert api.post(base, json={"tags": ["blue"]}).json() == {"tags": ["amber", "blue", "red", "violet"]}
        assert api.post(base, json={"tags": []}).status_code == 201
        assert show(api, collection, res["id"])["revision_number"] == rev
        assert api.put(base, json={"tags": ["red", "violet"]}).status_code == 200

        assert api.delete(base).status_code == 204
        assert api.get(base).json() == {"tags": []}
        assert show(api, collection, res["id"])["tags"] == []


def test_concurrent_adds_of_one_tag(api: httpx.Client, server: RunningServer) -> None:
    net = create(api, "networks", "network", name="n")
    barrier = threading.Barrier(8)

    def add(_i: int) -> int:
        with httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=60) as c:
            c.get("/networks", params={"limit": 1}).raise_for_status()
            barrier.wait(timeout=60)
            return c.put(f"/networks/{net['id']}/tags/same").status_code

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert list(pool.map(add, range(8))) == [201] * 8
    shown = show(api, "networks", net["id"])
    assert shown["tags"] == ["same"]
    assert shown["revision_number"] == 1  # only the add that changed something counts


def test_tag_bad_requests(api: httpx.Client, resources: dict[str, dict[str, Any]]) -> None:
    net = resources["networks"]
    base = f"/networks/{net['id']}/tags"
    api.put(base, json={"tags": ["keep"]})
    bad_bodies: list[Any] = [
        {"tags": "red"},
        {"tag": ["red"]},
        ["red"],
        {"tags": ["a,b"]},
        {"tags": [""]},
        {"tags": ["x" * 256]},
        {"tags": ["dup", "dup"]},
        {"tags": [1]},
        {"tags": [None]},
    ]
    for body in bad_bodies:
        for r in (api.put(base, json=body), api.post(base, json=body)):
            assert r.status_code == 400, (body, r.text)
            assert r.json()["NeutronError"]["message"]
    error(api.post(base, content=b"{not json"), 400)
    error(api.put(base, content=b"{not json"), 400)
    error(api.put(f"{base}/{'y' * 256}"), 400)
    error(api.put(f"{base}/a,b"), 400)
    assert api.get(base).json() == {"tags": ["keep"]}
    assert api.put(base, json={"tags": ["x" * 255]}).status_code == 200


def test_tags_of_missing_resources(api: httpx.Client) -> None:
    for collection in MEMBER:
        member = MEMBER[collection]
        kind = "".join(p.capitalize() for p in member.split("_")) + "NotFound"
        base = f"/{collection}/{MISSING}/tags"
        assert MISSING in error(api.get(base), 404, kind)
        error(api.put(base, json={"tags": ["a"]}), 404, kind)
        error(api.post(base, json={"tags": ["a"]}), 404, kind)
        error(api.put(f"{base}/a"), 404, kind)
        error(api.get(f"{base}/a"), 404, kind)
        error(api.delete(f"{base}/a"), 404, kind)
        error(api.delete(base), 404, kind)
        error(api.get(f"/{collection}/not-a-uuid/tags"), 404)
    error(api.get(f"/bogus/{MISSING}/tags"), 404)
    error(api.get(f"/security-group-rules/{MISSING}/tags"), 404)


def test_tags_in_create_bodies(api: httpx.Client) -> None:
    net = create(api, "networks", "network", name="n", tags=["b", "a"])
    assert net["tags"] == ["a", "b"]
    sub = create(api, "subnets", "subnet", network_id=net["id"], cidr="10.0.0.0/24", tags=["s"])
    assert sub["tags"] == ["s"]
    router = create(api, "routers", "router", tags=["edge", "prod"])
    assert router["tags"] == ["edge", "prod"]
    sg = create(api, "security-groups", "security_group", name="g", tags=["web"])
    assert sg["tags"] == ["web"]
    r = api.post("/ports", json={"ports": [{"network_id": net["id"], "tags": [f"p{i}", "bulk"]} for i in range(3)]})
    assert r.status_code == 201, r.text
    assert [p["tags"] for p in r.json()["ports"]] == [["bulk", "p0"], ["bulk", "p1"], ["bulk", "p2"]]
    assert api.get(f"/routers/{router['id']}/tags").json() == {"tags": ["edge", "prod"]}
    for collection, member, extra in (
        ("routers", "router", {}),
        ("security-groups", "security_group", {"name": "h"}),
    ):
        for tags in (["dup", "dup"], ["a,b"], [""]):
            r = api.post(f"/{collection}", json={member: {**extra, "tags": tags}})
            assert r.status_code == 400, (collection, tags, r.text)
    assert len(api.get("/routers").json()["routers"]) == 1


def ids(r: httpx.Response, collection: str) -> set[str]:
    assert r.status_code == 200, r.text
    return {x["id"] for x in r.json()[collection]}


def test_tag_filters_on_networks(api: httpx.Client) -> None:
    a = create(api, "networks", "network", name="a", tags=["red"])["id"]
    b = create(api, "networks", "network", name="b", tags=["red", "blue"])["id"]
    c = create(api, "networks", "network", name="c", tags=["blue", "green"])["id"]
    d = create(api, "networks", "network", name="d")["id"]

    def q(**params: str) -> set[str]:
        return ids(api.get("/networks", params=params), "networks")

    assert q(tags="red") == {a, b}
    assert q(tags="red,blue") == {b}
    assert q(tags="red,green") == set()
    assert q(**{"tags-any": "red,green"}) == {a, b, c}
    assert q(**{"tags-any": "green"}) == {c}
    assert q(**{"not-tags": "red"}) == {c, d}
    assert q(**{"not-tags": "red,blue"}) == {a, c, d}
    assert q(**{"not-tags-any": "red,green"}) == {d}
    assert q(**{"not-tags-any": "blue"}) == {a, d}
    assert q(tags="blue", **{"not-tags": "green"}) == {b}
    assert q(**{"tags-any": "red,blue", "not-tags-any": "green"}) == {a, b}
    assert q(tags="nothing") == set()
    # an empty list filters nothing out
    for name in ("tags", "tags-any", "not-tags", "not-tags-any"):
        assert q(**{name: ""}) == {a, b, c, d}, name
        assert q(**{name: ","}) == {a, b, c, d}, name
    # repeated parameters add to the list
    assert ids(api.get("/networks", params=[("tags", "red"), ("tags", "blue")]), "networks") == {b}
    assert ids(api.get("/networks", params=[("tags-any", "red"), ("tags-any", "green")]), "networks") == {a, b, c}


def test_tag_filters_on_ports(api: httpx.Client) -> None:
    net = create(api, "networks", "network", name="n")
    p1 = create(api, "ports", "port", network_id=net["id"], tags=["web", "prod"])["id"]
    p2 = create(api, "ports", "port", network_id=net["id"], tags=["db", "prod"])["id"]
    p3 = create(api, "ports", "port", network_id=net["id"], tags=["web", "dev"])["id"]

    def q(**params: str) -> set[str]:
        return ids(api.get("/ports", params=params), "ports")

    assert q(tags="prod") == {p1, p2}
    assert q(tags="web,prod") == {p1}
    assert q(**{"tags-any": "db,dev"}) == {p2, p3}
    assert q(**{"not-tags": "web,prod"}) == {p2, p3}
    assert q(**{"not-tags-any": "web"}) == {p2}
    assert q(tags="prod", network_id=net["id"]) == {p1, p2}
    # filters see tag changes made through the tag API
    api.delete(f"/ports/{p1}/tags/prod")
    assert q(tags="prod") == {p2}
    api.put(f"/ports/{p3}/tags/prod")
    assert q(tags="prod") == {p2, p3}


def test_deleting_a_resource_drops_its_tags(api: httpx.Client) -> None:
    net = create(api, "networks", "network", name="n", tags=["gone"])
    assert api.delete(f"/networks/{net['id']}").status_code == 204
    other = create(api, "networks", "network", name="m")
    assert ids(api.get("/networks", params={"tags": "gone"}), "networks") == set()
    assert ids(api.get("/networks", params={"not-tags": "gone"}), "networks") == {other["id"]}


def test_tags_respect_projects(users: dict[str, httpx.Client]) -> None:
    alice, bob, admin = users["alice"], users["bob"], users["admin"]
    mine = create(alice, "networks", "network", name="mine")
    theirs = create(bob, "networks", "network", name="theirs", tags=["bob"])
    shared = create(admin, "networks", "network", name="shared", shared=True, tags=["ops"])

    assert alice.put(f"/networks/{mine['id']}/tags/a").status_code == 201
    error(alice.get(f"/networks/{theirs['id']}/tags"), 404, "NetworkNotFound")
    error(alice.put(f"/networks/{theirs['id']}/tags/x"), 404, "NetworkNotFound")
    error(alice.post(f"/networks/{theirs['id']}/tags", json={"tags": ["x"]}), 404, "NetworkNotFound")
    error(alice.delete(f"/networks/{theirs['id']}/tags"), 404, "NetworkNotFound")
    assert bob.get(f"/networks/{theirs['id']}/tags").json() == {"tags": ["bob"]}

    # a shared network's tags can be read by everyone who sees it, changed only by its owner or an admin
    assert alice.get(f"/networks/{shared['id']}/tags").json() == {"tags": ["ops"]}
    assert alice.get(f"/networks/{shared['id']}/tags/ops").status_code == 204
    error(alice.put(f"/networks/{shared['id']}/tags/mine"), 403)
    error(alice.put(f"/networks/{shared['id']}/tags", json={"tags": []}), 403)
    error(alice.post(f"/networks/{shared['id']}/tags", json={"tags": ["mine"]}), 403)
    error(alice.delete(f"/networks/{shared['id']}/tags/ops"), 403)
    assert admin.get(f"/networks/{shared['id']}/tags").json() == {"tags": ["ops"]}
    assert admin.put(f"/networks/{theirs['id']}/tags/audited").status_code == 201
    assert bob.get(f"/networks/{theirs['id']}/tags").json() == {"tags": ["audited", "bob"]}

    # filters never reveal other projects' resources
    assert ids(alice.get("/networks", params={"tags": "bob"}), "networks") == set()
    assert ids(alice.get("/networks", params={"not-tags": "nothing"}), "networks") == {mine["id"], shared["id"]}


# -- bounds: the same rules for every resource, on both databases -------------------------------------------------

BAD_TAG_LISTS = {
    "too many": [f"t{i}" for i in range(51)],
    "too long": ["x" * 256],
    "empty": [""],
    "comma": ["a,b"],
    "slash": ["a/b"],
    "duplicate": ["a", "b", "a"],
}


@pytest.mark.parametrize("case", sorted(BAD_TAG_LISTS))
def test_bad_tags_are_refused_in_create_bodies_of_every_kind(api: httpx.Client, case: str) -> None:
    net = create(api, "networks", "network", name="holder")
    bodies = {
        "networks": {"name": "n"},
        "subnets": {"network_id": net["id"], "cidr": "10.9.0.0/24"},
        "ports": {"network_id": net["id"]},
        "routers": {"name": "r"},
        "security-groups": {"name": "g"},
    }
    for collection, body in bodies.items():
        r = api.post(f"/{collection}", json={MEMBER[collection]: {**body, "tags": BAD_TAG_LISTS[case]}})
        assert "tags" in error(r, 400), (collection, case)
        assert api.get(f"/{collection}", params={"tags": "a"}).json()[f"{MEMBER[collection]}s"] == []


@pytest.mark.parametrize("case", sorted(BAD_TAG_LISTS))
def test_bad_tags_are_refused_by_the_tag_api(api: httpx.Client, resources: dict[str, Any], case: str) -> None:
    for collection, res in resources.items():
        error(api.put(f"/{collection}/{res['id']}/tags", json={"tags": BAD_TAG_LISTS[case]}), 400)
        error(api.post(f"/{collection}/{res['id']}/tags", json={"tags": BAD_TAG_LISTS[case]}), 400)
        assert api.get(f"/{collection}/{res['id']}/tags").json() == {"tags": []}


def test_fifty_tags_fit_and_a_fifty_first_is_refused(api: httpx.Client, resources: dict[str, Any]) -> None:
    fifty = [f"t{i:02d}" for i in range(50)]
    for collection, res in resources.items():
        base = f"/{collection}/{res['id']}/tags"
        assert api.put(base, json={"tags": fifty}).status_code == 200
        assert "at most 50" in error(api.put(f"{base}/one-more"), 400)
        assert api.put(f"{base}/t07").status_code == 201  # one it already has: still fine
        assert api.post(base, json={"tags": ["t07", "t08"]}).status_code == 201
        assert "at most 50" in error(api.post(base, json={"tags": ["t07", "one-more"]}), 400)
        assert api.get(base).json() == {"tags": fifty}
        # the bound holds for the sum: 30 there, 30 more (each list fine alone) is refused whole
        assert api.put(base, json={"tags": fifty[:30]}).status_code == 200
        assert "at most 50" in error(api.post(base, json={"tags": [f"u{i}" for i in range(30)]}), 400)
        assert api.get(base).json() == {"tags": fifty[:30]}


def test_a_huge_tag_list_is_refused_in_linear_time(api: httpx.Client) -> None:
    # 40,000 distinct tags used to cost seconds of CPU (a quadratic duplicate check) before failing.
    many = [f"tag-{i}" for i in range(40_000)]
    r = api.post("/networks", json={"network": {"name": "n", "tags": many}})
    assert "at most 50" in error(r, 400)
    r = api.post("/networks", json={"network": {"name": "n"}})
    assert api.put(f"/networks/{r.json()['network']['id']}/tags", json={"tags": many}).status_code == 400
