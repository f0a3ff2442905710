"""/v2.0/rbac-policies: Neutron's shape and errors, and what a policy grants (and its removal takes back) everywhere
ownership is checked: the network's visibility, ports on it, subnets, pool claims, a router gateway on a network
made external to a project, a shared security group on the target's ports. Hostile cases beside each happy one
(after neutron-tempest-plugin's test_shared_network_extension.py and the rbac_db code)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import select

from cloudnet.errors import Conflict
from cloudnet.services.rbac import policies
from cloudnet.store import tables
from cloudnet.store.db import Store
from tests.support.api import check_error, create

Json = dict[str, Any]
HOST = "rbac-node"


def _policy(client: httpx.Client, object_id: str, target: str, action: str = "access_as_shared",
            object_type: str = "network") -> httpx.Response:  # fmt: skip
    body = {"object_type": object_type, "object_id": object_id, "action": action, "target_tenant": target}
    return client.post("/rbac-policies", json={"rbac_policy": body})


def _ok(r: httpx.Response, status: int = 200) -> Json:
    assert r.status_code == status, r.text
    return dict(r.json()) if r.content else {}


def test_shape_filters_and_visibility(users: dict[str, httpx.Client]) -> None:
    alice, bob, admin = users["alice"], users["bob"], users["admin"]
    net = create(alice, "networks", "network", name="a-net")
    check_error(bob.get(f"/networks/{net['id']}"), 404, "NetworkNotFound")
    pol = _ok(_policy(alice, net["id"], "bob"), 201)["rbac_policy"]
    assert set(pol) == {"id", "project_id", "tenant_id", "object_type", "object_id", "action", "target_tenant"}
    assert pol["project_id"] == pol["tenant_id"] == "alice" and pol["target_tenant"] == "bob"
    assert (pol["object_type"], pol["object_id"], pol["action"]) == ("network", net["id"], "access_as_shared")
    assert _ok(alice.get(f"/rbac-policies/{pol['id']}"))["rbac_policy"] == pol
    # bob sees the network, shared with him (as Neutron shows `shared`: to the one who asks), alice does not
    assert _ok(bob.get(f"/networks/{net['id']}"))["network"]["shared"] is True
    assert _ok(alice.get(f"/networks/{net['id']}"))["network"]["shared"] is False
    assert net["id"] in {n["id"] for n in _ok(bob.get("/networks", params={"shared": "true"}))["networks"]}
    assert net["id"] not in {n["id"] for n in _ok(bob.get("/networks", params={"shared": "false"}))["networks"]}
    # ... but not the policy, which is alice's (Neutron: the target does not see it)
    assert pol["id"] not in {p["id"] for p in _ok(bob.get("/rbac-policies"))["rbac_policies"]}
    check_error(bob.get(f"/rbac-policies/{pol['id']}"), 404, "RbacPolicyNotFound")
    check_error(bob.delete(f"/rbac-policies/{pol['id']}"), 404, "RbacPolicyNotFound")
    check_error(bob.put(f"/rbac-policies/{pol['id']}", json={"rbac_policy": {"target_tenant": "mallory"}}), 404,
                "RbacPolicyNotFound")  # fmt: skip
    # filters and fields, as the sdk (target_project_id -> target_tenant) and the CLI send them
    for params in ({"target_tenant": "bob"}, {"object_id": net["id"]}, {"action": "access_as_shared"},
                   {"object_type": "network"}, {"project_id": "alice"}, {"id": pol["id"]}):  # fmt: skip
        assert [p["id"] for p in _ok(admin.get("/rbac-policies", params=params))["rbac_policies"]] == [pol["id"]]
    assert _ok(admin.get("/rbac-policies", params={"target_tenant": "carol"}))["rbac_policies"] == []
    listed = _ok(alice.get("/rbac-policies", params={"fields": ["id", "action"]}))["rbac_policies"]
    assert {k for k in listed[0] if k != "tenant_id"} == {"id", "action"}
    # the policy bumps the network's revision (Neutron's revises_on_change), and goes with the network
    assert _ok(alice.get(f"/networks/{net['id']}"))["network"]["revision_number"] > net["revision_number"]
    _ok(alice.delete(f"/networks/{net['id']}"), 204)
    check_error(alice.get(f"/rbac-policies/{pol['id']}"), 404, "RbacPolicyNotFound")


def test_hostile_creates(users: dict[str, httpx.Client]) -> None:
    alice, bob, admin = users["alice"], users["bob"], users["admin"]
    net = create(alice, "networks", "network", name="a-net")
    sg = create(alice, "security-groups", "security_group", name="a-sg")
    # a member naming someone else's object: 400, whether he can see it or not (and his word for an unseen one
    # is "not found", so that nothing tells him it exists)
    check_error(_policy(bob, net["id"], "bob"), 400, "InvalidInput", f"Network {net['id']} could not be found")
    check_error(_policy(bob, sg["id"], "bob", object_type="security_group"), 400, "InvalidInput")
    _ok(_policy(alice, net["id"], "bob"), 201)  # bob now sees it: still not his to share
    check_error(_policy(bob, net["id"], "carol"), 400, "InvalidInput",
                "Only admins can manipulate policies on networks they do not own")  # fmt: skip
    # wildcards are an admin's (403, Neutron's create_rbac_policy:target_tenant)
    check_error(_policy(alice, net["id"], "*"), 403, "PolicyNotAuthorized")
    # in another project's name
    body = {"object_type": "network", "object_id": net["id"], "action": "access_as_shared", "target_tenant": "x",
            "project_id": "bob"}  # fmt: skip
    check_error(alice.post("/rbac-policies", json={"rbac_policy": body}), 403, "PolicyNotAuthorized")
    # bad values, each a 400 with Neutron's words
    check_error(_policy(alice, net["id"], "bob", object_type="port"), 400, "InvalidInput",
                "'port' is not a valid RBAC object type")  # fmt: skip
    check_error(_policy(alice, sg["id"], "bob", "access_as_external", "security_group"), 400, "InvalidInput",
                "Invalid action 'access_as_external' for object type 'security_group'")  # fmt: skip
    check_error(_policy(alice, net["id"], "bob", "access_as_owner"), 400, "InvalidInput")
    check_error(_policy(alice, "not-a-uuid", "bob"), 400, "HTTPBadRequest")
    check_error(_policy(alice, "00000000-0000-4000-8000-000000000000", "bob"), 400, "InvalidInput")
    for target in ("1234" * 100, "", " ", "bad\x00id", "tab\there"):
        r = _policy(alice, net["id"], target)
        assert r.status_code == 400, (target, r.text)
    check_error(alice.post("/rbac-policies", json={"rbac_policy": {"object_type": "network"}}), 400, "HTTPBadRequest")
    check_error(alice.post("/rbac-policies", json={"rbac_policy": {"object_type": "network", "object_id": net["id"],
                "action": "access_as_shared", "target_tenant": "z", "extra": 1}}), 400, "HTTPBadRequest")  # fmt: skip
    # a second identical policy: 409
    check_error(_policy(alice, net["id"], "bob"), 409, "DuplicateRbacPolicy")
    # only the target may change (Neutron: the other attributes are read-only)
    (pol,) = _ok(alice.get("/rbac-policies"))["rbac_policies"]
    check_error(alice.put(f"/rbac-policies/{pol['id']}", json={"rbac_policy": {"action": "access_as_external"}}), 400,
                "HTTPBadRequest")  # fmt: skip
    check_error(alice.put(f"/rbac-policies/{pol['id']}", json={"rbac_policy": {"target_tenant": "*"}}), 403,
                "PolicyNotAuthorized")  # fmt: skip
    # admins may do all of it
    _ok(_policy(admin, net["id"], "*"), 201)
    assert _ok(alice.get(f"/networks/{net['id']}"))["network"]["shared"] is True


def test_ports_and_revocation(users: dict[str, httpx.Client]) -> None:
    """A share lets the target put ports on the network; removing or narrowing it while they are there is refused
    (RbacPolicyInUse); once they are gone it goes, and new ports are refused again."""
    alice, bob = users["alice"], users["bob"]
    net = create(alice, "networks", "network", name="a-net")
    sub = create(alice, "subnets", "subnet", network_id=net["id"], cidr="10.40.0.0/24")
    check_error(bob.post("/ports", json={"port": {"network_id": net["id"]}}), 404, "NetworkNotFound")
    pol = _ok(_policy(alice, net["id"], "bob"), 201)["rbac_policy"]
    _ok(_policy(alice, net["id"], "alice"), 201)  # a self-share (removable whatever uses it)
    port = create(bob, "ports", "port", network_id=net["id"])
    assert port["fixed_ips"][0]["subnet_id"] == sub["id"]
    _ok(bob.get(f"/subnets/{sub['id']}"))
    # what sharing does not give: a subnet of his own on it (403, he sees it), a chosen address
    check_error(bob.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.41.0.0/24"}}), 403,
                "PolicyNotAuthorized")  # fmt: skip
    chosen = {"port": {"network_id": net["id"], "fixed_ips": [{"ip_address": "10.40.0.99"}]}}
    check_error(bob.post("/ports", json=chosen), 403, "PolicyNotAuthorized")
    words = f"RBAC policy on object {net['id']} cannot be removed because other objects depend on it."
    check_error(alice.delete(f"/rbac-policies/{pol['id']}"), 409, "RbacPolicyInUse", words,
                "Unable to reconfigure sharing settings for network")  # fmt: skip
    check_error(alice.put(f"/rbac-policies/{pol['id']}", json={"rbac_policy": {"target_tenant": "carol"}}), 409,
                "RbacPolicyInUse")  # fmt: skip
    # a port of bob's is no reason to keep a self-share
    (own,) = _ok(alice.get("/rbac-policies", params={"target_tenant": "alice"}))["rbac_policies"]
    _ok(alice.delete(f"/rbac-policies/{own['id']}"), 204)
    # while a wildcard shares it too, bob's policy may go (and the wildcard may not, then)
    admin = users["admin"]
    star = _ok(_policy(admin, net["id"], "*"), 201)["rbac_policy"]
    _ok(alice.delete(f"/rbac-policies/{pol['id']}"), 204)
    check_error(admin.delete(f"/rbac-policies/{star['id']}"), 409, "RbacPolicyInUse")
    check_error(admin.put(f"/networks/{net['id']}", json={"network": {"shared": False}}), 409, "InvalidSharedSetting")
    _ok(bob.delete(f"/ports/{port['id']}"), 204)
    _ok(admin.put(f"/networks/{net['id']}", json={"network": {"shared": False}}))
    assert _ok(admin.get("/rbac-policies", params={"object_id": net["id"]}))["rbac_policies"] == []
    # revoked: he no longer sees it, nor may put a port on it
    check_error(bob.get(f"/networks/{net['id']}"), 404, "NetworkNotFound")
    check_error(bob.post("/ports", json={"port": {"network_id": net["id"]}}), 404, "NetworkNotFound")
    check_error(bob.get(f"/subnets/{sub['id']}"), 404, "SubnetNotFound")


def test_shared_flag_is_the_wildcard_policy(users: dict[str, httpx.Client]) -> None:
    admin, bob = users["admin"], users["bob"]
    net = create(admin, "networks", "network", name="everyone", shared=True, project_id="alice")
    (star,) = _ok(admin.get("/rbac-policies", params={"object_id": net["id"]}))["rbac_policies"]
    assert (star["target_tenant"], star["action"], star["project_id"]) == ("*", "access_as_shared", "alice")
    assert _ok(bob.get(f"/networks/{net['id']}"))["network"]["shared"] is True
    _ok(admin.delete(f"/rbac-policies/{star['id']}"), 204)
    assert _ok(admin.get(f"/networks/{net['id']}"))["network"]["shared"] is False
    check_error(bob.get(f"/networks/{net['id']}"), 404, "NetworkNotFound")
    _ok(admin.put(f"/networks/{net['id']}", json={"network": {"shared": True}}))
    assert len(_ok(admin.get("/rbac-policies", params={"object_id": net["id"]}))["rbac_policies"]) == 1
    ext = create(admin, "networks", "network", name="ext", **{"router:external": True})
    (pol,) = _ok(admin.get("/rbac-policies", params={"object_id": ext["id"]}))["rbac_policies"]
    assert (pol["target_tenant"], pol["action"]) == ("*", "access_as_external")


def test_external_to_one_project(users: dict[str, httpx.Client]) -> None:
    """access_as_external to bob: the network becomes external, bob (only) sees it and may put his router's
    gateway on it; the policy may not go while that router is there."""
    admin, alice, bob = users["admin"], users["alice"], users["bob"]
    net = create(admin, "networks", "network", name="uplink")
    create(admin, "subnets", "subnet", network_id=net["id"], cidr="192.0.2.0/24")
    pol = _ok(_policy(admin, net["id"], "bob", "access_as_external"), 201)["rbac_policy"]
    assert _ok(admin.get(f"/networks/{net['id']}"))["network"]["router:external"] is True
    check_error(alice.get(f"/networks/{net['id']}"), 404, "NetworkNotFound")
    body = {"router": {"external_gateway_info": {"network_id": net["id"]}}}
    check_error(alice.post("/routers", json=body), 404, "NetworkNotFound")
    router = _ok(bob.post("/routers", json=body), 201)["router"]
    check_error(bob.post("/ports", json={"port": {"network_id": net["id"]}}), 404, "NetworkNotFound")
    check_error(admin.delete(f"/rbac-policies/{pol['id']}"), 409, "RbacPolicyInUse",
                "There are routers attached to this network that depend on this policy for access.")  # fmt: skip
    _ok(bob.put(f"/routers/{router['id']}", json={"router": {"external_gateway_info": None}}))
    _ok(admin.delete(f"/rbac-policies/{pol['id']}"), 204)
    assert _ok(admin.get(f"/networks/{net['id']}"))["network"]["router:external"] is False
    check_error(bob.get(f"/networks/{net['id']}"), 404, "NetworkNotFound")


def test_shared_security_group(users: dict[str, httpx.Client]) -> None:
    alice, bob = users["alice"], users["bob"]
    sg = create(alice, "security-groups", "security_group", name="a-web")
    net = create(bob, "networks", "network", name="b-net")
    body = {"port": {"network_id": net["id"], "security_groups": [sg["id"]]}}
    check_error(bob.post("/ports", json=body), 404, "SecurityGroupNotFound")
    # bob's own group's rule naming alice's group as its remote: only once it is shared with him (Neutron's)
    own = create(bob, "security-groups", "security_group", name="b-app")
    rule = {"security_group_rule": {"security_group_id": own["id"], "direction": "ingress",
                                    "remote_group_id": sg["id"]}}  # fmt: skip
    check_error(bob.post("/security-group-rules", json=rule), 404, "SecurityGroupNotFound")
    pol = _ok(_policy(alice, sg["id"], "bob", object_type="security_group"), 201)["rbac_policy"]
    made = _ok(bob.post("/security-group-rules", json=rule), 201)["security_group_rule"]
    assert made["remote_group_id"] == sg["id"] and made["project_id"] == "bob"
    _ok(bob.delete(f"/security-group-rules/{made['id']}"), 204)
    shown = _ok(bob.get(f"/security-groups/{sg['id']}"))["security_group"]
    assert shown["shared"] is True and shown["project_id"] == "alice"
    assert sg["id"] in {g["id"] for g in _ok(bob.get("/security-groups"))["security_groups"]}
    port = _ok(bob.post("/ports", json=body), 201)["port"]
    assert port["security_groups"] == [sg["id"]]
    # seen, not his: 403 to change it
    check_error(bob.put(f"/security-groups/{sg['id']}", json={"security_group": {"name": "b"}}), 403,
                "PolicyNotAuthorized")  # fmt: skip
    check_error(bob.delete(f"/security-groups/{sg['id']}"), 403, "PolicyNotAuthorized")
    check_error(alice.delete(f"/rbac-policies/{pol['id']}"), 409, "RbacPolicyInUse", "Details: project_id=bob")
    _ok(bob.delete(f"/ports/{port['id']}"), 204)
    _ok(alice.delete(f"/rbac-policies/{pol['id']}"), 204)
    check_error(bob.post("/ports", json=body), 404, "SecurityGroupNotFound")
    check_error(bob.get(f"/security-groups/{sg['id']}"), 404, "SecurityGroupNotFound")
    check_error(bob.post("/security-group-rules", json=rule), 404, "SecurityGroupNotFound")


def test_pool_claim_on_shared_network(users: dict[str, httpx.Client]) -> None:
    admin, alice, bob = users["admin"], users["alice"], users["bob"]
    _ok(admin.put(f"/hosts/{HOST}", json={"host": {"agent_version": "test"}}))
    net = create(alice, "networks", "network", name="a-net")
    create(alice, "subnets", "subnet", network_id=net["id"], cidr="10.42.0.0/24")
    claim = {"claim": {"host": HOST, "network_id": net["id"]}}
    check_error(bob.post("/port-pools/claim", json=claim), 404, "NetworkNotFound")
    pol = _ok(_policy(alice, net["id"], "bob"), 201)["rbac_policy"]
    claimed = _ok(bob.post("/port-pools/claim", json=claim), 201)["port"]
    assert claimed["project_id"] == "bob"
    # his claimed port holds the share; his pool's ready ports do not, and go with it (nor is the pool refilled)
    check_error(alice.delete(f"/rbac-policies/{pol['id']}"), 409, "RbacPolicyInUse")
    _ok(bob.delete(f"/ports/{claimed['id']}"), 204)
    assert _ok(admin.get("/ports", params={"network_id": net["id"], "project_id": "bob"}))["ports"]  # ready ones
    _ok(alice.delete(f"/rbac-policies/{pol['id']}"), 204)
    assert _ok(admin.get("/ports", params={"network_id": net["id"], "project_id": "bob"}))["ports"] == []
    check_error(bob.post("/port-pools/claim", json=claim), 404, "NetworkNotFound")
    assert _ok(admin.get("/ports", params={"network_id": net["id"], "project_id": "bob"}))["ports"] == []


def test_extensions_and_quota(users: dict[str, httpx.Client]) -> None:
    aliases = {e["alias"] for e in _ok(users["bob"].get("/extensions"))["extensions"]}
    assert {"rbac-policies", "rbac-security-groups"} <= aliases
    admin, alice = users["admin"], users["alice"]
    net = create(alice, "networks", "network", name="a-net")
    _ok(admin.put("/quotas/alice", json={"quota": {"rbac_policy": 2}}))
    for target in ("p1", "p2"):
        _ok(_policy(alice, net["id"], target), 201)
    check_error(_policy(alice, net["id"], "p3"), 409, "OverQuota")


def test_unsharing_a_wildcard_in_use_is_refused(users: dict[str, httpx.Client], store: Store) -> None:
    """policies.check_unshare, what a type with a `shared` column calls before turning it off: a wildcard policy
    another project relies on may not go (here a security group's, which has no such column of its own)."""
    admin, alice, bob = users["admin"], users["alice"], users["bob"]
    sg = create(alice, "security-groups", "security_group", name="everyone's")
    _ok(_policy(admin, sg["id"], "*", object_type="security_group"), 201)
    net = create(bob, "networks", "network", name="b-net")
    port = create(bob, "ports", "port", network_id=net["id"], security_groups=[sg["id"]])
    SG = tables.security_groups
    with store.read() as conn:
        row = conn.execute(select(SG).where(SG.c.id == sg["id"])).one()
        with pytest.raises(Conflict) as refused:
            policies.check_unshare(conn, "security_group", row)
        assert refused.value.type == "RbacPolicyInUse" and "project_id=*" in refused.value.message
    _ok(bob.delete(f"/ports/{port['id']}"), 204)
    with store.read() as conn:
        policies.check_unshare(conn, "security_group", row)  # nobody else uses it now
