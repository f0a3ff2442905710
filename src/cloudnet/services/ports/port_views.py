"""Reading ports: the API shape of a port, its related rows (fixed IPs, groups, pairs, tags) fetched for many
ports at once, and the list query's filters and column projection."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, and_, or_, select

from cloudnet.errors import InvalidInput
from cloudnet.services import common
from cloudnet.services.context import Context
from cloudnet.services.ports import trunks
from cloudnet.services.query import Attr, ListQuery, Page, fetch_page, to_bool
from cloudnet.services.security import address_pairs
from cloudnet.store import tables as t

P = t.ports
A = t.ip_allocations
PSG = t.port_security_groups


def _fixed_ips_filter(values: list[str]) -> Any:
    """`fixed_ips=ip_address=10.0.0.5`, `fixed_ips=subnet_id=X`, `fixed_ips=ip_address_substr=10.0.`."""
    by_key: dict[str, list[str]] = defaultdict(list)
    for v in values:
        key, sep, val = v.partition("=")
        if not sep or key not in ("ip_address", "subnet_id", "ip_address_substr"):
            raise InvalidInput(f"Invalid fixed_ips filter '{v}'")
        by_key[key].append(val)
    conds = []
    if "ip_address" in by_key:
        conds.append(A.c.ip_address.in_(by_key["ip_address"]))
    if "subnet_id" in by_key:
        conds.append(A.c.subnet_id.in_(by_key["subnet_id"]))
    if "ip_address_substr" in by_key:
        conds.append(or_(*[A.c.ip_address.contains(v, autoescape=True) for v in by_key["ip_address_substr"]]))
    return P.c.id.in_(select(A.c.port_id).where(and_(*conds)))


ATTRS: dict[str, Attr] = {
    **common.standard_attrs(P),
    "network_id": Attr(P.c.network_id),
    "mac_address": Attr(P.c.mac_address, convert=lambda v: v.lower()),
    "admin_state_up": Attr(P.c.admin_state_up, to_bool),
    "status": Attr(P.c.status),
    "device_id": Attr(P.c.device_id),
    "device_owner": Attr(P.c.device_owner),
    "port_security_enabled": Attr(P.c.port_security_enabled, to_bool),
    "qos_policy_id": Attr(P.c.qos_policy_id),
    "binding:vnic_type": Attr(P.c.vnic_type),
    "binding:host_id": Attr(P.c.host_id),
    "binding:vif_type": Attr(P.c.vif_type),
    "fixed_ips": Attr(filter=_fixed_ips_filter, sortable=False),
    "security_groups": Attr(
        filter=lambda values: P.c.id.in_(select(PSG.c.port_id).where(PSG.c.security_group_id.in_(values))),
        sortable=False,
    ),
}


def to_dicts(conn: Connection, rows: list[Any], fields: set[str] | None = None) -> list[dict[str, Any]]:
    which = RELATED_FIELDS if not fields else RELATED_FIELDS & fields
    extra = related(conn, [r.id for r in rows], which)
    ips, sgs, tags = extra.get("fixed_ips", {}), extra.get("security_groups", {}), extra.get("tags", {})
    pairs = extra.get("allowed_address_pairs", {})
    keys = rows[0]._fields if rows else ()
    out = [
        port_dict(dict(zip(keys, r, strict=True)), ips.get(r.id, []), sgs.get(r.id, []), tags.get(r.id),
                  pairs.get(r.id, []))
        for r in rows
    ]  # fmt: skip
    if rows and (not fields or "trunk_details" in fields):
        # (trunk-details: only a trunk's parent has the key, as in Neutron)
        found = trunks.details(conn, [r.id for r in rows])
        for d in out:
            if d["id"] in found:
                d["trunk_details"] = found[d["id"]]
    return out


def port_dict(
    m: Mapping[str, Any], fixed: list[dict[str, str]], sgs: list[str], tags: list[str] | None,
    pairs: list[dict[str, str]] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The API shape of a port, from its column values and related rows."""
    d = common.standard_fields(m, tags)
    fixed.sort(key=lambda f: (":" in f["ip_address"], f["ip_address"]))
    d.update(
        {
            "network_id": m["network_id"],
            "mac_address": m["mac_address"],
            "admin_state_up": m["admin_state_up"],
            "status": m["status"],
            "device_id": m["device_id"],
            "device_owner": m["device_owner"],
            "fixed_ips": fixed,
            "security_groups": sorted(sgs),
            "port_security_enabled": m["port_security_enabled"],
            "allowed_address_pairs": pairs or [],
            "extra_dhcp_opts": [],
            "binding:vnic_type": m["vnic_type"],
            "binding:host_id": m["host_id"],
            "binding:profile": m["profile"],
            "binding:vif_type": m["vif_type"],
            "binding:vif_details": m["vif_details"],
            "qos_policy_id": m.get("qos_policy_id"),
        }
    )
    return d


def _visible_stmt(ctx: Context) -> Any:
    return common.only_visible(select(P), P, ctx)


# API attributes that are exactly one column: a list asking only for these (and the related lists
# below) selects just those columns and builds just those keys, which is what keeps big lists fast.
COLUMN_FIELDS = {
    "id": P.c.id, "name": P.c.name, "description": P.c.description, "project_id": P.c.project_id,
    "tenant_id": P.c.project_id, "network_id": P.c.network_id, "mac_address": P.c.mac_address,
    "admin_state_up": P.c.admin_state_up, "status": P.c.status, "device_id": P.c.device_id,
    "device_owner": P.c.device_owner, "port_security_enabled": P.c.port_security_enabled,
    "binding:vnic_type": P.c.vnic_type, "binding:host_id": P.c.host_id, "binding:profile": P.c.profile,
    "binding:vif_type": P.c.vif_type, "binding:vif_details": P.c.vif_details,
    "revision_number": P.c.revision_number, "qos_policy_id": P.c.qos_policy_id,
}  # fmt: skip
RELATED_FIELDS = {"fixed_ips", "security_groups", "tags", "allowed_address_pairs"}


def list_page(conn: Connection, ctx: Context, q: ListQuery) -> Page:
    fields = set(q.fields)
    projected = bool(fields) and fields <= COLUMN_FIELDS.keys() | RELATED_FIELDS
    if projected:
        names = [f for f in q.fields if f in COLUMN_FIELDS]
        stmt = select(P.c.id, *[COLUMN_FIELDS[f].label(f"f{i}") for i, f in enumerate(names)])
        rows, more = fetch_page(conn, P, ATTRS, common.only_visible(stmt, P, ctx), q, "port")
        return Page(_project(conn, rows, names, fields & RELATED_FIELDS), more)
    rows, more = fetch_page(conn, P, ATTRS, _visible_stmt(ctx), q, "port")
    return Page(to_dicts(conn, rows, fields or None), more)


def _project(conn: Connection, rows: list[Any], names: list[str], wanted: set[str]) -> list[dict[str, Any]]:
    extra = related(conn, [r[0] for r in rows], wanted)
    out = []
    for r in rows:
        item = {name: r[i + 1] for i, name in enumerate(names)}
        for key, values in extra.items():
            item[key] = values.get(r[0], [])
        if "fixed_ips" in item:
            item["fixed_ips"].sort(key=lambda f: (":" in f["ip_address"], f["ip_address"]))
        out.append(item)
    return out


def related(conn: Connection, ids: list[str], which: set[str]) -> dict[str, dict[str, list[Any]]]:
    """fixed_ips, security_groups, allowed_address_pairs and tags of many ports, as {attribute: {port_id: [...]}}."""
    out: dict[str, dict[str, list[Any]]] = {}
    if "fixed_ips" in which:
        ips: dict[str, list[Any]] = defaultdict(list)
        for chunk in common.chunks(ids, 5000):
            stmt = select(A.c.port_id, A.c.subnet_id, A.c.ip_address).where(A.c.port_id.in_(chunk))
            for pid, sid, ip in conn.execute(stmt):
                ips[pid].append({"subnet_id": sid, "ip_address": ip})
        out["fixed_ips"] = ips
    if "security_groups" in which:
        sgs: dict[str, list[Any]] = defaultdict(list)
        for chunk in common.chunks(ids, 5000):
            stmt = select(PSG.c.port_id, PSG.c.security_group_id).where(PSG.c.port_id.in_(chunk))
            for pid, sg in conn.execute(stmt):
                sgs[pid].append(sg)
        out["security_groups"] = sgs
    if "allowed_address_pairs" in which:
        out["allowed_address_pairs"] = address_pairs.load(conn, ids)
    if "tags" in which:
        out["tags"] = dict(common.load_tags(conn, ids))
    return out


def load(conn: Connection, ids: list[str]) -> list[dict[str, Any]]:
    rows = {r.id: r for chunk in common.chunks(ids, 5000) for r in conn.execute(select(P).where(P.c.id.in_(chunk)))}
    return to_dicts(conn, [rows[i] for i in ids])
