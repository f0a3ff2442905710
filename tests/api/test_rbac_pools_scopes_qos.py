"""RBAC access_as_shared on subnet pools, address scopes and QoS policies (rbac-subnetpool, rbac-address-scope,
qos_policy under rbac-policies): a grant lets its target see and use the object (a subnet from the pool, a pool in
the scope, the QoS policy on a port or network) and nobody else; its removal is refused while the target uses it
(RbacPolicyInUse) and allowed after; `shared` is the wildcard policy. Hostile cases beside them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.api import check_error, create

Json = dict[str, Any]
IN_USE = "cannot be removed because other objects depend on it."


@pytest.fixture
def tokens(tokens: dict[str, dict[str, object]], server_config: Any) -> dict[str, dict[str, object]]:
    """The shared tokens and a third project's (carol: the one no grant names)."""
    data = {**tokens, "carol-token": {"project_id": "carol", "admin": False}}
    server_config.tokens_file.write_text(json.dumps({"tokens": data}))
    return data


@pytest.fixture
def carol(users: dict[str, httpx.Client], server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": "carol-token"}, timeout=30) as client:
        yield client


def _policy(client: httpx.Client, object_type: str, object_id: str, target: str) -> httpx.Response:
    body = {"object_type": object_type, "object_id": object_id, "action": "access_as_shared", "target_tenant": target}
    return client.post("/rbac-policies", json={"rbac_policy": body})


def _ok(r: httpx.Response, status: int = 200) -> Json:
    assert r.status_code == status, r.text
    return dict(r.json()) if r.content else {}


def _ids(client: httpx.Client, path: str, key: str, **params: str) -> set[str]:
    return {o["id"] for o in _ok(client.get(path, params=params))[key]}


def test_subnetpool_to_one_project(users: dict[str, httpx.Client], carol: httpx.Client) -> None:
    alice, bob = users["alice"], users["bob"]
    pool = create(alice, "subnetpools", "subnetpool", name="a-pool", prefixes=["10.150.0.0/16"], default_prefixlen=24)
    b_net, c_net = create(bob, "networks", "network", name="b"), create(carol, "networks", "network", name="c")
    subnet = {"ip_version": 4, "subnetpool_id": pool["id"]}
    check_error(bob.post("/subnets", json={"subnet": {"network_id": b_net["id"], **subnet}}), 404, "SubnetPoolNotFound")
    pol = _ok(_policy(alice, "subnetpool", pool["id"], "bob"), 201)["rbac_policy"]
    # bob sees it, shared with him, and takes a subnet from it; carol neither
    assert _ok(bob.get(f"/subnetpools/{pool['id']}"))["subnetpool"]["shared"] is True
    assert _ok(alice.get(f"/subnetpools/{pool['id']}"))["subnetpool"]["shared"] is False
    assert pool["id"] in _ids(bob, "/subnetpools", "subnetpools", shared="true")
    assert pool["id"] not in _ids(bob, "/subnetpools", "subnetpools", shared="false")
    sub = _ok(bob.post("/subnets", json={"subnet": {"network_id": b_net["id"], **subnet}}), 201)["subnet"]
    assert sub["subnetpool_id"] == pool["id"] and sub["cidr"].startswith("10.150.")
    check_error(carol.get(f"/subnetpools/{pool['id']}"), 404, "SubnetPoolNotFound")
    assert pool["id"] not in _ids(carol, "/subnetpools", "subnetpools")
    check_error(carol.post("/subnets", json={"subnet": {"network_id": c_net["id"], **subnet}}), 404,
                "SubnetPoolNotFound")  # fmt: skip
    # seen, not his: he may not change it
    check_error(bob.put(f"/subnetpools/{pool['id']}", json={"subnetpool": {"name": "b"}}), 403, "PolicyNotAuthorized")
    # revocation while his subnet is there: refused, in Neutron's words; after it goes: allowed, and he is out
    check_error(alice.delete(f"/rbac-policies/{pol['id']}"), 409, "RbacPolicyInUse",
                f"RBAC policy on object {pool['id']} {IN_USE}", "Details: project_id=bob")  # fmt: skip
    check_error(alice.put(f"/rbac-policies/{pol['id']}", json={"rbac_policy": {"target_tenant": "carol"}}), 409,
                "RbacPolicyInUse")  # fmt: skip
    _ok(bob.delete(f"/subnets/{sub['id']}"), 204)
    _ok(alice.delete(f"/rbac-policies/{pol['id']}"), 204)
    check_error(bob.get(f"/subnetpools/{pool['id']}"), 404, "SubnetPoolNotFound")
    check_error(bob.post("/subnets", json={"subnet": {"network_id": b_net["id"], **subnet}}), 404, "SubnetPoolNotFound")
    # a policy goes with its pool
    _ok(_policy(alice, "subnetpool", pool["id"], "carol"), 201)
    _ok(alice.delete(f"/subnetpools/{pool['id']}"), 204)
    assert _ok(alice.get("/rbac-policies", params={"object_id": pool["id"]}))["rbac_policies"] == []


def test_address_scope_to_one_project(users: dict[str, httpx.Client], carol: httpx.Client) -> None:
    alice, bob = users["alice"], users["bob"]
    scope = create(alice, "address-scopes", "address_scope", name="a-scope", ip_version=4)
    in_scope = {"prefixes": ["10.151.0.0/16"], "address_scope_id": scope["id"]}
    check_error(bob.post("/subnetpools", json={"subnetpool": in_scope}), 404, "AddressScopeNotFound")
    pol = _ok(_policy(alice, "address_scope", scope["id"], "bob"), 201)["rbac_policy"]
    assert _ok(bob.get(f"/address-scopes/{scope['id']}"))["address_scope"]["shared"] is True
    assert scope["id"] in _ids(bob, "/address-scopes", "address_scopes", shared="true")
    pool = _ok(bob.post("/subnetpools", json={"subnetpool": in_scope}), 201)["subnetpool"]
    assert pool["address_scope_id"] == scope["id"]
    check_error(carol.get(f"/address-scopes/{scope['id']}"), 404, "AddressScopeNotFound")
    other = {"prefixes": ["10.152.0.0/16"], "address_scope_id": scope["id"]}
    check_error(carol.post("/subnetpools", json={"subnetpool": other}), 404, "AddressScopeNotFound")
    check_error(bob.put(f"/address-scopes/{scope['id']}", json={"address_scope": {"name": "b"}}), 403,
                "PolicyNotAuthorized")  # fmt: skip
    check_error(alice.delete(f"/rbac-policies/{pol['id']}"), 409, "RbacPolicyInUse",
                f"RBAC policy on object {scope['id']} {IN_USE}")  # fmt: skip
    _ok(bob.delete(f"/subnetpools/{pool['id']}"), 204)
    _ok(alice.delete(f"/rbac-policies/{pol['id']}"), 204)
    check_error(bob.get(f"/address-scopes/{scope['id']}"), 404, "AddressScopeNotFound")
    check_error(bob.post("/subnetpools", json={"subnetpool": in_scope}), 404, "AddressScopeNotFound")


def test_qos_policy_to_one_project(users: dict[str, httpx.Client], carol: httpx.Client) -> None:
    admin, alice, bob = users["admin"], users["alice"], users["bob"]
    qos = _ok(admin.post("/qos/policies", json={"policy": {"name": "gold", "project_id": "alice"}}), 201)["policy"]
    b_net, c_net = create(bob, "networks", "network", name="b"), create(carol, "networks", "network", name="c")
    on_port = {"network_id": b_net["id"], "qos_policy_id": qos["id"]}
    check_error(bob.post("/ports", json={"port": on_port}), 404, "QosPolicyNotFound")
    pol = _ok(_policy(alice, "qos_policy", qos["id"], "bob"), 201)["rbac_policy"]
    assert _ok(bob.get(f"/qos/policies/{qos['id']}"))["policy"]["shared"] is True
    assert qos["id"] in _ids(bob, "/qos/policies", "policies", shared="true")
    port = _ok(bob.post("/ports", json={"port": on_port}), 201)["port"]
    assert port["qos_policy_id"] == qos["id"]
    _ok(bob.put(f"/networks/{b_net['id']}", json={"network": {"qos_policy_id": qos["id"]}}))
    check_error(carol.get(f"/qos/policies/{qos['id']}"), 404, "QosPolicyNotFound")
    check_error(carol.post("/ports", json={"port": {"network_id": c_net["id"], "qos_policy_id": qos["id"]}}), 404,
                "QosPolicyNotFound")  # fmt: skip
    check_error(carol.put(f"/networks/{c_net['id']}", json={"network": {"qos_policy_id": qos["id"]}}), 404,
                "QosPolicyNotFound")  # fmt: skip
    # in use by his port and his network: the policy stays until neither carries it
    check_error(alice.delete(f"/rbac-policies/{pol['id']}"), 409, "RbacPolicyInUse", "Details: project_id=bob")
    _ok(bob.delete(f"/ports/{port['id']}"), 204)
    check_error(alice.delete(f"/rbac-policies/{pol['id']}"), 409, "RbacPolicyInUse")
    _ok(bob.put(f"/networks/{b_net['id']}", json={"network": {"qos_policy_id": None}}))
    _ok(alice.delete(f"/rbac-policies/{pol['id']}"), 204)
    check_error(bob.get(f"/qos/policies/{qos['id']}"), 404, "QosPolicyNotFound")
    check_error(bob.post("/ports", json={"port": on_port}), 404, "QosPolicyNotFound")
    # a policy goes with its QoS policy
    _ok(_policy(alice, "qos_policy", qos["id"], "carol"), 201)
    _ok(admin.delete(f"/qos/policies/{qos['id']}"), 204)
    assert _ok(admin.get("/rbac-policies", params={"object_id": qos["id"]}))["rbac_policies"] == []


def test_shared_is_the_wildcard_policy(users: dict[str, httpx.Client]) -> None:
    """`shared: true` on create or update makes the "*" policy, its removal clears `shared`; a QoS policy in use
    by another project may not be unshared (RbacPolicyInUse), an address scope never (Neutron)."""
    admin, bob = users["admin"], users["bob"]
    made = {
        "subnetpool": ("subnetpools", _ok(admin.post("/subnetpools", json={"subnetpool": {
            "prefixes": ["10.153.0.0/16"], "shared": True, "project_id": "alice"}}), 201)["subnetpool"]),
        "address_scope": ("address-scopes", _ok(admin.post("/address-scopes", json={"address_scope": {
            "ip_version": 4, "shared": True, "project_id": "alice"}}), 201)["address_scope"]),
        "qos_policy": ("qos/policies", _ok(admin.post("/qos/policies", json={"policy": {
            "shared": True, "project_id": "alice"}}), 201)["policy"]),
    }  # fmt: skip
    for object_type, (path, obj) in made.items():
        (star,) = _ok(admin.get("/rbac-policies", params={"object_id": obj["id"]}))["rbac_policies"]
        assert (star["object_type"], star["target_tenant"], star["project_id"]) == (object_type, "*", "alice")
        _ok(bob.get(f"/{path}/{obj['id']}"))
        _ok(admin.delete(f"/rbac-policies/{star['id']}"), 204)
        assert next(iter(_ok(admin.get(f"/{path}/{obj['id']}")).values()))["shared"] is False
        assert bob.get(f"/{path}/{obj['id']}").status_code == 404
    scope = made["address_scope"][1]
    _ok(admin.put(f"/address-scopes/{scope['id']}", json={"address_scope": {"shared": True}}))
    assert len(_ok(admin.get("/rbac-policies", params={"object_id": scope["id"]}))["rbac_policies"]) == 1
    qos = made["qos_policy"][1]
    _ok(admin.put(f"/qos/policies/{qos['id']}", json={"policy": {"shared": True}}))
    net = create(bob, "networks", "network", name="b")
    port = create(bob, "ports", "port", network_id=net["id"], qos_policy_id=qos["id"])
    check_error(admin.put(f"/qos/policies/{qos['id']}", json={"policy": {"shared": False}}), 409, "RbacPolicyInUse",
                f"RBAC policy on object {qos['id']} {IN_USE}")  # fmt: skip
    _ok(bob.delete(f"/ports/{port['id']}"), 204)
    assert _ok(admin.put(f"/qos/policies/{qos['id']}", json={"policy": {"shared": False}}))["policy"]["shared"] is False
    assert _ok(admin.get("/rbac-policies", params={"object_id": qos["id"]}))["rbac_policies"] == []


def test_hostile_policies(users: dict[str, httpx.Client]) -> None:
    """A member making a policy on another project's pool, scope or QoS policy: refused as Neutron refuses it (400,
    "not found" while he cannot see it, so that nothing says it exists); a wildcard by a member: 403."""
    admin, alice, bob = users["admin"], users["alice"], users["bob"]
    objects = {
        "subnetpool": create(alice, "subnetpools", "subnetpool", prefixes=["10.154.0.0/16"])["id"],
        "address_scope": create(alice, "address-scopes", "address_scope", ip_version=4)["id"],
        "qos_policy": _ok(admin.post("/qos/policies", json={"policy": {"project_id": "alice"}}), 201)["policy"]["id"],
    }
    for object_type, object_id in objects.items():
        check_error(_policy(bob, object_type, object_id, "bob"), 400, "InvalidInput", "could not be found")
        _ok(_policy(alice, object_type, object_id, "bob"), 201)  # he sees it now: still not his to share
        check_error(_policy(bob, object_type, object_id, "carol"), 400, "InvalidInput",
                    "Only admins can manipulate policies on objects they do not own")  # fmt: skip
        check_error(_policy(alice, object_type, object_id, "*"), 403, "PolicyNotAuthorized")
        check_error(_policy(bob, object_type, object_id, "*"), 403, "PolicyNotAuthorized")
        (pol,) = _ok(alice.get("/rbac-policies", params={"object_id": object_id}))["rbac_policies"]
        check_error(bob.delete(f"/rbac-policies/{pol['id']}"), 404, "RbacPolicyNotFound")
        check_error(_policy(alice, object_type, object_id, "bob"), 409, "DuplicateRbacPolicy")
        action = {"object_type": object_type, "object_id": object_id, "action": "access_as_external",
                  "target_tenant": "carol"}  # fmt: skip
        check_error(alice.post("/rbac-policies", json={"rbac_policy": action}), 400, "InvalidInput", "Invalid action")
    aliases = {e["alias"] for e in _ok(bob.get("/extensions"))["extensions"]}
    assert {"rbac-subnetpool", "rbac-address-scope"} <= aliases
