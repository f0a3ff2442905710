"""/v2.0/extensions: what this server implements, in Neutron's extension format.

Only what works is advertised: an extension whose API needs routes (REQUIRES) is listed only when the server
serves every one of them, so a client (openstacksdk's functional tests skip on what is not listed) never finds an
alias whose resource answers 404.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from cloudnet.api.deps import context
from cloudnet.api.neutron import JSON
from cloudnet.errors import NotFound

UPDATED = "2026-11-21T00:00:00-00:00"
EXTENSIONS = [
    ("binding", "Port Binding", "Expose port bindings of a virtual port to external application"),
    ("external-net", "Neutron external network", "Adds external network attribute to network resource."),
    ("provider", "Provider Network", "Expose mapping of virtual networks to physical networks"),
    ("router", "Neutron L3 Router", "Router abstraction for basic L3 forwarding between L2 networks"),
    # Floating IPs and their port forwardings: a face over the network forwards (services/forwards/floating_common.py).
    ("fip-port-details", "Floating IP Port Details Extension", "A floating IP shows its port's details (port_details)"),
    ("floating-ip-port-forwarding", "Floating IP Port Forwarding", "Port forwardings of a floating IP"),
    (
        "floating-ip-port-forwarding-description",
        "Floating IP Port Forwarding new attribute description",
        "Port forwardings have a description",
    ),
    (
        "floating-ip-port-forwarding-port-ranges",
        "Floating IP Port Forwarding support port ranges",
        "external_port_range and internal_port_range (a:b) in port forwardings",
    ),
    (
        "floating-ip-port-forwarding-detail",
        "Floating IP port forwarding detail",
        "The port forwardings a floating IP shows include their id and internal_port_id",
    ),
    (
        "expose-port-forwarding-in-fip",
        "Expose port forwarding in floating IP",
        "A floating IP shows its port forwardings (port_forwardings)",
    ),
    (
        "ext-gw-mode",
        "Neutron L3 Configurable external gateway mode",
        "Extension of the router's external gateway info to enable SNAT",
    ),
    ("extraroute", "Neutron Extra Route", "Extra routes configuration for L3 router"),
    (
        "extraroute-atomic",
        "Atomic add/remove extra routes",
        "Edit extra routes of a router on server side by atomic add/remove extra routes",
    ),
    ("trunk", "Trunk Extension", "Provides support for trunk ports"),
    ("trunk-details", "Trunk port details", "Expose trunk port details"),
    ("tag-creation", "Tag support on create", "Enables to specify tags on create"),
    ("security-group", "security-group", "The security groups extension."),
    (
        "rbac-policies",
        "RBAC Policies",
        "Allows creation and modification of policies that control tenant access to resources.",
    ),
    ("rbac-security-groups", "Add security_group type to network RBAC", "Add security_group type to network RBAC"),
    ("rbac-subnetpool", "Add subnetpool type to RBAC", "Add subnetpool type to RBAC"),
    ("rbac-address-scope", "Add address_scope type to RBAC", "Add address_scope type to RBAC"),
    ("port-security", "Port Security", "Provides port security"),
    ("allowed-address-pairs", "Allowed Address Pairs", "Provides allowed address pairs"),
    (
        "aap-reject-multicast",
        "Allowed address pairs reject multicast extension",
        "Reject multicast addresses in Allowed Address Pairs",
    ),
    ("stateful-security-group", "Stateful security group", "Indicates if the security group is stateful or not"),
    ("standard-attr-description", "standard-attr-description", "Extension to add descriptions to standard attributes"),
    (
        "standard-attr-revisions",
        "Resource revision numbers",
        "This extension will display the revision number of neutron resources.",
    ),
    (
        "standard-attr-timestamp",
        "Resource timestamps",
        "Adds created_at and updated_at fields to all Neutron resources.",
    ),
    (
        "standard-attr-tag",
        "Tag support for resources with standard attribute",
        "Enables to set tag on resources with standard attribute.",
    ),
    ("tag-ports-during-bulk-creation", "Tag Ports During Bulk Creation", "Allow to tag ports during bulk creation"),
    ("project-id", "project_id field enabled", "Extension that indicates that project_id field is enabled."),
    ("net-mtu", "Network MTU", "Provides MTU attribute for a network resource."),
    ("pagination", "Pagination support", "Extension that indicates that pagination is enabled."),
    ("quotas", "Quota management support", "Expose functions for quotas management per project"),
    ("quota_details", "Quota details management support", "Expose functions for quotas usage statistics per project"),
    (
        "quota-check-limit",
        "Quota engine limit check",
        "Support for checking the resource usage before applying a new quota limit",
    ),
    ("sorting", "Sorting support", "Extension that indicates that sorting is enabled."),
    ("fields", "Field selection", "Extension that indicates that the fields parameter is supported."),
    ("filter-validation", "Filter parameters validation", "Provides validation on filter parameters."),
    ("subnet_allocation", "Subnet Allocation", "Enables allocation of subnets from a subnet pool"),
    ("address-scope", "Address scope", "Address scopes extension."),
    ("default-subnetpools", "Default Subnetpools", "Provides ability to mark and use a subnetpool as the default."),
    (
        "subnetpool-prefix-ops",
        "Subnet Pool Prefix Operations",
        "Provides support for adjusting the prefix list of subnet pools",
    ),
    # QoS (services/qos/): enforced on the Linux dataplane by tc and nftables, on OVN by its QoS rows.
    ("qos", "Quality of Service", "The Quality of Service extension."),
    (
        "qos-bw-limit-direction",
        "Direction for QoS bandwidth limit rule",
        "Allow to configure QoS bandwidth limit rule with specific direction: ingress or egress",
    ),
    ("qos-default", "QoS default policy", "Expose the QoS default policy per project"),
    (
        "qos-rule-type-details",
        "Details of QoS rule types",
        "Expose details about QoS rule types supported by loaded backend drivers",
    ),
    # Hosts' zones (cloudnet agent --availability-zone) and hints on networks and routers: services/hosts/zones.py.
    ("availability_zone", "Availability Zone", "The availability zone extension."),
    (
        "availability_zone_filter",
        "Availability Zone Filter Extension",
        "Add filter parameters to AvailabilityZone resource",
    ),
    ("network_availability_zone", "Network Availability Zone", "Availability zone support for network."),
    ("router_availability_zone", "Router Availability Zone", "Availability zone support for router."),
    (
        "cloudnet-events",
        "cloudnet revision log",
        "GET /v2.0/events?since=N&timeout=S: changes after revision N, long-polled.",
    ),
    ("cloudnet-instances", "cloudnet instances", "/v2.0/instances: instances and the ports plugged into them."),
    ("cloudnet-hosts", "cloudnet hosts", "/v2.0/hosts: registered agents, their health and desired state."),
    (
        "cloudnet-forwards",
        "cloudnet network forwards",
        "/v2.0/networks/{network}/forwards: LXD-style network forwards (floating IPs, whole address or per port).",
    ),
    (
        "cloudnet-network-config",
        "cloudnet network config",
        "Network config map (ipv4.nat.address, ipv6.nat.address, user.*) and cloudnet:routes on external networks.",
    ),
    (
        "cloudnet-instance-metadata",
        "cloudnet instance metadata items",
        "/v2.0/instances/{id}/metadata[/{key}]: read, set and remove an instance's metadata keys.",
    ),
]


# Routes an extension stands for: in Neutron `router` brings floating IPs with routers.
REQUIRES: dict[str, tuple[str, ...]] = {
    "router": ("/v2.0/routers", "/v2.0/floatingips"),
    "ext-gw-mode": ("/v2.0/routers", "/v2.0/floatingips"),
    "trunk": ("/v2.0/trunks", "/v2.0/trunks/{trunk_id}/add_subports"),
    "trunk-details": ("/v2.0/trunks",),
    "subnet_allocation": ("/v2.0/subnetpools",),
    "address-scope": ("/v2.0/address-scopes",),
    "default-subnetpools": ("/v2.0/subnetpools",),
    "subnetpool-prefix-ops": ("/v2.0/subnetpools/{pool_id}/add_prefixes",),
    **{
        alias: ("/v2.0/qos/policies", "/v2.0/qos/rule-types")
        for alias in ("qos", "qos-bw-limit-direction", "qos-default", "qos-rule-type-details")
    },
    "availability_zone": ("/v2.0/availability_zones",),
    "availability_zone_filter": ("/v2.0/availability_zones",),
    "network_availability_zone": ("/v2.0/availability_zones",),
    "router_availability_zone": ("/v2.0/availability_zones", "/v2.0/routers"),
    "rbac-policies": ("/v2.0/rbac-policies",),
    "rbac-security-groups": ("/v2.0/rbac-policies",),
    "rbac-subnetpool": ("/v2.0/rbac-policies", "/v2.0/subnetpools"),
    "rbac-address-scope": ("/v2.0/rbac-policies", "/v2.0/address-scopes"),
}


def advertised(paths: set[str]) -> list[tuple[str, str, str]]:
    """The extensions whose routes are all among `paths` (the app's route table)."""
    return [e for e in EXTENSIONS if all(p in paths for p in REQUIRES.get(e[0], ()))]


def _served(request: Request) -> list[tuple[str, str, str]]:
    return advertised({getattr(route, "path", "") for route in request.app.routes})


def _ext(alias: str, name: str, description: str) -> dict[str, object]:
    return {"alias": alias, "name": name, "description": description, "updated": UPDATED, "links": []}


router = APIRouter()


@router.get("/v2.0/extensions")
async def list_extensions(request: Request) -> Response:
    context(request)  # authenticated, as all of /v2.0 is in Neutron
    return JSON({"extensions": [_ext(*e) for e in _served(request)]})


@router.get("/v2.0/extensions/{alias}")
async def show_extension(alias: str, request: Request) -> Response:
    context(request)
    for e in _served(request):
        if e[0] == alias:
            return JSON({"extension": _ext(*e)})
    raise NotFound(f"Extension with alias {alias} does not exist", type="ExtensionNotFound")
