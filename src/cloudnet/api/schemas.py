"""JSON schemas of what the API answers (the OpenAPI document's response bodies, api/openapi.py).

Request bodies are described by the services' own validation models; these describe the representations the
services build. A member's attributes are all optional in the schema, since `?fields=` trims them, but each has
its type, nullable only where the service gives null.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

STR: Schema = {"type": "string"}
INT: Schema = {"type": "integer"}
BOOL: Schema = {"type": "boolean"}
OBJ: Schema = {"type": "object"}
STRS: Schema = {"type": "array", "items": STR}


def nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def obj(props: dict[str, Schema], required: tuple[str, ...] = (), extra: bool = True) -> Schema:
    out: Schema = {"type": "object", "properties": props, "additionalProperties": extra}
    if required:
        out["required"] = list(required)
    return out


def array(items: Schema) -> Schema:
    return {"type": "array", "items": items}


NSTR = nullable(STR)
NINT = nullable(INT)
STANDARD: dict[str, Schema] = {
    "id": STR, "name": STR, "description": STR, "project_id": STR, "tenant_id": STR, "created_at": STR,
    "updated_at": STR, "revision_number": INT, "tags": STRS,
}  # fmt: skip
FIXED_IP = obj({"subnet_id": STR, "ip_address": STR}, ("subnet_id", "ip_address"))
ROUTE = obj({"destination": STR, "nexthop": STR}, ("destination", "nexthop"))

NETWORK = obj({
    **STANDARD, "admin_state_up": BOOL, "shared": BOOL, "status": STR, "subnets": STRS, "mtu": INT,
    "router:external": BOOL, "provider:network_type": NSTR, "provider:physical_network": NSTR,
    "provider:segmentation_id": NINT, "port_security_enabled": BOOL, "availability_zone_hints": STRS,
    "availability_zones": STRS, "ipv4_address_scope": NSTR, "ipv6_address_scope": NSTR, "is_default": BOOL,
    "l2_adjacency": BOOL, "config": OBJ, "cloudnet:routes": STRS, "qos_policy_id": NSTR,
})  # fmt: skip
SUBNET = obj({
    **STANDARD, "network_id": STR, "ip_version": {"enum": [4, 6]}, "cidr": STR, "gateway_ip": NSTR,
    "allocation_pools": array(obj({"start": STR, "end": STR}, ("start", "end"))), "dns_nameservers": STRS,
    "host_routes": array(ROUTE), "enable_dhcp": BOOL, "ipv6_ra_mode": NSTR, "ipv6_address_mode": NSTR,
    "subnetpool_id": NSTR, "service_types": STRS,
})  # fmt: skip
SUBNETPOOL = obj({
    **STANDARD, "ip_version": {"enum": [4, 6]}, "prefixes": STRS, "min_prefixlen": INT, "max_prefixlen": INT,
    "default_prefixlen": INT, "default_quota": NINT, "address_scope_id": NSTR, "shared": BOOL, "is_default": BOOL,
})  # fmt: skip
ADDRESS_SCOPE = obj({**{k: v for k, v in STANDARD.items() if k != "tags"}, "ip_version": {"enum": [4, 6]},
                     "shared": BOOL})  # fmt: skip
PORT = obj({
    **STANDARD, "network_id": STR, "mac_address": STR, "admin_state_up": BOOL,
    "status": {"enum": ["ACTIVE", "DOWN", "BUILD", "ERROR"]}, "device_id": STR, "device_owner": STR,
    "fixed_ips": array(FIXED_IP), "security_groups": STRS, "port_security_enabled": BOOL,
    "allowed_address_pairs": array(obj({"ip_address": STR, "mac_address": STR}, ("ip_address",))),
    "extra_dhcp_opts": array(OBJ), "binding:vnic_type": STR, "binding:host_id": STR, "binding:profile": OBJ,
    "binding:vif_type": STR, "binding:vif_details": OBJ,
    "trunk_details": obj({"trunk_id": STR, "sub_ports": array(OBJ)}, ("trunk_id", "sub_ports")),
})  # fmt: skip
SUBPORT = obj({"port_id": STR, "segmentation_type": STR, "segmentation_id": INT},
              ("port_id", "segmentation_type", "segmentation_id"))  # fmt: skip
TRUNK = obj({**STANDARD, "port_id": STR, "admin_state_up": BOOL, "sub_ports": array(SUBPORT),
             "status": {"enum": ["ACTIVE", "DOWN", "BUILD", "DEGRADED", "ERROR"]}})  # fmt: skip
GATEWAY = obj({"network_id": STR, "enable_snat": BOOL, "external_fixed_ips": array(FIXED_IP)}, ("network_id",))
ROUTER = obj({
    **STANDARD, "admin_state_up": BOOL, "status": STR, "external_gateway_info": nullable(GATEWAY),
    "routes": array(ROUTE), "distributed": BOOL, "ha": BOOL, "availability_zone_hints": STRS,
    "availability_zones": STRS, "flavor_id": NSTR,
})  # fmt: skip
RULE = obj({
    **STANDARD, "security_group_id": STR, "direction": {"enum": ["ingress", "egress"]},
    "ethertype": {"enum": ["IPv4", "IPv6"]}, "protocol": NSTR, "port_range_min": NINT, "port_range_max": NINT,
    "remote_ip_prefix": NSTR, "remote_group_id": NSTR, "remote_address_group_id": NSTR, "normalized_cidr": NSTR,
    "belongs_to_default_sg": nullable(BOOL),
})  # fmt: skip
SECURITY_GROUP = obj({**STANDARD, "stateful": BOOL, "shared": BOOL, "security_group_rules": array(RULE)})
INSTANCE = obj({
    **STANDARD, "hostname": NSTR, "host": NSTR, "netns": NSTR, "status": STR, "metadata": OBJ,
    "ssh_keys": array(OBJ), "nets": array(OBJ), "ports": array(OBJ), "metadata_tokens": STR,
})  # fmt: skip
HOST = obj({
    "name": STR, "agent_version": STR, "availability_zone": STR, "heartbeat_at": NSTR, "alive": BOOL,
    "created_at": STR, "updated_at": STR, "report": OBJ,
}, ("name",))  # fmt: skip
# (nothing required: `?fields=` picks what a listing shows, as for every resource)
AVAILABILITY_ZONE = obj({"name": STR, "resource": {"enum": ["network", "router"]},
                         "state": {"enum": ["available", "unavailable"]}})  # fmt: skip
# A router's gateway chassis on OVN and whether its gateway can fail over (northbound/gateway_ha.py).
GATEWAY_CHASSIS = obj({
    "router_id": STR, "chassis": array(obj({"host": STR, "priority": INT, "availability_zone": NSTR},
                                           ("host", "priority"))),
    "availability_zone_hints": STRS, "reference_chassis": STRS, "failover": BOOL, "reason": STR,
}, ("router_id", "chassis", "reference_chassis", "failover", "reason"))  # fmt: skip
PORT_POOL = obj({"id": STR, "host": STR, "project_id": STR, "network_id": STR}, ("id",))
FORWARD_PORT = obj({"description": STR, "protocol": STR, "listen_port": STR, "target_port": STR,
                    "target_address": STR})  # fmt: skip
FORWARD = obj({
    "id": STR, "network_id": STR, "network": STR, "location": STR, "project_id": STR, "listen_address": STR,
    "description": STR, "config": {"type": "object", "additionalProperties": STR}, "ports": array(FORWARD_PORT),
    "created_at": STR, "updated_at": STR, "revision_number": INT,
}, ("id", "listen_address"))  # fmt: skip
EVENT = obj({"revision": INT, "resource": STR, "resource_id": STR, "operation": STR, "project_id": NSTR,
             "created_at": STR, "type": STR, "request_id": NSTR, "detail": NSTR},
            ("revision", "resource", "resource_id", "operation", "type"))  # fmt: skip
QUOTA = {"type": "object", "additionalProperties": INT}
QUOTA_DETAILS = {"type": "object", "additionalProperties": obj({"limit": INT, "used": INT, "reserved": INT})}
PROJECT = obj({"id": STR, "name": STR, "domain_id": STR, "enabled": BOOL}, ("id",))
EXTENSION = obj({"alias": STR, "name": STR, "description": STR, "updated": STR, "links": array(OBJ)},
                ("alias", "name", "description", "updated", "links"), extra=False)  # fmt: skip
LINKS = array(obj({"rel": STR, "href": STR}, ("rel", "href"), extra=False))
VERSION = obj({"id": STR, "status": STR, "links": array(OBJ)}, ("id", "status"))
INTERFACE_INFO = obj({"id": STR, "tenant_id": STR, "project_id": STR, "port_id": STR, "network_id": STR,
                      "subnet_id": STR, "subnet_ids": STRS}, ("id", "port_id", "subnet_id"))  # fmt: skip
PORT_DETAILS = obj({"name": STR, "network_id": STR, "mac_address": STR, "admin_state_up": BOOL, "status": STR,
                    "device_id": STR, "device_owner": STR})  # fmt: skip
PORT_FORWARDING = obj({
    "id": STR, "floatingip_id": STR, "protocol": STR, "internal_ip_address": STR, "internal_port_id": NSTR,
    "internal_port": NINT, "internal_port_range": NSTR, "external_port": NINT, "external_port_range": NSTR,
    "description": STR,
})  # fmt: skip
FLOATINGIP = obj({
    **STANDARD, "floating_ip_address": STR, "floating_network_id": NSTR, "router_id": NSTR, "port_id": NSTR,
    "fixed_ip_address": NSTR, "status": {"enum": ["ACTIVE", "DOWN", "ERROR"]}, "port_details": nullable(PORT_DETAILS),
    "port_forwardings": array(PORT_FORWARDING),
})  # fmt: skip
# Keystone's face (api/keystone.py): its token, its projects and its own error body.
KEYSTONE_PROJECT = obj({"id": STR, "name": STR, "domain_id": STR, "enabled": BOOL, "description": STR,
                        "parent_id": STR, "is_domain": BOOL, "tags": STRS, "options": OBJ, "links": OBJ},
                       ("id", "name"))  # fmt: skip
KEYSTONE_PROJECTS = obj({"projects": array(KEYSTONE_PROJECT), "links": OBJ}, ("projects",))
NAMED = obj({"id": STR, "name": STR}, ("id", "name"))
TOKEN = obj({
    "methods": STRS, "audit_ids": STRS, "issued_at": STR, "expires_at": STR,
    "user": obj({"id": STR, "name": STR, "domain": NAMED, "password_expires_at": NSTR}, ("id", "name")),
    "project": obj({"id": STR, "name": STR, "domain": NAMED}, ("id", "name")), "is_domain": BOOL,
    "roles": array(NAMED), "catalog": array(obj({"id": STR, "type": STR, "name": STR, "endpoints": array(OBJ)},
                                                ("type", "endpoints"))),
}, ("methods", "expires_at", "user"))  # fmt: skip
KEYSTONE_ERROR = obj({"error": obj({"code": INT, "title": STR, "message": STR}, ("code", "title", "message"))},
                     ("error",))  # fmt: skip
ERROR = obj({"NeutronError": obj({"type": STR, "message": STR, "detail": STR}, ("type", "message", "detail"))},
            ("NeutronError",))  # fmt: skip

# QoS (services/qos/): a policy with its rules, each rule type's own attributes.
QOS_RULE = obj({"id": STR, "type": STR, "qos_policy_id": STR, "max_kbps": INT, "max_burst_kbps": INT,
                "direction": {"enum": ["egress", "ingress"]}, "dscp_mark": INT, "min_kbps": INT})  # fmt: skip
QOS_POLICY = obj({**STANDARD, "shared": BOOL, "is_default": BOOL, "rules": array(QOS_RULE)})
QOS_RULE_TYPE = obj({"type": STR, "drivers": array(obj({"name": STR, "supported_parameters": array(OBJ)}))},
                    ("type",))  # fmt: skip

# The Neutron-style members, by body key.
RBAC_POLICY = obj({"id": STR, "project_id": STR, "tenant_id": STR, "object_type": STR, "object_id": STR,
                   "action": STR, "target_tenant": STR})  # fmt: skip
MEMBERS: dict[str, Schema] = {
    "network": NETWORK, "subnet": SUBNET, "port": PORT, "router": ROUTER, "security_group": SECURITY_GROUP,
    "security_group_rule": RULE, "instance": INSTANCE, "floatingip": FLOATINGIP, "trunk": TRUNK,
    "subnetpool": SUBNETPOOL, "address_scope": ADDRESS_SCOPE, "policy": QOS_POLICY, "rbac_policy": RBAC_POLICY,
}  # fmt: skip


def envelope(key: str, schema: Schema) -> Schema:
    return obj({key: schema}, (key,))


def listing(plural: str, member: Schema, links: bool = True) -> Schema:
    props: dict[str, Schema] = {plural: array(member)}
    if links:
        props[f"{plural}_links"] = LINKS
    return obj(props, (plural,))
