"""The OpenAPI 3.1 document of the whole API, served at /openapi.json and /v2.0/openapi.json.

Built from the application's own route table, so it lists exactly the routes served; each operation's request
body comes from the model its service validates it with (services/*: the `Body` models), its answers from
api/schemas.py. A route this table does not know (a new one) is still listed, with loose bodies and marked
`x-cloudnet-undocumented`, which tests/api/test_openapi.py refuses. Served without authentication, like version
discovery: it describes the API and holds no data.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cloudnet import __version__
from cloudnet.api import qos, resources, schemas
from cloudnet.api.guard import PUBLIC_PATHS
from cloudnet.api.instance_metadata import CONFIG_DRIVE, ISO_TYPE
from cloudnet.api.neutron import JSON
from cloudnet.api.schemas import BOOL, INT, OBJ, STR, STRS, Schema, array, envelope, listing, obj
from cloudnet.pki.crl import MEDIA_TYPE as CRL_TYPE
from cloudnet.services import instance_metadata, instances, tags
from cloudnet.services.forwards import floating_ips, port_forwardings
from cloudnet.services.hosts import host_join, hosts
from cloudnet.services.networks import address_scopes, networks, routers, subnet_specs, subnetpools
from cloudnet.services.pools import pools
from cloudnet.services.ports import port_specs, trunks
from cloudnet.services.qos import policies as qos_policies
from cloudnet.services.qos import rules as qos_rules
from cloudnet.services.rbac import policies as rbac_policies
from cloudnet.services.security import security_group_rules, security_groups

PATHS = ("/openapi.json", "/v2.0/openapi.json")
UNDOCUMENTED = "x-cloudnet-undocumented"


@dataclass(frozen=True)
class Op:
    status: int  # the success status
    response: Schema | None  # None: no body
    request: Schema | type[BaseModel] | None = None
    query: tuple[tuple[str, Schema], ...] = ()
    keystone: bool = False  # errors in Keystone's body (api/keystone.py), else Neutron's
    media: str = "application/json"  # the success body's type


LIST_QUERY = (("fields", STR), ("limit", {"type": "integer", "minimum": 0}), ("marker", STR), ("sort_key", STR),
              ("sort_dir", {"enum": ["asc", "desc"]}), ("page_reverse", BOOL))  # fmt: skip
FIELDS = (("fields", STR),)
AZ_QUERY = (("fields", STR), ("name", STR), ("resource", {"enum": ["network", "router"]}),
            ("state", {"enum": ["available", "unavailable"]}))  # fmt: skip
MODELS: dict[str, tuple[type[BaseModel], type[BaseModel] | None]] = {
    "network": (networks.NetworkCreate, networks.NetworkUpdate),
    "subnet": (subnet_specs.SubnetCreate, subnet_specs.SubnetUpdate),
    "port": (port_specs.PortCreate, port_specs.PortUpdate),
    "router": (routers.RouterCreate, routers.RouterUpdate),
    "security_group": (security_groups.GroupCreate, security_groups.GroupUpdate),
    "security_group_rule": (security_group_rules.RuleCreate, None),
    "instance": (instances.InstanceCreate, instances.InstanceUpdate),
    "floatingip": (floating_ips.FloatingIpCreate, floating_ips.FloatingIpUpdate),
    "trunk": (trunks.TrunkCreate, trunks.TrunkUpdate),
    "subnetpool": (subnetpools.PoolCreate, subnetpools.PoolUpdate),
    "address_scope": (address_scopes.ScopeCreate, address_scopes.ScopeUpdate),
    "policy": (qos_policies.PolicyCreate, qos_policies.PolicyUpdate),
    "rbac_policy": (rbac_policies.PolicyCreate, rbac_policies.PolicyUpdate),
}
# Request models the table refers to besides MODELS (each becomes a component schema).
OTHER_MODELS: tuple[type[BaseModel], ...] = (routers.InterfaceRequest, pools.PoolUpdate, pools.ClaimSpec,
                                             pools.ReleaseSpec, hosts.HostReport, hosts.PortStatusReport,
                                             instance_metadata.MetadataItem,
                                             port_forwardings.PortForwardingBody, host_join.TokenRequest,
                                             host_join.JoinRequest, host_join.RenewRequest,
                                             subnetpools.PrefixOps)  # fmt: skip
JOIN_TOKEN = obj({"token": STR, "host": STR, "expires_at": STR}, ("token", "host", "expires_at"))
JOINED = obj({"host": STR, "certificate": STR, "ca": STR, "ovn_sb": {"type": ["string", "null"]},
              "metadata_listen": STR, "metadata_secret": {"type": ["string", "null"]}},
             ("host", "certificate", "ca"))  # fmt: skip
RENEWED = obj({"host": STR, "certificate": STR}, ("host", "certificate"))
REMOVED = obj({"name": STR, "certificates_revoked": INT, "pool_ports_freed": INT}, ("name",))
FORWARD_BODY = obj({
    "listen_address": STR, "description": STR, "config": {"type": "object", "additionalProperties": STR},
    "ports": array(obj({"description": STR, "protocol": {"enum": ["tcp", "udp"]}, "listen_port": STR,
                        "target_port": STR, "target_address": STR}, ("protocol", "listen_port", "target_address"),
                       extra=False)),
}, extra=False)  # fmt: skip
QUOTA_BODY = envelope("quota", {"type": "object", "properties": {"check_limit": BOOL},
                                "additionalProperties": INT})  # fmt: skip
PREFIXES = obj({"prefixes": STRS}, ("prefixes",))
ROUTES_BODY = envelope("router", obj({"routes": array(schemas.ROUTE)}, ("routes",), extra=False))
NAME_OR_ID = obj({"id": STR, "name": STR, "domain": OBJ})
# Keystone's POST /v3/auth/tokens (the password and token methods; project scope or "unscoped").
AUTH_BODY = envelope("auth", obj({
    "identity": obj({
        "methods": {"type": "array", "minItems": 1, "items": {"enum": ["password", "token"]}},
        "password": envelope("user", obj({"id": STR, "name": STR, "password": STR, "domain": OBJ})),
        "token": obj({"id": STR}, ("id",)),
    }, ("methods",)),
    "scope": {"anyOf": [{"const": "unscoped"}, obj({"project": NAME_OR_ID})]},
}, ("identity",)))  # fmt: skip
VERSIONS = obj({"versions": array(schemas.VERSION)}, ("versions",))
V2_ROOT = obj({"version": schemas.VERSION, "resources": array(OBJ)}, ("version",))


def _wrapped(key: str, model: type[BaseModel]) -> Schema:
    return {"type": "object", "properties": {key: {"$ref": _ref(model)}}, "required": [key]}


def _ref(model: type[BaseModel]) -> str:
    return f"#/components/schemas/{model.__name__}"


def _table() -> dict[tuple[str, str], Op]:
    ops: dict[tuple[str, str], Op] = {}
    for res in [*resources.RESOURCES, qos.RESOURCE]:
        if res.member not in MODELS or res.member not in schemas.MEMBERS:
            continue  # a resource added without its schemas: listed as undocumented
        base, member = f"/v2.0/{res.collection}", schemas.MEMBERS[res.member]
        create, update = MODELS[res.member]
        one = {"type": "object", "properties": {res.member: {"$ref": _ref(create)}}, "required": [res.member]}
        bulk = {
            "type": "object",
            "required": [res.plural],
            "properties": {res.plural: {"type": "array", "minItems": 1, "items": {"$ref": _ref(create)}}},
        }
        ops[("GET", base)] = Op(200, listing(res.plural, member), query=LIST_QUERY)
        ops[("POST", base)] = Op(201, {"oneOf": [envelope(res.member, member), listing(res.plural, member, False)]},
                                 {"oneOf": [one, bulk]})  # fmt: skip
        ops[("GET", base + "/{item_id}")] = Op(200, envelope(res.member, member), query=FIELDS)
        ops[("DELETE", base + "/{item_id}")] = Op(204, None)
        if update is not None:
            ops[("PUT", base + "/{item_id}")] = Op(200, envelope(res.member, member), _wrapped(res.member, update))
    for action in ("add_router_interface", "remove_router_interface"):
        ops[("PUT", f"/v2.0/routers/{{router_id}}/{action}")] = Op(200, schemas.INTERFACE_INFO,
                                                                   routers.InterfaceRequest)  # fmt: skip
    pool, port = envelope("port_pool", schemas.PORT_POOL), envelope("port", schemas.PORT)
    tag_list = obj({"tags": STRS}, ("tags",))
    forward, fwd_base = envelope("forward", schemas.FORWARD), "/v2.0/networks/{network}/forwards"
    item = "/v2.0/instances/{instance_id}/metadata/{key}"
    quota = "/v2.0/quotas/{project_id}"
    pf_base, pf = (
        "/v2.0/floatingips/{floatingip_id}/port_forwardings",
        envelope("port_forwarding", schemas.PORT_FORWARDING),
    )
    pf_body = _wrapped("port_forwarding", port_forwardings.PortForwardingBody)
    router = envelope("router", schemas.ROUTER)
    token = envelope("token", schemas.TOKEN)
    subports = obj({"sub_ports": array(OBJ)}, ("sub_ports",))
    ops.update(
        {
            ("PUT", "/v2.0/trunks/{trunk_id}/add_subports"): Op(200, schemas.TRUNK, subports),
            ("PUT", "/v2.0/trunks/{trunk_id}/remove_subports"): Op(200, schemas.TRUNK, subports),
            ("GET", "/v2.0/trunks/{trunk_id}/get_subports"): Op(
                200, obj({"sub_ports": array(schemas.SUBPORT)}, ("sub_ports",))
            ),
        }
    )
    ops.update({
        ("GET", pf_base): Op(200, listing("port_forwardings", schemas.PORT_FORWARDING, False), query=LIST_QUERY),
        ("POST", pf_base): Op(201, pf, pf_body),
        ("GET", pf_base + "/{pf_id}"): Op(200, pf, query=FIELDS),
        ("PUT", pf_base + "/{pf_id}"): Op(200, pf, pf_body),
        ("DELETE", pf_base + "/{pf_id}"): Op(204, None),
        ("PUT", "/v2.0/subnetpools/{pool_id}/add_prefixes"): Op(200, PREFIXES, subnetpools.PrefixOps),
        ("PUT", "/v2.0/subnetpools/{pool_id}/remove_prefixes"): Op(200, PREFIXES, subnetpools.PrefixOps),
        ("PUT", "/v2.0/routers/{router_id}/add_extraroutes"): Op(200, router, ROUTES_BODY),
        ("PUT", "/v2.0/routers/{router_id}/remove_extraroutes"): Op(200, router, ROUTES_BODY),
        ("GET", "/v2.0/availability_zones"): Op(200, listing("availability_zones", schemas.AVAILABILITY_ZONE, False),
                                                query=AZ_QUERY),
        ("GET", "/v2.0/routers/{router_id}/gateway_chassis"): Op(200, envelope("gateway_chassis",
                                                                                 schemas.GATEWAY_CHASSIS)),
        ("POST", "/v2.0/{collection}/{resource_id}/tags"): Op(201, tag_list, tag_list),
        ("POST", "/v3/auth/tokens"): Op(201, token, AUTH_BODY, keystone=True),
        ("GET", "/v3/auth/tokens"): Op(200, token, keystone=True),
        ("GET", "/v3/auth/projects"): Op(200, schemas.KEYSTONE_PROJECTS, keystone=True),
        ("GET", "/v3/users/{user_id}/projects"): Op(200, schemas.KEYSTONE_PROJECTS, keystone=True),
        ("GET", "/"): Op(200, VERSIONS), ("GET", "/v2.0"): Op(200, V2_ROOT), ("GET", "/v2.0/"): Op(200, V2_ROOT),
        ("GET", "/openapi.json"): Op(200, OBJ), ("GET", "/v2.0/openapi.json"): Op(200, OBJ),
        ("GET", "/v2.0/port-pools"): Op(200, listing("port_pools", schemas.PORT_POOL, False)),
        ("GET", "/v2.0/port-pools/{pool_id}"): Op(200, pool),
        ("PUT", "/v2.0/port-pools/{pool_id}"): Op(200, pool, _wrapped("port_pool", pools.PoolUpdate)),
        ("POST", "/v2.0/port-pools/claim"): Op(201, port, _wrapped("claim", pools.ClaimSpec)),
        ("POST", "/v2.0/port-pools/release"): Op(200, envelope("release", OBJ), pools.ReleaseSpec),
        ("GET", "/v2.0/extensions"): Op(200, listing("extensions", schemas.EXTENSION, False)),
        ("GET", "/v2.0/extensions/{alias}"): Op(200, envelope("extension", schemas.EXTENSION)),
        ("GET", "/v2.0/{collection}/{resource_id}/tags"): Op(200, tag_list),
        ("PUT", "/v2.0/{collection}/{resource_id}/tags"): Op(200, tag_list, tag_list),
        ("DELETE", "/v2.0/{collection}/{resource_id}/tags"): Op(204, None),
        ("GET", "/v2.0/{collection}/{resource_id}/tags/{tag}"): Op(204, None),
        ("PUT", "/v2.0/{collection}/{resource_id}/tags/{tag}"): Op(201, None),
        ("DELETE", "/v2.0/{collection}/{resource_id}/tags/{tag}"): Op(204, None),
        ("GET", "/v2.0/hosts"): Op(200, listing("hosts", schemas.HOST, False)),
        ("GET", "/v2.0/hosts/{name}"): Op(200, envelope("host", schemas.HOST)),
        ("PUT", "/v2.0/hosts/{name}"): Op(200, envelope("host", schemas.HOST), _wrapped("host", hosts.HostReport)),
        ("DELETE", "/v2.0/hosts/{name}"): Op(204, None),
        ("POST", "/v2.0/hosts/{name}/check"): Op(202, envelope("check", OBJ)),
        ("GET", "/v2.0/hosts/{name}/state"): Op(200, obj({"revision": INT, "host": STR}, ("revision",))),
        ("PUT", "/v2.0/hosts/{name}/ports"): Op(200, OBJ, hosts.PortStatusReport),
        ("POST", "/v2.0/hosts/{name}/join-tokens"): Op(201, envelope("join_token", JOIN_TOKEN),
                                                       _wrapped("join_token", host_join.TokenRequest)),
        ("POST", "/v2.0/hosts/{name}/certificates"): Op(201, envelope("certificate", RENEWED),
                                                         _wrapped("certificate", host_join.RenewRequest)),
        ("POST", "/v2.0/hosts/{name}/remove"): Op(200, envelope("host", REMOVED)),
        ("GET", "/v2.0/host-join/ca"): Op(200, STR, media="application/x-pem-file"),
        ("GET", "/v2.0/host-join/crl"): Op(200, {"type": "string", "contentMediaType": CRL_TYPE}, media=CRL_TYPE),
        ("GET", "/metrics"): Op(200, STR, media="text/plain; version=0.0.4"),  # (api/metrics.py: admin only)
        ("POST", "/v2.0/host-join"): Op(201, envelope("join", JOINED), _wrapped("join", host_join.JoinRequest)),
        ("GET", fwd_base): Op(200, listing("forwards", schemas.FORWARD, False)),
        ("POST", fwd_base): Op(201, forward, FORWARD_BODY),
        ("GET", fwd_base + "/{listen_address}"): Op(200, forward),
        ("PUT", fwd_base + "/{listen_address}"): Op(200, forward, FORWARD_BODY),
        ("PATCH", fwd_base + "/{listen_address}"): Op(200, forward, FORWARD_BODY),
        ("DELETE", fwd_base + "/{listen_address}"): Op(204, None),
        ("GET", "/v2.0/instances/{instance_id}/metadata"): Op(200, OBJ),
        ("GET", item): Op(200, envelope("metadata_item", OBJ)),
        ("PUT", item): Op(200, OBJ, instance_metadata.MetadataItem),
        ("DELETE", item): Op(204, None),
        ("GET", CONFIG_DRIVE): Op(200, {"type": "string", "contentMediaType": ISO_TYPE}, media=ISO_TYPE),
        ("GET", "/v2.0/quotas"): Op(200, listing("quotas", OBJ, False)),
        ("GET", quota): Op(200, envelope("quota", schemas.QUOTA)),
        ("GET", quota + "/details"): Op(200, envelope("quota", schemas.QUOTA_DETAILS)),
        ("GET", quota + "/default"): Op(200, envelope("quota", schemas.QUOTA)),
        ("PUT", quota): Op(200, envelope("quota", schemas.QUOTA), QUOTA_BODY),
        ("DELETE", quota): Op(204, None),
        ("GET", "/v3"): Op(200, envelope("version", schemas.VERSION)),
        ("GET", "/v3/"): Op(200, envelope("version", schemas.VERSION)),
        ("GET", "/v3/projects"): Op(200, obj({"projects": array(schemas.PROJECT), "links": OBJ}, ("projects",))),
        ("GET", "/v3/projects/{project_id}"): Op(200, envelope("project", schemas.PROJECT)),
        ("GET", "/v2.0/events"): Op(200, obj({"events": array(schemas.EVENT), "revision": INT}, ("events",)),
                                    query=(("since", {"type": "integer", "minimum": 0}),
                                           ("limit", {"type": "integer", "minimum": 1}),
                                           ("timeout", {"type": "number", "minimum": 0}),
                                           ("type", {"type": "array", "items": {"type": "string"}, "maxItems": 16}),
                                           ("project_id", {"type": "string"}))),
    })  # fmt: skip
    ops.update(_qos_rules())
    return ops


def _qos_rules() -> dict[tuple[str, str], Op]:
    """Each rule type's sub-resource of a policy (services/qos/rules.py: its attributes and their values), and the
    rule types."""
    ops: dict[tuple[str, str], Op] = {}
    for kind in qos_rules.KINDS.values():
        base = f"/v2.0/qos/policies/{{policy_id}}/{kind.collection}"
        attrs = {
            name: {"enum": list(spec[1])}
            if spec[0] == "values"
            else {"type": "integer", "minimum": spec[1], "maximum": spec[2]}
            for name, spec in kind.params.items()
        }
        required = tuple(name for name in kind.params if name not in kind.defaults)
        rule = envelope(kind.member, schemas.QOS_RULE)
        ops.update({
            ("GET", base): Op(200, listing(kind.collection, schemas.QOS_RULE), query=LIST_QUERY),
            ("POST", base): Op(201, rule, envelope(kind.member, obj(attrs, required, extra=False))),
            ("GET", base + "/{rule_id}"): Op(200, rule, query=FIELDS),
            ("PUT", base + "/{rule_id}"): Op(200, rule, envelope(kind.member, obj(attrs, extra=False))),
            ("DELETE", base + "/{rule_id}"): Op(204, None),
        })  # fmt: skip
    ops[("GET", "/v2.0/qos/rule-types")] = Op(200, listing("rule_types", schemas.QOS_RULE_TYPE, False))
    ops[("GET", "/v2.0/qos/rule-types/{name}")] = Op(200, envelope("rule_type", schemas.QOS_RULE_TYPE))
    return ops


# Path parameters with a fixed set of values (the rest are free strings).
PATH_ENUMS: dict[str, Schema] = {"collection": {"enum": sorted(tags.TABLES)}}


def _path(route: Route) -> str:
    return re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)


def _operation(method: str, path: str, op: Op | None, name: str) -> dict[str, Any]:
    params: list[dict[str, Any]] = [
        {"name": p, "in": "path", "required": True, "schema": PATH_ENUMS.get(p, {"type": "string", "minLength": 1})}
        for p in re.findall(r"\{(\w+)\}", path)
    ]
    out: dict[str, Any] = {"operationId": f"{method.lower()}_{name}"}
    if op is None:  # a route this table does not know
        out[UNDOCUMENTED] = True
        op = Op(200, OBJ, OBJ if method in ("POST", "PUT", "PATCH") else None)
    params += [{"name": n, "in": "query", "required": False, "schema": s} for n, s in op.query]
    if params:
        out["parameters"] = params
    if op.request is not None:
        body = {"$ref": _ref(op.request)} if isinstance(op.request, type) else op.request
        out["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    ok: dict[str, Any] = {"description": "success"}
    if op.response is not None:
        ok["content"] = {op.media: {"schema": op.response}}
    error = {
        "description": "an error",
        "content": {"application/json": {"schema": schemas.KEYSTONE_ERROR if op.keystone else schemas.ERROR}},
    }
    out["responses"] = {str(op.status): ok, "4XX": error, "503": error}
    if path in PUBLIC_PATHS:
        out["security"] = []
    return out


def _models() -> dict[str, Schema]:
    """The request models' schemas, their nested models hoisted into components."""
    found: dict[str, Schema] = {}
    wanted = {m for pair in MODELS.values() for m in pair if m is not None} | set(OTHER_MODELS)
    for model in sorted(wanted, key=lambda m: m.__name__):
        schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
        found.update(schema.pop("$defs", {}))
        found[model.__name__] = schema
    return found


def document(routes: Iterable[BaseRoute]) -> dict[str, Any]:
    table = _table()
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        if not isinstance(route, Route):
            continue
        path = _path(route)
        for method in sorted((route.methods or set()) - {"HEAD"}):
            paths.setdefault(path, {})[method.lower()] = _operation(
                method, path, table.get((method, path)), route.name or "route"
            )
    return {
        "openapi": "3.1.0",
        "info": {"title": "cloudnet", "version": __version__,
                 "description": "Neutron v2.0-compatible networking API with cloudnet's extensions."},
        "paths": paths,
        "components": {
            "schemas": _models(),
            "securitySchemes": {"token": {"type": "apiKey", "in": "header", "name": "X-Auth-Token"}},
        },
        "security": [{"token": []}],
    }  # fmt: skip


async def serve(request: Request) -> Response:
    doc = getattr(request.app.state, "openapi", None)
    if doc is None:
        doc = request.app.state.openapi = document(request.app.routes)
    return JSON(doc)
