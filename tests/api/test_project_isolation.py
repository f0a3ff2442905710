"""Two projects, resource by resource: bob (a member of project B) can neither read, change, delete nor attach to
anything of alice's (project A), except what Neutron allows: her shared network (he sees it and may put ports on
it) and an external network (he sees it and may use it as his router's gateway, with an address picked for him).

CASES is one table: a call of bob's and Neutron's answer to it (404 for what he cannot see, never 403; 403 where
Neutron's policy refuses what he can see; 400/409 for attachments as Neutron refuses them). After every call:
- alice's view of her objects is unchanged, revision numbers included: her resources, pools, forwards, metadata
  (also as the metadata service serves it to her instance), quota usage, and which router carries her forwards
  and SNAT address in the desired state the agents get;
- a refused call wrote nothing at all: the revision log did not move;
- the answer names none of alice's objects that bob did not name himself.

The world is built once per backend (SQLite, PostgreSQL) for the whole table: a refused call changes nothing,
and an allowed one changes only bob's objects, which is what every case checks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from cloudnet.metadata.model import Settings
from cloudnet.metadata.server import MetadataApp
from cloudnet.store import tables
from cloudnet.store.db import Store
from tests.conftest import new_db_url
from tests.support.api import check_error, create, pool_config
from tests.support.metadata import RunningMetadata, identity
from tests.support.server import RunningServer

Json = dict[str, Any]
HOST = "iso-node"
SECRET = "isolation-test-secret"
TAG = "alice-only"  # on every taggable object of alice's
SECRET_VALUE = "alice-secret"  # in her instance's metadata
LISTEN, SHARED_LISTEN, SNAT = "192.0.2.50", "192.0.2.51", "192.0.2.60"  # her forwards and SNAT address
META_DATA = "/openstack/latest/meta_data.json"
PASSWORD = "/openstack/latest/password"
COLLECTIONS = ("networks", "subnets", "ports", "routers", "security-groups", "security-group-rules", "instances")


# -- the table ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One call of bob's. Strings in `path`, `params` and `body` name the world's objects as `{key}`
    (World.ids). `guest`: the call goes to the metadata service instead, as the proxy of instance `guest[0]`
    vouching for project `guest[1]`."""

    name: str
    method: str
    path: str
    status: int
    type: str | None = None  # NeutronError type of a refusal
    body: Any = None
    params: dict[str, str] | None = None
    guest: tuple[str, str] | None = None
    expect: Callable[[World, Json], None] | None = None  # more about an allowed answer


def owned(
    collection: str, member: str, key: str, missing: str, *, update: bool = True, tags: bool = True
) -> list[Case]:
    """Show, update, delete, tags and lists (filtered by her, by id, by tag; trimmed; from her object as a marker)
    of one of alice's objects, as `key` of World.ids; `missing`: the NotFound type."""
    path = f"/{collection}/{{{key}}}"
    cases = [Case(f"{member} show", "GET", path, 404, missing), Case(f"{member} delete", "DELETE", path, 404, missing)]
    if update:
        cases.append(Case(f"{member} update", "PUT", path, 404, missing, body={member: {"name": "bob"}}))
    if tags:
        cases += [
            Case(f"{member} tags show", "GET", f"{path}/tags", 404, missing),
            Case(f"{member} tag check", "GET", f"{path}/tags/{TAG}", 404, missing),
            Case(f"{member} tag add", "PUT", f"{path}/tags/bob", 404, missing),
            Case(f"{member} tags replace", "PUT", f"{path}/tags", 404, missing, body={"tags": ["bob"]}),
            Case(f"{member} tag remove", "DELETE", f"{path}/tags/{TAG}", 404, missing),
            Case(f"{member} tags clear", "DELETE", f"{path}/tags", 404, missing),
            Case(f"{collection} ?tags", "GET", f"/{collection}", 200, params={"tags": TAG}),
            Case(f"{collection} ?tags-any", "GET", f"/{collection}", 200, params={"tags-any": TAG}),
        ]
    cases += [
        Case(f"{collection} list", "GET", f"/{collection}", 200),
        Case(f"{collection} ?id", "GET", f"/{collection}", 200, params={"id": f"{{{key}}}"}),
        Case(f"{collection} ?project_id", "GET", f"/{collection}", 200, params={"project_id": "alice"}),
        Case(f"{collection} ?tenant_id", "GET", f"/{collection}", 200, params={"tenant_id": "alice"}),
        Case(f"{collection} ?fields", "GET", f"/{collection}", 200, params={"fields": "id,project_id"}),
        Case(f"{collection} ?marker", "GET", f"/{collection}", 404, missing, params={"marker": f"{{{key}}}"}),
    ]
    return cases


def _own_events(_w: World, answer: Json) -> None:
    assert answer["events"] and {e["project_id"] for e in answer["events"]} == {"bob"}, answer


def _sees(*keys: str) -> Callable[[World, Json], None]:
    """The list answer holds these objects (of alice's or the admin's) that bob may see."""

    def check(w: World, answer: Json) -> None:
        (items,) = answer.values()
        assert {w.ids[k] for k in keys} <= {i["id"] for i in items}, items

    return check


def _own_metadata(w: World, answer: Json) -> None:
    assert answer["uuid"] == w.ids["b_vm"] and answer["meta"] == {"role": "bob"}, answer


def _picked_gateway(w: World, answer: Json) -> None:
    (fixed,) = answer["router"]["external_gateway_info"]["external_fixed_ips"]
    assert fixed["subnet_id"] == w.ids["public_sub"] and fixed["ip_address"].startswith("192.0.2.")


NET = {"network_id": "{b_net}"}
TO_A_ROUTER = {"device_owner": "network:router_interface", "device_id": "{a_router}"}
TO_A_GATEWAY = {"device_owner": "network:router_gateway", "device_id": "{a_router}"}
NOT_OWNED = "DeviceIDNotOwnedByTenant"
ADD, REMOVE = "/routers/{b_router}/add_router_interface", "/routers/{b_router}/remove_router_interface"  # bob's


def _rbac(object_id: str, target: str, object_type: str = "network", action: str = "access_as_shared") -> Json:
    return {"rbac_policy": {"object_type": object_type, "object_id": object_id, "action": action,
                            "target_tenant": target}}  # fmt: skip


def _shared_with_bob(_w: World, answer: Json) -> None:
    (item,) = answer.values()
    assert item["shared"] is True and item["project_id"] == "alice", item


def _instance(**body: Any) -> Json:
    return {"instance": {"name": "bob-vm", "host": HOST, **body}}


CASES: list[Case] = [
    # networks and subnets
    *owned("networks", "network", "a_net", "NetworkNotFound"),
    Case("networks ?name", "GET", "/networks", 200, params={"name": "a-private"}),
    Case("networks ?subnets", "GET", "/networks", 200, params={"subnets": "{a_sub4}"}),
    Case("subnet on alice's network", "POST", "/subnets", 404, "NetworkNotFound",
         body={"subnet": {"network_id": "{a_net}", "cidr": "10.9.0.0/24"}}),
    *owned("subnets", "subnet", "a_sub4", "SubnetNotFound"),
    Case("subnet v6 show", "GET", "/subnets/{a_sub6}", 404, "SubnetNotFound"),
    Case("subnet v6 update", "PUT", "/subnets/{a_sub6}", 404, "SubnetNotFound", body={"subnet": {"name": "bob"}}),
    Case("subnet v6 delete", "DELETE", "/subnets/{a_sub6}", 404, "SubnetNotFound"),
    Case("subnets ?network_id", "GET", "/subnets", 200, params={"network_id": "{a_net}"}),
    # ports
    *owned("ports", "port", "a_port", "PortNotFound"),
    Case("instance's port show", "GET", "/ports/{a_vm_port}", 404, "PortNotFound"),
    Case("instance's port update", "PUT", "/ports/{a_vm_port}", 404, "PortNotFound",
         body={"port": {"admin_state_up": False}}),
    Case("router interface port delete", "DELETE", "/ports/{a_iface}", 404, "PortNotFound"),
    Case("router gateway port delete", "DELETE", "/ports/{a_gw_port}", 404, "PortNotFound"),
    Case("ports ?network_id", "GET", "/ports", 200, params={"network_id": "{a_net}"}),
    Case("ports ?device_id", "GET", "/ports", 200, params={"device_id": "{a_router}"}),
    Case("ports ?fixed_ips", "GET", "/ports", 200, params={"fixed_ips": "subnet_id={a_sub4}"}),
    Case("ports ?security_groups", "GET", "/ports", 200, params={"security_groups": "{a_sg}"}),
    Case("port on alice's network", "POST", "/ports", 404, "NetworkNotFound", body={"port": {"network_id": "{a_net}"}}),
    Case("bulk ports, one on alice's network", "POST", "/ports", 404, "NetworkNotFound",
         body={"ports": [NET, {"network_id": "{a_net}"}]}),
    Case("port in alice's project", "POST", "/ports", 403, "PolicyNotAuthorized",
         body={"port": {**NET, "project_id": "alice"}}),
    Case("port with alice's subnet", "POST", "/ports", 400, "InvalidInput",
         body={"port": {**NET, "fixed_ips": [{"subnet_id": "{a_sub4}"}]}}),
    Case("port as alice's router interface", "POST", "/ports", 409, NOT_OWNED, body={"port": {**NET, **TO_A_ROUTER}}),
    Case("port as alice's router gateway", "POST", "/ports", 409, NOT_OWNED, body={"port": {**NET, **TO_A_GATEWAY}}),
    Case("port updated into alice's router", "PUT", "/ports/{b_port}", 409, NOT_OWNED, body={"port": TO_A_ROUTER}),
    Case("port with alice's security group", "POST", "/ports", 404, "SecurityGroupNotFound",
         body={"port": {**NET, "security_groups": ["{a_sg}"]}}),
    Case("port updated with alice's security group", "PUT", "/ports/{b_port}", 404, "SecurityGroupNotFound",
         body={"port": {"security_groups": ["{a_sg}"]}}),
    Case("port with alice's default security group", "POST", "/ports", 404, "SecurityGroupNotFound",
         body={"port": {**NET, "security_groups": ["{a_default_sg}"]}}),
    # routers
    *owned("routers", "router", "a_router", "RouterNotFound"),
    Case("interface on alice's router", "PUT", "/routers/{a_router}/add_router_interface", 404, "RouterNotFound",
         body={"subnet_id": "{b_sub}"}),
    Case("interface off alice's router", "PUT", "/routers/{a_router}/remove_router_interface", 404, "RouterNotFound",
         body={"subnet_id": "{a_sub4}"}),
    Case("router interface with alice's subnet", "PUT", ADD, 404, "SubnetNotFound", body={"subnet_id": "{a_sub4}"}),
    Case("router interface with alice's v6 subnet", "PUT", ADD, 404, "SubnetNotFound", body={"subnet_id": "{a_sub6}"}),
    Case("router interface with alice's port", "PUT", ADD, 404, "PortNotFound", body={"port_id": "{a_port}"}),
    Case("router interface with alice's interface port", "PUT", ADD, 404, "PortNotFound",
         body={"port_id": "{a_iface}"}),
    Case("alice's interface off bob's router", "PUT", REMOVE, 404, "RouterInterfaceNotFound",
         body={"port_id": "{a_iface}"}),
    Case("alice's subnet off bob's router", "PUT", REMOVE, 404, "RouterInterfaceNotFoundForSubnet",
         body={"subnet_id": "{a_sub4}"}),
    Case("router gateway on alice's network", "POST", "/routers", 404, "NetworkNotFound",
         body={"router": {"external_gateway_info": {"network_id": "{a_net}"}}}),
    Case("router gateway moved to alice's network", "PUT", "/routers/{b_router}", 404, "NetworkNotFound",
         body={"router": {"external_gateway_info": {"network_id": "{a_net}"}}}),
    Case("router in alice's project", "POST", "/routers", 403, "PolicyNotAuthorized",
         body={"router": {"project_id": "alice"}}),
    # security groups and rules
    *owned("security-groups", "security_group", "a_sg", "SecurityGroupNotFound"),
    Case("default security group show", "GET", "/security-groups/{a_default_sg}", 404, "SecurityGroupNotFound"),
    Case("default security group delete", "DELETE", "/security-groups/{a_default_sg}", 404, "SecurityGroupNotFound"),
    *owned("security-group-rules", "security_group_rule", "a_rule", "SecurityGroupRuleNotFound", update=False,
           tags=False),
    Case("security-group-rules ?security_group_id", "GET", "/security-group-rules", 200,
         params={"security_group_id": "{a_sg}"}),
    Case("security-group-rules ?remote_group_id", "GET", "/security-group-rules", 200,
         params={"remote_group_id": "{a_sg}"}),
    Case("rule in alice's group", "POST", "/security-group-rules", 404, "SecurityGroupNotFound",
         body={"security_group_rule": {"security_group_id": "{a_sg}", "direction": "ingress"}}),
    Case("rule with alice's group as remote", "POST", "/security-group-rules", 404, "SecurityGroupNotFound",
         body={"security_group_rule": {"security_group_id": "{b_sg}", "direction": "ingress",
                                       "remote_group_id": "{a_sg}"}}),
    # instances and their metadata
    *owned("instances", "instance", "a_vm", "InstanceNotFound", tags=False),
    Case("instance metadata show", "GET", "/instances/{a_vm}/metadata", 404, "InstanceNotFound"),
    Case("instance metadata item show", "GET", "/instances/{a_vm}/metadata/k", 404, "InstanceNotFound"),
    Case("instance metadata item set", "PUT", "/instances/{a_vm}/metadata/k", 404, "InstanceNotFound",
         body={"value": "bob"}),
    Case("instance metadata item add", "PUT", "/instances/{a_vm}/metadata/new", 404, "InstanceNotFound",
         body={"value": "bob"}),
    Case("instance metadata item delete", "DELETE", "/instances/{a_vm}/metadata/k", 404, "InstanceNotFound"),
    Case("instance password delete", "DELETE", "/instances/{a_vm}/metadata/admin_pw", 404, "InstanceNotFound"),
    Case("instance config drive", "GET", "/instances/{a_vm}/config-drive", 404, "InstanceNotFound"),
    Case("instance with alice's port", "POST", "/instances", 404, "PortNotFound",
         body=_instance(nets=[{"port": "{a_port}"}])),
    Case("instance on alice's network", "POST", "/instances", 404, "NetworkNotFound",
         body=_instance(nets=[{"network": "{a_net}"}])),
    Case("instance on alice's network, fixed IP", "POST", "/instances", 404, "NetworkNotFound",
         body=_instance(nets=[{"network": "{a_net}", "v4-fixed-ip": "10.1.0.99"}])),
    Case("instance in alice's project", "POST", "/instances", 403, "PolicyNotAuthorized",
         body=_instance(project_id="alice", nets=[{"network": "{b_net}"}])),
    Case("instance in alice's instance's namespace", "POST", "/instances", 400, "HTTPBadRequest",
         body=_instance(netns="{a_vm_netns}", nets=[{"network": "{b_net}"}])),  # made by cloudnet: nobody's to name
    Case("instance in a named namespace", "POST", "/instances", 403, "PolicyNotAuthorized",
         body=_instance(netns="/run/netns/alice", nets=[{"network": "{b_net}"}])),
    # the metadata service: bob's guest reads its own instance only
    Case("guest reads alice's instance", "GET", META_DATA, 404, guest=("a_vm", "bob")),
    Case("guest sets alice's password", "POST", PASSWORD, 404, body="bob-pw", guest=("a_vm", "bob")),
    Case("guest reads its own instance", "GET", META_DATA, 200, guest=("b_vm", "bob"),
         expect=_own_metadata),
    # forwards
    Case("forwards list", "GET", "/networks/{a_net}/forwards", 404, "NetworkNotFound"),
    Case("forwards list by name", "GET", "/networks/a-private/forwards", 404, "NetworkNotFound"),
    Case("forward show", "GET", f"/networks/{{a_net}}/forwards/{LISTEN}", 404, "NetworkNotFound"),
    Case("forward replace", "PUT", f"/networks/{{a_net}}/forwards/{LISTEN}", 404, "NetworkNotFound",
         body={"description": "bob"}),
    Case("forward patch", "PATCH", f"/networks/{{a_net}}/forwards/{LISTEN}", 404, "NetworkNotFound",
         body={"config": {"target_address": "10.1.0.11"}}),
    Case("forward delete", "DELETE", f"/networks/{{a_net}}/forwards/{LISTEN}", 404, "NetworkNotFound"),
    Case("forward on alice's network", "POST", "/networks/{a_net}/forwards", 404, "NetworkNotFound",
         body={"listen_address": "192.0.2.70"}),
    Case("forward on alice's shared network", "POST", "/networks/{a_shared}/forwards", 404, "NetworkNotFound",
         body={"listen_address": "192.0.2.71"}),
    Case("forward on alice's listen address", "POST", "/networks/{b_net}/forwards", 400, "HTTPBadRequest",
         body={"listen_address": LISTEN}),
    Case("forward on alice's SNAT address", "POST", "/networks/{b_net}/forwards", 400, "HTTPBadRequest",
         body={"listen_address": SNAT}),
    Case("forward on alice's gateway address", "POST", "/networks/{b_net}/forwards", 400, "HTTPBadRequest",
         body={"listen_address": "{a_gw_ip}"}),
    Case("SNAT to alice's listen address", "PUT", "/networks/{b_net}", 400, "HTTPBadRequest",
         body={"network": {"config": {"ipv4.nat.address": LISTEN}}}),
    # port pools
    Case("pool show", "GET", "/port-pools/{a_pool}", 404, "PortPoolNotFound"),
    Case("pool resize", "PUT", "/port-pools/{a_pool}", 404, "PortPoolNotFound", body={"port_pool": {"min": 0}}),
    Case("own pool resize", "PUT", "/port-pools/{b_pool}", 403, "PolicyNotAuthorized", body={"port_pool": {"min": 0}}),
    Case("pools list", "GET", "/port-pools", 200),
    Case("pools ?id", "GET", "/port-pools", 200, params={"id": "{a_pool}"}),
    Case("pools ?project_id", "GET", "/port-pools", 200, params={"project_id": "alice"}),
    Case("pools ?network_id", "GET", "/port-pools", 200, params={"network_id": "{a_net}"}),
    Case("pool claim on alice's network", "POST", "/port-pools/claim", 404, "NetworkNotFound",
         body={"claim": {"host": HOST, "network_id": "{a_net}"}}),
    Case("pool claim in alice's project", "POST", "/port-pools/claim", 403, "PolicyNotAuthorized",
         body={"claim": {"host": HOST, "network_id": "{b_net}", "project_id": "alice"}}),
    Case("pool claim with alice's group", "POST", "/port-pools/claim", 404, "SecurityGroupNotFound",
         body={"claim": {"host": HOST, "network_id": "{b_net}", "security_groups": ["{a_sg}"]}}),
    Case("pool claim into alice's router", "POST", "/port-pools/claim", 409, NOT_OWNED,
         body={"claim": {"host": HOST, **NET, **TO_A_ROUTER}}),
    Case("pool release of alice's claimed port", "POST", "/port-pools/release", 404, "PortNotFound",
         body={"port_id": "{a_claimed}"}),
    Case("pool release of alice's ready port", "POST", "/port-pools/release", 404, "PortNotFound",
         body={"port_id": "{a_ready}"}),
    # admin-only APIs: the revision log, hosts (the agents' own view of every project), alice's quotas
    # The event stream: bob's own project's events only (tests/api/test_event_stream.py), never alice's.
    Case("events", "GET", "/events", 200, expect=_own_events),
    Case("events ?since", "GET", "/events", 200, params={"since": "0", "timeout": "0"}, expect=_own_events),
    Case("events ?project_id", "GET", "/events", 403, "PolicyNotAuthorized", params={"project_id": "alice"}),
    Case("events ?type", "GET", "/events", 200, params={"type": "network"}, expect=_own_events),
    Case("hosts list", "GET", "/hosts", 403, "PolicyNotAuthorized"),
    Case("host show", "GET", f"/hosts/{HOST}", 403, "PolicyNotAuthorized"),
    Case("host desired state", "GET", f"/hosts/{HOST}/state", 403, "PolicyNotAuthorized"),
    Case("host heartbeat", "PUT", f"/hosts/{HOST}", 403, "PolicyNotAuthorized", body={"host": {"agent_version": "b"}}),
    Case("host port report", "PUT", f"/hosts/{HOST}/ports", 403, "PolicyNotAuthorized",
         body={"ports": [{"id": "{a_vm_port}", "status": "ACTIVE"}]}),
    Case("host delete", "DELETE", f"/hosts/{HOST}", 403, "PolicyNotAuthorized"),
    Case("quotas list", "GET", "/quotas", 403, "PolicyNotAuthorized"),
    Case("alice's quota", "GET", "/quotas/alice", 403, "PolicyNotAuthorized"),
    Case("alice's quota details", "GET", "/quotas/alice/details", 403, "PolicyNotAuthorized"),
    Case("alice's quota defaults", "GET", "/quotas/alice/default", 403, "PolicyNotAuthorized"),
    Case("alice's quota set", "PUT", "/quotas/alice", 403, "PolicyNotAuthorized", body={"quota": {"port": 1}}),
    Case("alice's quota reset", "DELETE", "/quotas/alice", 403, "PolicyNotAuthorized"),
    # what Neutron allows: alice's shared network ...
    Case("shared network show", "GET", "/networks/{a_shared}", 200),
    Case("shared and external networks listed", "GET", "/networks", 200, expect=_sees("a_shared", "public")),
    Case("shared subnet show", "GET", "/subnets/{a_shared_sub}", 200),
    Case("shared network tags show", "GET", "/networks/{a_shared}/tags", 200),
    Case("port on the shared network", "POST", "/ports", 201, body={"port": {"network_id": "{a_shared}"}}),
    Case("port on the shared network, by subnet", "POST", "/ports", 201,
         body={"port": {"network_id": "{a_shared}", "fixed_ips": [{"subnet_id": "{a_shared_sub}"}]}}),
    Case("pool claim on the shared network", "POST", "/port-pools/claim", 201,
         body={"claim": {"host": HOST, "network_id": "{a_shared}"}}),
    Case("instance on the shared network", "POST", "/instances", 201, body=_instance(nets=[{"network": "{a_shared}"}])),
    Case("router interface with bob's port on the shared network", "PUT", ADD, 200,
         body={"port_id": "{b_shared_port}"}),
    # ... but not to change it, nor to choose an address or a device owner on it
    Case("shared network update", "PUT", "/networks/{a_shared}", 403, "PolicyNotAuthorized",
         body={"network": {"name": "bob"}}),
    Case("shared network delete", "DELETE", "/networks/{a_shared}", 403, "PolicyNotAuthorized"),
    Case("shared network tag add", "PUT", "/networks/{a_shared}/tags/bob", 403, "PolicyNotAuthorized"),
    Case("shared network tags clear", "DELETE", "/networks/{a_shared}/tags", 403, "PolicyNotAuthorized"),
    Case("shared subnet update", "PUT", "/subnets/{a_shared_sub}", 403, "PolicyNotAuthorized",
         body={"subnet": {"name": "bob"}}),
    Case("shared subnet delete", "DELETE", "/subnets/{a_shared_sub}", 403, "PolicyNotAuthorized"),
    Case("subnet on the shared network", "POST", "/subnets", 403, "PolicyNotAuthorized",
         body={"subnet": {"network_id": "{a_shared}", "cidr": "10.9.0.0/24"}}),
    Case("port on the shared network, chosen address", "POST", "/ports", 403, "PolicyNotAuthorized",
         body={"port": {"network_id": "{a_shared}", "fixed_ips": [{"ip_address": "10.3.0.77"}]}}),
    Case("port on the shared network, alice's address", "POST", "/ports", 403, "PolicyNotAuthorized",
         body={"port": {"network_id": "{a_shared}", "fixed_ips": [{"ip_address": "{a_vm_shared_ip}"}]}}),
    Case("port on the shared network moved to alice's address", "PUT", "/ports/{b_shared_port}", 403,
         "PolicyNotAuthorized", body={"port": {"fixed_ips": [{"ip_address": "{a_vm_shared_ip}"}]}}),
    Case("instance on the shared network at alice's address", "POST", "/instances", 403, "PolicyNotAuthorized",
         body=_instance(nets=[{"network": "{a_shared}", "v4-fixed-ip": "{a_vm_shared_ip}"}])),
    Case("port on the shared network, chosen MAC", "POST", "/ports", 403, "PolicyNotAuthorized",
         body={"port": {"network_id": "{a_shared}", "mac_address": "{a_vm_shared_mac}"}}),
    Case("port on the shared network as a router interface", "POST", "/ports", 403, "PolicyNotAuthorized",
         body={"port": {"network_id": "{a_shared}", "device_owner": "network:router_interface",
                        "device_id": "{b_router}"}}),
    Case("router interface with the shared subnet", "PUT", ADD, 400, "BadRequest",
         body={"subnet_id": "{a_shared_sub}"}),
    Case("router gateway on the shared network", "POST", "/routers", 400, "BadRequest",
         body={"router": {"external_gateway_info": {"network_id": "{a_shared}"}}}),
    # ... and an external network: seen, a gateway with an address picked, nothing else
    Case("external network show", "GET", "/networks/{public}", 200),
    Case("router gateway on the external network", "POST", "/routers", 201,
         body={"router": {"external_gateway_info": {"network_id": "{public}"}}}, expect=_picked_gateway),
    Case("router gateway with a chosen address", "POST", "/routers", 403, "PolicyNotAuthorized",
         body={"router": {"external_gateway_info": {"network_id": "{public}",
                                                    "external_fixed_ips": [{"ip_address": "192.0.2.99"}]}}}),
    Case("port on the external network", "POST", "/ports", 404, "NetworkNotFound",
         body={"port": {"network_id": "{public}"}}),
    Case("subnet on the external network", "POST", "/subnets", 404, "NetworkNotFound",
         body={"subnet": {"network_id": "{public}", "cidr": "10.9.0.0/24"}}),
    Case("instance on the external network", "POST", "/instances", 404, "NetworkNotFound",
         body=_instance(nets=[{"network": "{public}"}])),
    Case("pool claim on the external network", "POST", "/port-pools/claim", 404, "NetworkNotFound",
         body={"claim": {"host": HOST, "network_id": "{public}"}}),
    Case("external network update", "PUT", "/networks/{public}", 403, "PolicyNotAuthorized",
         body={"network": {"name": "bob"}}),
    Case("external network delete", "DELETE", "/networks/{public}", 403, "PolicyNotAuthorized"),
    # what alice grants bob by RBAC policy (a network and a group shared with him; the admin's network external to
    # him) ...
    Case("granted network show", "GET", "/networks/{a_granted}", 200, expect=_shared_with_bob),
    Case("granted networks listed", "GET", "/networks", 200, params={"shared": "true"},
         expect=_sees("a_granted", "a_shared")),
    Case("granted subnet show", "GET", "/subnets/{a_granted_sub}", 200),
    Case("port on the granted network", "POST", "/ports", 201, body={"port": {"network_id": "{a_granted}"}}),
    Case("pool claim on the granted network", "POST", "/port-pools/claim", 201,
         body={"claim": {"host": HOST, "network_id": "{a_granted}"}}),
    Case("instance on the granted network", "POST", "/instances", 201,
         body=_instance(nets=[{"network": "{a_granted}"}])),
    Case("granted group show", "GET", "/security-groups/{a_granted_sg}", 200, expect=_shared_with_bob),
    Case("port with the granted group", "POST", "/ports", 201,
         body={"port": {**NET, "security_groups": ["{a_granted_sg}"]}}),
    Case("router gateway on the network external to bob", "POST", "/routers", 201,
         body={"router": {"external_gateway_info": {"network_id": "{ext_bob}"}}}),
    # ... but neither her policies nor what they grant are his to change, nor to pass on
    Case("alice's policy show", "GET", "/rbac-policies/{a_grant}", 404, "RbacPolicyNotFound"),
    Case("alice's policy retarget", "PUT", "/rbac-policies/{a_grant}", 404, "RbacPolicyNotFound",
         body={"rbac_policy": {"target_tenant": "bob"}}),
    Case("alice's policy delete", "DELETE", "/rbac-policies/{a_grant}", 404, "RbacPolicyNotFound"),
    Case("rbac-policies list", "GET", "/rbac-policies", 200),
    Case("rbac-policies ?object_id", "GET", "/rbac-policies", 200, params={"object_id": "{a_granted}"}),
    Case("rbac-policies ?target_tenant", "GET", "/rbac-policies", 200, params={"target_tenant": "bob"}),
    Case("policy on alice's network", "POST", "/rbac-policies", 400, "InvalidInput", body=_rbac("{a_net}", "bob")),
    Case("policy on the granted network", "POST", "/rbac-policies", 400, "InvalidInput",
         body=_rbac("{a_granted}", "carol")),
    Case("policy on alice's group", "POST", "/rbac-policies", 400, "InvalidInput",
         body=_rbac("{a_sg}", "bob", "security_group")),
    Case("policy on the granted group", "POST", "/rbac-policies", 400, "InvalidInput",
         body=_rbac("{a_granted_sg}", "carol", "security_group")),
    Case("wildcard policy on his own network", "POST", "/rbac-policies", 403, "PolicyNotAuthorized",
         body=_rbac("{b_net}", "*")),
    Case("policy in alice's name", "POST", "/rbac-policies", 403, "PolicyNotAuthorized",
         body={"rbac_policy": {**_rbac("{b_net}", "carol")["rbac_policy"], "project_id": "alice"}}),
    Case("granted network update", "PUT", "/networks/{a_granted}", 403, "PolicyNotAuthorized",
         body={"network": {"name": "bob"}}),
    Case("granted network delete", "DELETE", "/networks/{a_granted}", 403, "PolicyNotAuthorized"),
    Case("subnet on the granted network", "POST", "/subnets", 403, "PolicyNotAuthorized",
         body={"subnet": {"network_id": "{a_granted}", "cidr": "10.9.0.0/24"}}),
    Case("port on the granted network, chosen address", "POST", "/ports", 403, "PolicyNotAuthorized",
         body={"port": {"network_id": "{a_granted}", "fixed_ips": [{"ip_address": "10.5.0.77"}]}}),
    Case("granted group update", "PUT", "/security-groups/{a_granted_sg}", 403, "PolicyNotAuthorized",
         body={"security_group": {"name": "bob"}}),
    Case("granted group delete", "DELETE", "/security-groups/{a_granted_sg}", 403, "PolicyNotAuthorized"),
    Case("port on the network external to bob", "POST", "/ports", 404, "NetworkNotFound",
         body={"port": {"network_id": "{ext_bob}"}}),
    # ... and what was granted and taken back is as if it never was
    Case("revoked network show", "GET", "/networks/{a_revoked}", 404, "NetworkNotFound"),
    Case("revoked subnet show", "GET", "/subnets/{a_revoked_sub}", 404, "SubnetNotFound"),
    Case("port on the revoked network", "POST", "/ports", 404, "NetworkNotFound",
         body={"port": {"network_id": "{a_revoked}"}}),
    Case("pool claim on the revoked network", "POST", "/port-pools/claim", 404, "NetworkNotFound",
         body={"claim": {"host": HOST, "network_id": "{a_revoked}"}}),
    Case("instance on the revoked network", "POST", "/instances", 404, "NetworkNotFound",
         body=_instance(nets=[{"network": "{a_revoked}"}])),
    Case("revoked group show", "GET", "/security-groups/{a_revoked_sg}", 404, "SecurityGroupNotFound"),
    Case("port with the revoked group", "POST", "/ports", 404, "SecurityGroupNotFound",
         body={"port": {**NET, "security_groups": ["{a_revoked_sg}"]}}),
    Case("router gateway on the network no longer external to bob", "POST", "/routers", 404, "NetworkNotFound",
         body={"router": {"external_gateway_info": {"network_id": "{ext_revoked}"}}}),
]  # fmt: skip


# -- the world ----------------------------------------------------------------------------------------------------


@dataclass
class World:
    users: dict[str, httpx.Client]  # admin, alice, bob
    metadata: httpx.Client  # the metadata service, reached as the agents' proxies reach it
    ids: dict[str, str] = field(default_factory=dict)
    private: frozenset[str] = frozenset()  # what of alice's bob may never be told about
    view: Json = field(default_factory=dict)  # alice's view after the last case
    revision: int = 0  # the revision log after the last case

    def fill(self, value: Any) -> Any:
        """`value` with every `{key}` of a string replaced by the object it names."""
        if isinstance(value, str):
            return value.format(**self.ids)
        if isinstance(value, dict):
            return {k: self.fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.fill(v) for v in value]
        return value

    def guest(self, method: str, path: str, instance: str, project: str, body: str | None = None) -> httpx.Response:
        headers = identity(SECRET, self.ids[instance], project)
        return self.metadata.request(method, path, headers=headers, content=body)

    def current_revision(self) -> int:
        r = self.users["admin"].get("/events", params={"since": 0, "limit": 1, "timeout": 0})
        assert r.status_code == 200, r.text
        return int(r.json()["revision"])

    def alice_view(self) -> Json:
        """Everything alice sees of hers, with the status of each answer."""
        alice, ids = self.users["alice"], self.ids
        paths = [f"/{c}" for c in COLLECTIONS] + [
            "/port-pools", "/rbac-policies", f"/networks/{ids['a_net']}/forwards",
            f"/networks/{ids['a_shared']}/forwards",
            f"/instances/{ids['a_vm']}/metadata", "/quotas/alice/details",
        ]  # fmt: skip
        view: Json = {p: _answer(alice.get(p)) for p in paths}
        r = self.guest("GET", META_DATA, "a_vm", "alice")
        view[META_DATA] = r.status_code, {k: v for k, v in r.json().items() if k != "random_seed"}  # new each time
        r = self.guest("GET", PASSWORD, "a_vm", "alice")
        view[PASSWORD] = r.status_code, r.text
        view["served"] = self.served()
        return view

    def served(self) -> list[Any]:
        """Which router the agents are told carries alice's forwards and SNAT addresses."""
        r = self.users["admin"].get(f"/hosts/{HOST}/state")
        assert r.status_code == 200, r.text
        mine = {self.ids["a_net"], self.ids["a_shared"]}
        out: list[Any] = []
        for router in r.json()["routers"]:
            out += [(router["id"], f["network_id"], f["listen_address"]) for f in router["forwards"]
                    if f["network_id"] in mine]  # fmt: skip
            out += [(router["id"], n, json.dumps(nat)) for n, nat in router["nat_addresses"].items() if n in mine]
        return sorted(out)


def _answer(r: httpx.Response) -> tuple[int, Any]:
    return r.status_code, r.json()


def _ok(r: httpx.Response, status: int = 200) -> Json:
    assert r.status_code == status, r.text
    return dict(r.json()) if r.content else {}


def _build(w: World, store: Store) -> None:
    admin, alice, bob = w.users["admin"], w.users["alice"], w.users["bob"]
    ids = w.ids
    _ok(admin.put(f"/hosts/{HOST}", json={"host": {"agent_version": "test"}}))
    public = create(admin, "networks", "network", name="public", **{"router:external": True})
    ids["public"] = public["id"]
    ids["public_sub"] = create(admin, "subnets", "subnet", network_id=public["id"], cidr="192.0.2.0/24")["id"]
    # alice's shared network: only an admin may make one
    shared = create(admin, "networks", "network", name="a-shared", shared=True, project_id="alice", tags=["seen"])
    ids["a_shared"] = shared["id"]
    ids["a_shared_sub"] = create(admin, "subnets", "subnet", network_id=shared["id"], cidr="10.3.0.0/24",
                                 project_id="alice")["id"]  # fmt: skip

    # bob's side first
    ids["b_net"] = create(bob, "networks", "network", name="b-private")["id"]
    ids["b_sub"] = create(bob, "subnets", "subnet", network_id=ids["b_net"], cidr="10.2.0.0/24")["id"]
    ids["b_router"] = create(bob, "routers", "router", name="b-router",
                             external_gateway_info={"network_id": ids["public"]})["id"]  # fmt: skip
    _ok(bob.put(f"/routers/{ids['b_router']}/add_router_interface", json={"subnet_id": ids["b_sub"]}))
    # bob's router is older than alice's, by an hour as in a running cloud (a network's uplink was its oldest
    # router, whoever's; created_at has whole seconds, so the order is set here rather than left to the clock)
    R = tables.routers
    with store.write() as tx:
        created = tx.conn.execute(select(R.c.created_at).where(R.c.id == ids["b_router"])).scalar_one()
        tx.conn.execute(update(R).where(R.c.id == ids["b_router"]).values(created_at=created - timedelta(hours=1)))
    ids["b_port"] = create(bob, "ports", "port", network_id=ids["b_net"])["id"]
    ids["b_shared_port"] = create(bob, "ports", "port", network_id=ids["a_shared"])["id"]
    ids["b_sg"] = create(bob, "security-groups", "security_group", name="b-sg")["id"]
    _ok(bob.post("/port-pools/claim", json={"claim": {"host": HOST, "network_id": ids["b_net"]}}), 201)
    ids["b_pool"] = _ok(bob.get("/port-pools", params={"project_id": "bob"}))["port_pools"][0]["id"]
    ids["b_vm"] = create(bob, "instances", "instance", name="b-vm", host=HOST, metadata={"role": "bob"},
                         nets=[{"network": ids["b_net"]}])["id"]  # fmt: skip

    # alice: one of everything, tagged
    ids["a_net"] = create(alice, "networks", "network", name="a-private", tags=[TAG])["id"]
    for key, cidr in (("a_sub4", "10.1.0.0/24"), ("a_sub6", "fd01::/64")):
        ids[key] = create(alice, "subnets", "subnet", network_id=ids["a_net"], cidr=cidr, tags=[TAG])["id"]
    ids["a_port"] = create(alice, "ports", "port", network_id=ids["a_net"], name="a-port", tags=[TAG])["id"]
    router = create(alice, "routers", "router", name="a-router", tags=[TAG],
                    external_gateway_info={"network_id": ids["public"]})  # fmt: skip
    ids["a_router"] = router["id"]
    ids["a_gw_ip"] = router["external_gateway_info"]["external_fixed_ips"][0]["ip_address"]
    for key in ("a_sub4", "a_sub6", "a_shared_sub"):
        info = _ok(alice.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": ids[key]}))
        ids.setdefault("a_iface", info["port_id"])
    sg = create(alice, "security-groups", "security_group", name="a-sg", tags=[TAG])
    ids["a_sg"] = sg["id"]
    ids["a_rule"] = create(alice, "security-group-rules", "security_group_rule", security_group_id=sg["id"],
                           direction="ingress", protocol="tcp", port_range_min=22, port_range_max=22,
                           remote_group_id=sg["id"])["id"]  # fmt: skip
    (default,) = _ok(alice.get("/security-groups", params={"name": "default"}))["security_groups"]
    ids["a_default_sg"] = default["id"]
    _ok(bob.get("/security-groups"))  # bob's default group exists before the cases (a list makes it)
    _ok(alice.post(f"/networks/{ids['a_net']}/forwards",
                   json={"listen_address": LISTEN, "config": {"target_address": "10.1.0.10"}}), 201)  # fmt: skip
    _ok(alice.post(f"/networks/{ids['a_shared']}/forwards",
                   json={"listen_address": SHARED_LISTEN, "config": {"target_address": "10.3.0.10"}}), 201)  # fmt: skip
    _ok(alice.put(f"/networks/{ids['a_net']}", json={"network": {"config": {"ipv4.nat.address": SNAT}}}))
    claimed = _ok(alice.post("/port-pools/claim", json={"claim": {"host": HOST, "network_id": ids["a_net"]}}), 201)
    ids["a_claimed"] = claimed["port"]["id"]
    ids["a_pool"] = _ok(alice.get("/port-pools", params={"project_id": "alice"}))["port_pools"][0]["id"]
    ready = {"network_id": ids["a_net"], "device_owner": "compute:cloudnet-pool"}
    ids["a_ready"] = _ok(admin.get("/ports", params=ready))["ports"][0]["id"]
    vm = create(alice, "instances", "instance", name="a-vm", host=HOST, metadata={"role": SECRET_VALUE},
                user_data="#cloud-config\n# alice-user-data\n",
                nets=[{"network": ids["a_net"]}, {"network": ids["a_shared"]}])  # fmt: skip
    ids["a_vm"], ids["a_vm_netns"] = vm["id"], vm["netns"]
    ids["a_vm_port"] = vm["nets"][0]["port_id"]
    ids["a_vm_shared_ip"] = vm["nets"][1]["fixed_ips"][0]["ip_address"]
    ids["a_vm_shared_mac"] = vm["nets"][1]["mac_address"]
    _ok(alice.put(f"/instances/{vm['id']}/metadata/k", json={"value": SECRET_VALUE}))
    _ok(alice.put(f"/instances/{vm['id']}/metadata/admin_pw", json={"value": SECRET_VALUE}))
    gateway = {"device_id": router["id"], "device_owner": "network:router_gateway"}
    ids["a_gw_port"] = _ok(admin.get("/ports", params=gateway))["ports"][0]["id"]
    _grants(w)

    # What bob may never be told: every id of alice's (her shared network's aside), her namespace, tag and secrets.
    theirs = {p["id"] for p in _ok(admin.get("/ports", params={"project_id": "alice", "fields": "id"}))["ports"]}
    seen = {
        "a_shared",
        "a_shared_sub",
        "a_gw_ip",
        "a_vm_shared_ip",
        "a_vm_shared_mac",
        "a_granted",
        "a_granted_sub",
        "a_granted_sg",
    }  # (or mere addresses)
    mine = {v for k, v in ids.items() if k.startswith("a_") and k not in seen}
    w.private = frozenset(mine | theirs | {TAG, SECRET_VALUE, "alice-user-data", "a-private", "a-revoked"})


def _grants(w: World) -> None:
    """alice's RBAC policies for bob (a network, a group), the admin's making a network external to him, and the
    same three granted and taken back."""
    admin, alice, ids = w.users["admin"], w.users["alice"], w.ids

    def grant(
        client: httpx.Client, object_id: str, object_type: str = "network", action: str = "access_as_shared"
    ) -> str:
        return str(
            _ok(client.post("/rbac-policies", json=_rbac(object_id, "bob", object_type, action)), 201)["rbac_policy"][
                "id"
            ]
        )

    for prefix, owner, cidr in (
        ("a_granted", alice, "10.5.0.0/24"),
        ("a_revoked", alice, "10.6.0.0/24"),
        ("ext_bob", admin, "198.51.100.0/26"),
        ("ext_revoked", admin, "198.51.100.64/26"),
    ):
        ids[prefix] = create(owner, "networks", "network", name=prefix.replace("_", "-"))["id"]
        ids[prefix + "_sub"] = create(owner, "subnets", "subnet", network_id=ids[prefix], cidr=cidr)["id"]
    # (her network is on the host before bob's claims: its metadata port, hers, is made by her first claim)
    _ok(alice.post("/port-pools/claim", json={"claim": {"host": HOST, "network_id": ids["a_granted"]}}), 201)
    ids["a_granted_sg"] = create(alice, "security-groups", "security_group", name="a-granted-sg")["id"]
    ids["a_revoked_sg"] = create(alice, "security-groups", "security_group", name="a-revoked-sg")["id"]
    ids["a_grant"] = grant(alice, ids["a_granted"])
    ids["a_sg_grant"] = grant(alice, ids["a_granted_sg"], "security_group")
    grant(admin, ids["ext_bob"], action="access_as_external")
    for client, policy in (
        (alice, grant(alice, ids["a_revoked"])),
        (alice, grant(alice, ids["a_revoked_sg"], "security_group")),
        (admin, grant(admin, ids["ext_revoked"], action="access_as_external")),
    ):
        _ok(client.delete(f"/rbac-policies/{policy}"), 204)


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """alice's objects, bob's own and an admin's external network, on a server with alice, bob (members) and an
    admin; its pools do not refill on their own and its host is never declared dead during the table."""
    tmp: Path = tmp_path_factory.mktemp(f"isolation-{request.param}")
    config = pool_config(tmp, agent_down_time=3600)
    tokens = {"admin-token": {"project_id": "ops", "role": "admin"},
              "alice-token": {"project_id": "alice"}, "bob-token": {"project_id": "bob"}}  # fmt: skip
    config.tokens_file.write_text(json.dumps({"tokens": tokens}))
    store = Store(new_db_url(request.param, request, tmp))
    server = RunningServer.start(config, store)
    metadata = RunningMetadata.start(MetadataApp(store, SECRET, Settings(), poll_interval=0.05))
    users = {name: httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": f"{name}-token"}, timeout=30)
             for name in ("admin", "alice", "bob")}  # fmt: skip
    w = World(users, httpx.Client(base_url=metadata.url, timeout=10))
    try:
        _build(w, store)
        w.view, w.revision = w.alice_view(), w.current_revision()
        yield w
    finally:
        for client in (*users.values(), w.metadata):
            client.close()
        metadata.stop()
        server.stop()
        store.dispose()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bob_and_alices_objects(world: World, case: Case) -> None:
    w = world
    path, params, body = w.fill(case.path), w.fill(case.params), w.fill(case.body)
    if case.guest is not None:
        r = w.guest(case.method, path, *case.guest, body=body)
    else:
        r = w.users["bob"].request(case.method, path, params=params, json=body)
    # What the call left behind, taken before any check can fail, so that the next case starts from it.
    revision, w.revision = w.revision, w.current_revision()
    before, w.view = w.view, w.alice_view()

    assert r.status_code == case.status, r.text
    if case.status >= 400 and case.guest is None:
        check_error(r, case.status, str(case.type))
    if case.expect is not None:
        case.expect(w, r.json())
    # Nothing of alice's is named in the answer unless bob named it himself.
    asked = f"{path} {params} {body}"
    assert {p for p in w.private if p in r.text and p not in asked} == set(), r.text
    # A refusal or a read wrote nothing at all; whatever bob did, alice's view is what it was.
    if case.status >= 400 or case.method == "GET":
        assert w.revision == revision, f"the call wrote to the database: {r.text}"
    assert w.view == before
