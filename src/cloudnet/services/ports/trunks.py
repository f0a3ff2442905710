"""Neutron's trunks (/v2.0/trunks, the `trunk` and `trunk-details` extensions): a parent port carrying VLAN
subports, as neutron/services/trunk/plugin.py keeps them. The rules are trunk_rules.py's.

A subport is given to its trunk (Neutron's `_update_device_attributes`): device_owner `trunk:subport`, device_id
the trunk's id, bound to the parent's host; removed, it gets them back empty. A trunk's status is read from its
ports as the dataplane reports them (both dataplanes add subports to a bound port at once): ACTIVE when the parent
and every subport are, DEGRADED when the parent is but a subport failed, ERROR when the parent failed, else DOWN.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from pydantic import Field
from sqlalchemy import Connection, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from cloudnet.errors import BadRequest, Conflict, NotFound
from cloudnet.services import common
from cloudnet.services.context import Context
from cloudnet.services.ports import trunk_rules as rules
from cloudnet.services.ports.trunk_rules import SUBPORT_OWNER  # noqa: F401  (what the hosts' reports look for)
from cloudnet.services.query import Attr, ListQuery, Page, fetch_page, to_bool
from cloudnet.services.validation import Body, Tags, parse
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx
from cloudnet.store.tables_trunks import subports as S
from cloudnet.store.tables_trunks import trunks as T

P = t.ports
ATTRS: dict[str, Attr] = {
    **common.standard_attrs(T),
    "port_id": Attr(T.c.port_id),
    "admin_state_up": Attr(T.c.admin_state_up, to_bool),
}


class TrunkCreate(Body):
    port_id: Any = None  # checked as Neutron does (trunk_rules.parent): its wording
    name: str = Field("", max_length=255)
    description: str = Field("", max_length=255)
    admin_state_up: bool = True
    sub_ports: Any = Field(default_factory=list)
    project_id: str | None = Field(None, max_length=255)
    tenant_id: str | None = Field(None, max_length=255)
    tags: Tags


class TrunkUpdate(Body):
    name: str | None = Field(None, max_length=255)
    description: str | None = Field(None, max_length=255)
    admin_state_up: bool | None = None


def _subports_of(conn: Connection, trunk_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for chunk in common.chunks(trunk_ids, 5000):
        stmt = select(S.c.trunk_id, S.c.port_id, S.c.segmentation_type, S.c.segmentation_id).where(
            S.c.trunk_id.in_(chunk)
        )
        for trunk_id, port_id, kind, seg in conn.execute(stmt.order_by(S.c.segmentation_id, S.c.port_id)):
            out[trunk_id].append({"segmentation_id": seg, "segmentation_type": kind, "port_id": port_id})
    return out


def status(parent: str | None, subs: list[str | None]) -> str:
    if parent == "ERROR":
        return "ERROR"
    if parent != "ACTIVE":
        return "DOWN"
    return "ACTIVE" if all(s == "ACTIVE" for s in subs) else "DEGRADED" if "ERROR" in subs else "DOWN"


def _dicts(conn: Connection, rows: list[Any]) -> list[dict[str, Any]]:
    ids = [r.id for r in rows]
    subs = _subports_of(conn, ids)
    port_ids = [r.port_id for r in rows] + [s["port_id"] for v in subs.values() for s in v]
    states = {i: s for i, s in conn.execute(select(P.c.id, P.c.status).where(P.c.id.in_(port_ids)))}
    tags = common.load_tags(conn, ids)
    out = []
    for r in rows:
        d = common.standard_fields(r, tags.get(r.id))
        sub_ports = subs.get(r.id, [])
        d.update(
            {
                "port_id": r.port_id,
                "admin_state_up": r.admin_state_up,
                "sub_ports": sub_ports,
                "status": status(states.get(r.port_id), [states.get(s["port_id"]) for s in sub_ports]),
            }
        )
        out.append(d)
    return out


def _get_row(conn: Connection, ctx: Context, trunk_id: str) -> Any:
    return common.get_row(conn, T, "trunk", trunk_id, ctx)  # (TrunkNotFound: "Trunk <id> could not be found.")


def list_trunks(store: Store, ctx: Context, q: ListQuery) -> Page:
    with store.read() as conn:
        rows, more = fetch_page(conn, T, ATTRS, common.only_visible(select(T), T, ctx), q, "trunk")
        return Page(_dicts(conn, rows), more)


def get_trunk(store: Store, ctx: Context, trunk_id: str) -> dict[str, Any]:
    with store.read() as conn:
        return _dicts(conn, [_get_row(conn, ctx, trunk_id)])[0]


def get_subports(store: Store, ctx: Context, trunk_id: str) -> dict[str, Any]:
    return {"sub_ports": get_trunk(store, ctx, trunk_id)["sub_ports"]}


def create_trunks(store: Store, ctx: Context, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    specs = [parse(TrunkCreate, b) for b in bodies]
    for spec in specs:
        if spec.port_id is None:
            raise BadRequest("Failed to parse request. Required attribute 'port_id' not specified")
        why = rules.subports_error(spec.sub_ports)
        if why:
            raise BadRequest(f"Invalid input for sub_ports. Reason: {why}.")
    with store.write() as tx:
        ids = [_create(tx, ctx, spec) for spec in specs]
        rows = {r.id: r for r in tx.conn.execute(select(T).where(T.c.id.in_(ids)))}
        return _dicts(tx.conn, [rows[i] for i in ids])


def _create(tx: Tx, ctx: Context, spec: TrunkCreate) -> str:
    parent = rules.parent(tx.conn, ctx, spec.port_id)
    row = common.new_standard(ctx, spec.project_id or spec.tenant_id, tx.now, spec.name, spec.description, "trunk")
    row.update(port_id=parent.id, admin_state_up=spec.admin_state_up)
    try:
        tx.conn.execute(insert(T).values(**row))
    except IntegrityError:  # made a parent by a concurrent request since the check
        raise rules.in_use(f"Port {parent.id} is currently in use and is not eligible for use as a parent port.",
                           "ParentPortInUse") from None  # fmt: skip
    if spec.tags:
        common.set_tags(tx.conn, row["id"], spec.tags)
    tx.record("trunk", row["id"], "create", row["project_id"])
    _add(tx, ctx, row["id"], parent, spec.sub_ports)
    return str(row["id"])


def _add(tx: Tx, ctx: Context, trunk_id: str, parent: Any, subs: list[dict[str, Any]]) -> None:
    checked = [rules.subport(tx.conn, ctx, sub, parent) for sub in subs]
    taken = {(k, s) for k, s in tx.conn.execute(
        select(S.c.segmentation_type, S.c.segmentation_id).where(S.c.trunk_id == trunk_id))}  # fmt: skip
    for _row, kind, seg in checked:
        if (kind, seg) in taken:
            raise rules.in_use(f"segmentation_type {kind} and segmentation_id {seg} already in use on trunk "
                               f"{trunk_id}.", "DuplicateSubPort")  # fmt: skip
    for row, kind, seg in checked:
        try:
            tx.conn.execute(insert(S).values(port_id=row.id, trunk_id=trunk_id, segmentation_type=kind,
                                             segmentation_id=seg))  # fmt: skip
        except IntegrityError:  # a concurrent request took the port or the id since the checks
            raise rules.in_use(f"Port {row.id} is in use by another trunk.", "TrunkPortInUse") from None
        common.touch(tx, P, row.id, "port", row.project_id, {"device_owner": rules.SUBPORT_OWNER,
                     "device_id": trunk_id, "host_id": parent.host_id}, row=row)  # fmt: skip


def _release(tx: Tx, port_ids: list[str]) -> None:
    """Subports leaving their trunk get their device attributes back empty (Neutron's AFTER_DELETE)."""
    for row in tx.conn.execute(select(P).where(P.c.id.in_(port_ids))).all():
        common.touch(tx, P, row.id, "port", row.project_id, {"device_owner": "", "device_id": "", "host_id": ""},
                     row=row)  # fmt: skip


def _managed(tx: Tx, ctx: Context, trunk_id: str) -> Any:
    """trunk_can_be_managed: a disabled trunk's subports are not changed, nor is it deleted."""
    row = _get_row(tx.conn, ctx, trunk_id)
    if not row.admin_state_up:
        raise Conflict(f"Trunk {trunk_id} is currently disabled.", type="TrunkDisabled")
    return row


def _sub_ports_of_body(body: Any) -> list[dict[str, Any]]:
    subs = body.get("sub_ports") if isinstance(body, dict) else None
    if subs is None:
        raise BadRequest("Failed to parse request. Required attribute 'sub_ports' not specified")
    why = rules.subports_error(subs)
    if why:
        raise BadRequest(f"Invalid input for operation: {why}.", type="InvalidInput")
    return list(subs)


def add_subports(store: Store, ctx: Context, trunk_id: str, body: Any) -> dict[str, Any]:
    subs = _sub_ports_of_body(body)
    with store.write() as tx:
        row = _get_row(tx.conn, ctx, trunk_id)
        parent = tx.conn.execute(select(P).where(P.c.id == row.port_id)).one()
        _add(tx, ctx, trunk_id, parent, subs)
        _managed(tx, ctx, trunk_id)
        _bump(tx, row)
        return _dicts(tx.conn, [_get_row(tx.conn, ctx, trunk_id)])[0]


def remove_subports(store: Store, ctx: Context, trunk_id: str, body: Any) -> dict[str, Any]:
    subs = _sub_ports_of_body(body)
    with store.write() as tx:
        row = _managed(tx, ctx, trunk_id)
        current = {pid for (pid,) in tx.conn.execute(select(S.c.port_id).where(S.c.trunk_id == trunk_id))}
        for sub in subs:
            if sub["port_id"] not in current:
                raise NotFound(f"SubPort on trunk {trunk_id} with parent port {sub['port_id']} could not be found.",
                               type="SubPortNotFound")  # fmt: skip
        gone = [s["port_id"] for s in subs]
        if gone:
            tx.conn.execute(delete(S).where(S.c.trunk_id == trunk_id, S.c.port_id.in_(gone)))
            _release(tx, gone)
        _bump(tx, row)
        return _dicts(tx.conn, [_get_row(tx.conn, ctx, trunk_id)])[0]


def _bump(tx: Tx, row: Any) -> None:
    tx.conn.execute(update(T).where(T.c.id == row.id).values(updated_at=tx.now,
                                                             revision_number=T.c.revision_number + 1))  # fmt: skip
    tx.record("trunk", row.id, "update", row.project_id)


def update_trunk(store: Store, ctx: Context, trunk_id: str, body: dict[str, Any]) -> dict[str, Any]:
    if isinstance(body, dict):
        for key in ("port_id", "sub_ports", "status"):
            if key in body:
                raise BadRequest(f"Cannot update read-only attribute {key}")
    spec = parse(TrunkUpdate, body)
    with store.write() as tx:
        row = _get_row(tx.conn, ctx, trunk_id)
        values = {k: getattr(spec, k) for k in spec.model_fields_set if getattr(spec, k) is not None}
        common.touch(tx, T, trunk_id, "trunk", row.project_id, values, row=row)
        return _dicts(tx.conn, [_get_row(tx.conn, ctx, trunk_id)])[0]


def delete_trunk(store: Store, ctx: Context, trunk_id: str) -> None:
    """Neutron deletes a trunk with its subports when its driver can untrunk a bound port, as both can here."""
    with store.write() as tx:
        row = _managed(tx, ctx, trunk_id)
        gone = [pid for (pid,) in tx.conn.execute(select(S.c.port_id).where(S.c.trunk_id == trunk_id))]
        tx.conn.execute(delete(S).where(S.c.trunk_id == trunk_id))
        _release(tx, gone)
        tx.conn.execute(delete(t.tags).where(t.tags.c.resource_id == trunk_id))
        tx.conn.execute(delete(T).where(T.c.id == trunk_id))
        tx.record("trunk", trunk_id, "delete", row.project_id)


def details(conn: Connection, port_ids: list[str]) -> dict[str, dict[str, Any]]:
    """`trunk_details` of the parents among `port_ids`: {"trunk_id", "sub_ports": [.. with mac_address]}."""
    out: dict[str, dict[str, Any]] = {}
    rows = [r for chunk in common.chunks(port_ids, 5000)
            for r in conn.execute(select(T.c.id, T.c.port_id).where(T.c.port_id.in_(chunk)))]  # fmt: skip
    if not rows:
        return out
    subs = _subports_of(conn, [r.id for r in rows])
    ids = [s["port_id"] for v in subs.values() for s in v]
    macs = {i: m for i, m in conn.execute(select(P.c.id, P.c.mac_address).where(P.c.id.in_(ids)))}
    for r in rows:
        out[r.port_id] = {
            "trunk_id": r.id,
            "sub_ports": [{**s, "mac_address": macs.get(s["port_id"])} for s in subs.get(r.id, [])],
        }
    return out


def subports_of(conn: Connection, parent_ids: list[str]) -> list[str]:
    """The subports of the trunks on these parents (a host's desired state plugs them with their parents)."""
    stmt = select(S.c.port_id).join(T, T.c.id == S.c.trunk_id).order_by(S.c.port_id)
    return [pid for chunk in common.chunks(parent_ids, 5000) for (pid,) in conn.execute(
        stmt.where(T.c.port_id.in_(chunk)))]  # fmt: skip


def subports_on(conn: Connection, port_ids: list[str], host: str) -> set[str]:
    """Those of `port_ids` that are subports of a trunk whose parent is bound to `host` (its agent reports them)."""
    if not port_ids:
        return set()
    stmt = (select(S.c.port_id).join(T, T.c.id == S.c.trunk_id).join(P, P.c.id == T.c.port_id)
            .where(S.c.port_id.in_(port_ids), P.c.host_id == host))  # fmt: skip
    return {pid for (pid,) in conn.execute(stmt)}
