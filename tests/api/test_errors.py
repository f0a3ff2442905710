"""Error shapes: every failure is a NeutronError body with the right status, never a 500."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.server import RunningServer

COLLECTIONS = {
    "networks": "network",
    "subnets": "subnet",
    "ports": "port",
    "routers": "router",
    "security-groups": "security_group",
    "security-group-rules": "security_group_rule",
}
NOT_FOUND_TYPES = {
    "networks": "NetworkNotFound",
    "subnets": "SubnetNotFound",
    "ports": "PortNotFound",
    "routers": "RouterNotFound",
    "security-groups": "SecurityGroupNotFound",
    "security-group-rules": "SecurityGroupRuleNotFound",
}
BAD_IDS = [
    "not-a-uuid",
    "1234",
    "x" * 300,
    "a%00b",
    "%C3%A9t%C3%A9",
    "'%20OR%201=1%20--",
    "0E984725-C51C-4BF4-9960-E1C80E27ABA0",
    "%20",
]


def neutron_error(r: httpx.Response, status: int, type_: str | None = None) -> str:
    assert r.status_code == status, (r.request.method, r.request.url, r.text)
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"NeutronError"}
    err = body["NeutronError"]
    assert set(err) == {"type", "message", "detail"}
    if type_ is not None:
        assert err["type"] == type_, err
    assert isinstance(err["message"], str)
    assert err["message"]
    return str(err["message"])


def test_malformed_json(api: httpx.Client) -> None:
    net = api.post("/networks", json={"network": {"name": "n"}}).json()["network"]
    for raw in (b"{", b"{'network': {}}", b"nul", b"\xff\xfe", b'{"network": {"name": "x"}} trailing'):
        for collection in COLLECTIONS:
            neutron_error(api.post(f"/{collection}", content=raw), 400, "HTTPBadRequest")
        neutron_error(api.put(f"/networks/{net['id']}", content=raw), 400, "HTTPBadRequest")
    assert "Malformed" in neutron_error(api.post("/networks", content=b"{"), 400)
    neutron_error(api.post("/networks", content=b""), 400)
    assert [n["id"] for n in api.get("/networks").json()["networks"]] == [net["id"]]
    assert api.get(f"/networks/{net['id']}").json()["network"]["name"] == "n"


def test_missing_or_wrong_envelope(api: httpx.Client) -> None:
    net = api.post("/networks", json={"network": {"name": "n"}}).json()["network"]
    for collection, member in COLLECTIONS.items():
        msg = neutron_error(api.post(f"/{collection}", json={"name": "x"}), 400, "HTTPBadRequest")
        assert member in msg
        neutron_error(api.post(f"/{collection}", json={"wrong": {"name": "x"}}), 400)
        neutron_error(api.post(f"/{collection}", json=[{"name": "x"}]), 400)
        neutron_error(api.post(f"/{collection}", json={member: "x"}), 400)
        neutron_error(api.post(f"/{collection}", json={member: None}), 400)
        neutron_error(api.post(f"/{collection}", json={member.replace("_", "-") + "s": []}), 400)
        neutron_error(api.post(f"/{collection}", json={collection.replace("-", "_"): []}), 400)
        neutron_error(api.post(f"/{collection}", json={collection.replace("-", "_"): "x"}), 400)
    neutron_error(api.put(f"/networks/{net['id']}", json={"name": "x"}), 400)
    neutron_error(api.put(f"/networks/{net['id']}", json={"port": {"name": "x"}}), 400)
    neutron_error(api.put(f"/networks/{net['id']}", json={"network": ["x"]}), 400)
    neutron_error(api.put(f"/networks/{net['id']}", json={"network": {"id": "x"}}), 400)
    neutron_error(api.post("/networks", json={"network": {"name": 5}}), 400)
    neutron_error(api.post("/networks", json={"network": {"admin_state_up": "perhaps"}}), 400)
    assert "bogus" in neutron_error(api.post("/networks", json={"network": {"bogus": 1}}), 400)
    assert api.get(f"/networks/{net['id']}").json()["network"] == net
    assert len(api.get("/networks").json()["networks"]) == 1


def test_non_uuid_ids_are_404(api: httpx.Client) -> None:
    for collection, member in COLLECTIONS.items():
        for bad in BAD_IDS:
            url = f"/{collection}/{bad}"
            neutron_error(api.get(url), 404, NOT_FOUND_TYPES[collection])
            neutron_error(api.delete(url), 404, NOT_FOUND_TYPES[collection])
            if collection != "security-group-rules":
                neutron_error(api.put(url, json={member: {"name": "x"}}), 404, NOT_FOUND_TYPES[collection])
            neutron_error(api.get(url, params={"fields": "id"}), 404)
    for bad in BAD_IDS:
        neutron_error(api.put(f"/routers/{bad}/add_router_interface", json={"subnet_id": bad}), 404, "RouterNotFound")
        neutron_error(api.put(f"/routers/{bad}/remove_router_interface", json={"port_id": bad}), 404)
        neutron_error(api.get(f"/networks/{bad}/tags"), 404, "NetworkNotFound")
        neutron_error(api.put(f"/ports/{bad}/tags/t"), 404, "PortNotFound")


def test_non_uuid_references_in_bodies(api: httpx.Client) -> None:
    router = api.post("/routers", json={"router": {"name": "r"}}).json()["router"]
    for bad in [*BAD_IDS[:4], "a\x00b"]:
        for collection, body in (
            ("ports", {"port": {"network_id": bad}}),
            ("subnets", {"subnet": {"network_id": bad, "cidr": "10.0.0.0/24"}}),
            ("security-group-rules", {"security_group_rule": {"security_group_id": bad, "direction": "ingress"}}),
            ("routers", {"router": {"external_gateway_info": {"network_id": bad}}}),
        ):
            r = api.post(f"/{collection}", json=body)
            assert r.status_code in (400, 404), (collection, bad, r.text)
            neutron_error(r, r.status_code)
        r = api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": bad})
        assert r.status_code in (400, 404), r.text
        neutron_error(r, r.status_code)
    assert api.get("/ports").json()["ports"] == []
    assert len(api.get("/routers").json()["routers"]) == 1


def test_odd_query_values_are_not_500(api: httpx.Client) -> None:
    api.post("/networks", json={"network": {"name": "n"}})
    for params in (
        {"name": "a\x00b"},
        {"id": "x" * 300},
        {"marker": "a\x00b"},
        {"mtu": "1" * 40},
        {"sort_key": "name\x00"},
        {"limit": "9" * 30},
        {"fields": "\x00"},
    ):
        r = api.get("/networks", params=params)
        assert r.status_code in (200, 400, 404), (params, r.text)
        if r.status_code != 200:
            neutron_error(r, r.status_code)


def test_null_characters_in_bodies_are_not_500(api: httpx.Client) -> None:
    for collection, body in (
        ("networks", {"network": {"name": "a\x00b"}}),
        ("routers", {"router": {"name": "a\x00b"}}),
        ("security-groups", {"security_group": {"name": "a\x00b"}}),
    ):
        r = api.post(f"/{collection}", json=body)
        assert r.status_code in (201, 400), (collection, r.text)
        if r.status_code == 400:
            neutron_error(r, 400)


def test_unknown_urls(api: httpx.Client, server: RunningServer) -> None:
    for path in ("/bogus", "/bogus/123", "/networks/abc/def", "/networks/abc/tags/a/b", "/routers/x/add_interface"):
        assert neutron_error(api.get(path), 404, "HTTPNotFound") == "The resource could not be found."
    for url in ("/v3/networks", "/v2.0x", "/nope"):
        neutron_error(httpx.get(server.url + url), 404, "HTTPNotFound")


def test_wrong_methods(api: httpx.Client) -> None:
    net = api.post("/networks", json={"network": {"name": "n"}}).json()["network"]
    router = api.post("/routers", json={"router": {"name": "r"}}).json()["router"]
    for method, path in (
        ("PATCH", "/networks"),
        ("DELETE", "/networks"),
        ("PUT", "/networks"),
        ("POST", f"/networks/{net['id']}"),
        ("PATCH", f"/networks/{net['id']}"),
        ("PUT", f"/security-group-rules/{net['id']}"),
        ("GET", f"/routers/{router['id']}/add_router_interface"),
        ("POST", f"/routers/{router['id']}/remove_router_interface"),
        ("POST", "/events"),
        ("DELETE", "/extensions"),
        ("PATCH", f"/networks/{net['id']}/tags"),  # (POST adds tags, as in Neutron)
    ):
        neutron_error(api.request(method, path, json={}), 405, "HTTPMethodNotAllowed")
    assert api.get(f"/networks/{net['id']}").json()["network"] == net


def test_extensions(api: httpx.Client) -> None:
    r = api.get("/extensions")
    assert r.status_code == 200
    exts = r.json()["extensions"]
    aliases = {e["alias"] for e in exts}
    # `router` (with `ext-gw-mode`) brings floating IPs in Neutron: listed only where /floatingips is served.
    with_fips = api.get("/floatingips").status_code == 200
    assert ("router" in aliases) is with_fips and ("ext-gw-mode" in aliases) is with_fips
    assert {
        "binding",
        "external-net",
        "provider",
        "security-group",
        "standard-attr-tag",
        "pagination",
        "sorting",
        "fields",
    } <= aliases
    assert len(aliases) == len(exts)
    for e in exts:
        assert set(e) >= {"alias", "name", "description", "updated", "links"}
        assert e["name"]
    one = api.get("/extensions/security-group")
    assert one.status_code == 200
    assert one.json()["extension"]["alias"] == "security-group"
    assert one.json()["extension"]["name"] == "security-group"
    assert api.get("/extensions/router").status_code == (200 if with_fips else 404)
    assert api.get("/extensions/standard-attr-tag").json()["extension"]["alias"] == "standard-attr-tag"
    assert "bogus" in neutron_error(api.get("/extensions/bogus"), 404, "ExtensionNotFound")


def test_version_documents(server: RunningServer, api: httpx.Client) -> None:
    r = httpx.get(server.url + "/")
    assert r.status_code == 200
    (version,) = r.json()["versions"]
    assert version["id"] == "v2.0"
    assert version["status"] == "CURRENT"
    assert version["links"] == [{"href": server.url + "/v2.0/", "rel": "self"}]
    root = api.get("")
    assert root.status_code == 200
    assert root.json()["version"]["id"] == "v2.0"
    names = {res["name"] for res in root.json()["resources"]}
    assert set(COLLECTIONS) <= names
    for res in root.json()["resources"]:
        assert res["links"][0]["href"] == f"{server.url}/v2.0/{res['collection']}"


@pytest.mark.parametrize("collection", ["ports", "networks"])
def test_read_only_attributes_rejected(api: httpx.Client, collection: str) -> None:
    net = api.post("/networks", json={"network": {"name": "n"}}).json()["network"]
    body: dict[str, Any] = {"network_id": net["id"]} if collection == "ports" else {}
    for attr, value in (("id", "8c7e6d5f-4a3b-4c2d-9e1f-0a1b2c3d4e5f"), ("status", "ACTIVE"), ("revision_number", 7)):
        r = api.post(f"/{collection}", json={COLLECTIONS[collection]: {**body, attr: value}})
        assert attr in neutron_error(r, 400)
    assert len(api.get(f"/{collection}").json()[collection]) == (1 if collection == "networks" else 0)


# Neutron's own words (neutron-lib exceptions, neutron's securitygroup extension).
NOT_FOUND_WORDS = {
    "networks": "Network {} could not be found.",
    "subnets": "Subnet {} could not be found.",
    "ports": "Port {} could not be found.",
    "routers": "Router {} could not be found",
    "security-groups": "Security group {} does not exist",
    "security-group-rules": "Security group rule {} does not exist",
}


def test_error_words_as_neutron(api: httpx.Client) -> None:
    missing = "0e984725-c51c-4bf4-9960-e1c80e27aba0"
    for collection, words in NOT_FOUND_WORDS.items():
        assert neutron_error(api.get(f"/{collection}/{missing}"), 404, NOT_FOUND_TYPES[collection]) == words.format(
            missing
        )
    # InvalidInput: "Invalid input for operation: <reason>." (one period)
    msg = neutron_error(api.get("/networks", params={"admin_state_up": "maybe"}), 400, "InvalidInput")
    assert msg == "Invalid input for operation: 'maybe' cannot be converted to boolean."
    net = api.post("/networks", json={"network": {"name": "n"}}).json()["network"]
    msg = neutron_error(api.post("/networks", json={"network": {"name": "n", "bogus": 1}}), 400, "HTTPBadRequest")
    assert msg == "Unrecognized attribute(s) 'bogus'"
    msg = neutron_error(api.put(f"/networks/{net['id']}", json={"network": {"mtu": "big"}}), 400, "HTTPBadRequest")
    assert msg.startswith("Invalid input for mtu. Reason: ") and msg.endswith(".")


def test_policy_refusals_in_neutron_s_words(users: dict[str, httpx.Client]) -> None:
    """403 bodies as Neutron words them: PolicyNotAuthorized, "(rule:<the rule failed>) is disallowed by policy"."""
    alice, admin = users["alice"], users["admin"]
    shared = admin.post("/networks", json={"network": {"name": "s", "shared": True}}).json()["network"]
    subnet = admin.post("/subnets", json={"subnet": {"network_id": shared["id"], "cidr": "10.61.0.0/24"}})
    assert subnet.status_code == 201, subnet.text
    net, sub = f"/networks/{shared['id']}", f"/subnets/{subnet.json()['subnet']['id']}"
    port = {"network_id": shared["id"], "mac_address": "fa:16:3e:00:00:01"}
    refused = [
        ("create_network:shared", alice.post("/networks", json={"network": {"shared": True}})),
        ("create_network:router:external", alice.post("/networks", json={"network": {"router:external": True}})),
        ("create_network", alice.post("/networks", json={"network": {"project_id": "bob"}})),
        ("update_network", alice.put(net, json={"network": {"name": "mine"}})),
        ("delete_network", alice.delete(net)),
        ("update_subnet", alice.put(sub, json={"subnet": {"name": "x"}})),
        ("create_subnet", alice.post("/subnets", json={"subnet": {"network_id": shared["id"], "cidr": "10.6.0.0/24"}})),
        ("create_port:mac_address", alice.post("/ports", json={"port": port})),
        ("update_network", alice.put(f"{net}/tags", json={"tags": ["x"]})),
        ("get_quota", alice.get("/quotas/bob")),
        ("update_quota", alice.put("/quotas/alice", json={"quota": {"network": 1}})),
    ]
    for rule, r in refused:
        assert neutron_error(r, 403, "PolicyNotAuthorized") == f"(rule:{rule}) is disallowed by policy", rule
