"""Availability zones (Neutron's `availability_zone`, `network_availability_zone`, `router_availability_zone`): the
zone each host's agent reports, `GET /v2.0/availability_zones`, and the `availability_zone_hints` of networks and
routers with their computed `availability_zones`.

In Neutron a zone is where agents run: DHCP agents' zones serve networks, L3 agents' routers. Every cloudnet agent
realises both (its host's networks: bridge, DHCP, metadata; and their routers), so each host's zone is listed for
both resources; it is `available` while some host of the zone heart-beats (Neutron ML2/OVS: while an agent of it is
admin up; ML2/OVN: always), else `unavailable`.

What hints place: on OVN, a router's gateway chassis are only hosts of its hinted zones (northbound/
desired_routers.py, as Neutron's OVN L3 scheduler filters its candidates). The Linux dataplane has no scheduler to
steer: a host realises a network and its routers because an instance or a pool port of it is there, so hints are
recorded and validated only there. `availability_zones` says where a network or router is realised: the zones of the
hosts its ports (a router's: those of the networks it joins) are bound to.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import timedelta
from typing import Annotated, Any

from pydantic import AfterValidator, Field
from pydantic.json_schema import SkipJsonSchema
from sqlalchemy import Connection, select

from cloudnet.errors import BadRequest, InvalidInput, NotFound
from cloudnet.services import common
from cloudnet.services.context import Context
from cloudnet.store import tables as t
from cloudnet.store.db import Store, utcnow
from cloudnet.wire import zones

H, P = t.hosts, t.ports
RESOURCES = ("network", "router")
# Neutron's agent types for each resource: the sdk filters zones with `agent_type` (its `resource` query).
AGENT_TYPES = {"DHCP agent": "network", "L3 agent": "router"}
HINTS_MAX = 255  # the JSON text of a resource's hints at most (neutron-lib's AZ_HINTS_DB_LEN)
FILTERS = ("name", "resource", "state", "availability_zone", "agent_type")


def check_hints(value: Any) -> list[str]:
    """A create body's `availability_zone_hints`, checked as neutron-lib's validator does (a list of unique strings
    whose JSON text fits its column): bounded before the zones are looked up."""
    if not isinstance(value, list):
        raise ValueError(f"'{str(value)[:64]}' is not a list")
    if len(value) > HINTS_MAX:  # (each at least '""': too many before looking at them)
        raise InvalidInput("Too many availability_zone_hints specified")
    for item in value:
        if not isinstance(item, str):
            raise ValueError(f"'{str(item)[:64]}' is not a valid string")
    dups = sorted({v for v in value if value.count(v) > 1})
    if dups:
        raise ValueError(f"Duplicate items in the list: '{', '.join(dups)[:255]}'")
    if len(json.dumps(value)) > HINTS_MAX:
        raise InvalidInput("Too many availability_zone_hints specified")
    return value


# The attribute of a create body (any JSON read, then checked: Neutron's words for each fault).
Hints = Annotated[Any, Field(default_factory=list, json_schema_extra={"type": "array", "items": {"type": "string"}}),
                  AfterValidator(check_hints)]  # fmt: skip
# The same in an update body: there only to be refused by name (not in the OpenAPI document: not updatable).
ReadOnly = SkipJsonSchema[Any]


def read_only(given: set[str]) -> None:
    """Hints are given at create only (allow_put False): Neutron's 400 for a change."""
    if "availability_zone_hints" in given:
        raise BadRequest("Cannot update read-only attribute availability_zone_hints")


def require_known(conn: Connection, hints: list[str]) -> None:
    """Every hinted zone is one some registered host reports (alive or not, as Neutron counts its agents), else
    Neutron's AvailabilityZoneNotFound (404)."""
    if not hints:
        return
    names = [h for h in hints if zones.valid(h)]  # (no host is in another: not worth a query, and NULs are refused)
    known = set(conn.execute(select(H.c.availability_zone).distinct().where(H.c.availability_zone.in_(names)))
                .scalars())  # fmt: skip
    missing = [h for h in hints if h not in known]
    if missing:
        raise NotFound(f"AvailabilityZone {', '.join(missing)} could not be found.", type="AvailabilityZoneNotFound")


def list_zones(store: Store, ctx: Context, filters: dict[str, list[str]], down_time: float) -> list[dict[str, Any]]:
    """Every zone a host reports, once per resource, `available` while a host of it heart-beats; Neutron's filters
    (name, resource, state; and the agent filters the sdk sends: availability_zone, agent_type)."""
    del ctx  # (any authenticated caller: Neutron's get_availability_zone is every reader's)
    unknown = [name for name in filters if name not in FILTERS]
    if unknown:
        raise BadRequest(f"{unknown} is invalid attribute for filtering")
    cutoff = utcnow() - timedelta(seconds=down_time)
    state: dict[str, bool] = {}
    with store.read() as conn:
        for zone, beat in conn.execute(select(H.c.availability_zone, H.c.heartbeat_at)):
            state[zone] = state.get(zone, False) or beat.replace(tzinfo=None) >= cutoff
    names = set(filters.get("name", [])) | set(filters.get("availability_zone", []))
    resources = set(filters.get("resource", [])) | {AGENT_TYPES.get(a, a) for a in filters.get("agent_type", [])}
    states = set(filters.get("state", []))
    out = []
    for zone in sorted(state):
        for resource in RESOURCES:
            item = {"name": zone, "resource": resource, "state": "available" if state[zone] else "unavailable"}
            if (not names or zone in names) and (not resources or resource in resources) and (
                    not states or item["state"] in states):  # fmt: skip
                out.append(item)
    return out


def network_zones(conn: Connection, network_ids: list[str]) -> dict[str, list[str]]:
    """Each network's zones: those of the hosts its ports are bound to (where its bridge, DHCP and metadata run)."""
    found: dict[str, set[str]] = defaultdict(set)
    for chunk in common.chunks(network_ids, 5000):
        rows = conn.execute(select(P.c.network_id, H.c.availability_zone).distinct()
                            .join(H, H.c.name == P.c.host_id).where(P.c.network_id.in_(chunk)))  # fmt: skip
        for network_id, zone in rows:
            found[network_id].add(zone)
    return {n: sorted(z) for n, z in found.items()}


def host_zones(conn: Connection) -> dict[str, str]:
    """Each registered host's zone (the northbound writer's view: a chassis is named after its host)."""
    return {name: zone for name, zone in conn.execute(select(H.c.name, H.c.availability_zone))}
