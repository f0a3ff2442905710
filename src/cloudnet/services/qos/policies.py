"""QoS policies (Neutron's `qos` and `qos-default`): who sees and changes them, one default per project, and
which networks and ports may use them. Their rules: rules.py; what a host enforces: qos_state.py."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from pydantic import Field
from sqlalchemy import Connection, delete, select, update
from sqlalchemy.exc import IntegrityError

from cloudnet.errors import Conflict, NotFound, disallowed
from cloudnet.services import common
from cloudnet.services.context import Context
from cloudnet.services.query import Attr, ListQuery, Page, fetch_page, to_bool
from cloudnet.services.rbac import grants
from cloudnet.services.validation import Body, Tags, is_uuid, parse
from cloudnet.store import tables as t
from cloudnet.store import tables_qos as tq
from cloudnet.store.db import Store, Tx

QP, QR = tq.qos_policies, tq.qos_rules
RBAC = "qos_policy"  # its RBAC object type (rbac/object_types.py)
ATTRS: dict[str, Attr] = {
    **common.standard_attrs(QP),
    "shared": Attr(QP.c.shared, to_bool),
    "is_default": Attr(QP.c.is_default, to_bool),
}
# Rule types a dataplane enforces (both drivers); a policy with any other rule is refused on a network or a port.
ENFORCED = ("bandwidth_limit", "dscp_marking")


class PolicyCreate(Body):
    name: str = Field("", max_length=255)
    description: str = Field("", max_length=255)
    project_id: str | None = Field(None, max_length=255)
    tenant_id: str | None = Field(None, max_length=255)
    shared: bool = False
    is_default: bool = False
    tags: Tags


class PolicyUpdate(Body):
    name: str | None = Field(None, max_length=255)
    description: str | None = Field(None, max_length=255)
    shared: bool | None = None
    is_default: bool | None = None


def policy_not_found(policy_id: str) -> NotFound:
    return NotFound(f"QoS policy {policy_id} could not be found.", type="QosPolicyNotFound")


def admin_only(ctx: Context, action: str) -> None:
    """Neutron's default policy: QoS policies and their rules are made, changed and removed by admins only."""
    if not ctx.is_admin:
        raise disallowed(action)


def _visible(ctx: Context) -> Any:
    return grants.visible(QP, RBAC, ctx, (grants.SHARED,), QP.c.shared.is_(True))


def get_visible(conn: Connection, ctx: Context, policy_id: str, *, lock: bool = False) -> Any:
    """The policy if the caller may see (and so use) it: its project's, shared with everyone or by an RBAC policy
    with its project; else QosPolicyNotFound. `lock`: its row is held until the transaction ends (a deletion and a
    new use of it take turns)."""
    stmt = select(QP).where(QP.c.id == policy_id)
    row = conn.execute(stmt.with_for_update() if lock else stmt).first() if is_uuid(policy_id) else None
    if row is None or not (ctx.is_admin or row.project_id == ctx.project_id or row.shared
                           or grants.shared_with(conn, RBAC, [row.id], ctx.project_id)):  # fmt: skip
        raise policy_not_found(policy_id)
    return row


def rule_dicts(conn: Connection, policy_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Each policy's rules as its `rules` attribute shows them (with their type and policy)."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for chunk in common.chunks(policy_ids, 5000):
        for r in conn.execute(
            select(QR).where(QR.c.qos_policy_id.in_(chunk)).order_by(QR.c.type, QR.c.created_at, QR.c.id)
        ):
            out[r.qos_policy_id].append({**rule_body(r), "type": r.type, "qos_policy_id": r.qos_policy_id})
    return out


def rule_body(r: Any) -> dict[str, Any]:
    """A rule's own attributes, as its sub-resource shows them."""
    if r.type == "bandwidth_limit":
        return {"id": r.id, "max_kbps": r.max_kbps, "max_burst_kbps": r.max_burst_kbps, "direction": r.direction}
    if r.type == "dscp_marking":
        return {"id": r.id, "dscp_mark": r.dscp_mark}
    return {"id": r.id, "min_kbps": r.min_kbps, "direction": r.direction}


def to_dicts(conn: Connection, rows: list[Any], ctx: Context) -> list[dict[str, Any]]:
    ids = [r.id for r in rows]
    rules, tags = rule_dicts(conn, ids), common.load_tags(conn, ids)
    # `shared`: with everyone or with the caller's project (as Neutron shows it: to whom asks)
    shared_here = grants.shared_with(conn, RBAC, [r.id for r in rows if not r.shared], ctx.project_id)
    out = []
    for r in rows:
        d = common.standard_fields(r, tags.get(r.id))
        d.update(shared=r.shared or r.id in shared_here, is_default=r.is_default, rules=rules.get(r.id, []))
        out.append(d)
    return out


def list_policies(store: Store, ctx: Context, q: ListQuery) -> Page:
    with store.read() as conn:
        cond = _visible(ctx)
        stmt = select(QP) if cond is None else select(QP).where(cond)
        attrs = {**ATTRS, "shared": Attr(filter=grants.shared_filter(QP.c.id, RBAC, ctx), sortable=False)}
        rows, more = fetch_page(conn, QP, attrs, stmt, q, "policy")
        return Page(to_dicts(conn, rows, ctx), more)


def get_policy(store: Store, ctx: Context, policy_id: str) -> dict[str, Any]:
    with store.read() as conn:
        return to_dicts(conn, [get_visible(conn, ctx, policy_id)], ctx)[0]


def _default_exists(project_id: str) -> Conflict:
    return Conflict(f"A default QoS policy exists for project {project_id}.", type="QoSPolicyDefaultAlreadyExists")


def create_policies(store: Store, ctx: Context, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    admin_only(ctx, "create_policy")
    specs = [parse(PolicyCreate, b) for b in bodies]
    with store.write() as tx:
        ids = []
        for spec in specs:
            row = common.new_standard(ctx, spec.project_id or spec.tenant_id, tx.now, spec.name, spec.description,
                                      "policy")  # fmt: skip
            project = row["project_id"]
            row.update(shared=spec.shared, is_default=spec.is_default,
                       default_for_project=project if spec.is_default else None)  # fmt: skip
            _insert_checked(tx, row, project)
            if spec.shared:  # (`shared` is the wildcard policy, as in Neutron)
                grants.insert(tx, RBAC, row["id"], project, grants.SHARED, grants.WILDCARD)
            if spec.tags:
                common.set_tags(tx.conn, row["id"], spec.tags)
            tx.record("qos_policy", row["id"], "create", project)
            ids.append(row["id"])
        rows = {r.id: r for r in tx.conn.execute(select(QP).where(QP.c.id.in_(ids)))}
        return to_dicts(tx.conn, [rows[i] for i in ids], ctx)


def _insert_checked(tx: Tx, row: dict[str, Any], project: str) -> None:
    if row["default_for_project"] and _default_of(tx.conn, project):
        raise _default_exists(project)
    try:
        tx.conn.execute(QP.insert().values(**row))
    except IntegrityError:
        # another request made one since the check above (the transaction is over: it is rolled back)
        raise _default_exists(project) from None


def _default_of(conn: Connection, project: str) -> str | None:
    found = conn.execute(select(QP.c.id).where(QP.c.default_for_project == project)).scalar()
    return str(found) if found else None


def update_policy(store: Store, ctx: Context, policy_id: str, body: dict[str, Any]) -> dict[str, Any]:
    spec = parse(PolicyUpdate, body)
    changes = {k: v for k, v in spec.model_dump(exclude_unset=True).items() if v is not None}
    with store.write() as tx:
        row = get_visible(tx.conn, ctx, policy_id)
        admin_only(ctx, "update_policy")
        if "is_default" in changes:
            other = _default_of(tx.conn, row.project_id)
            if changes["is_default"] and other not in (None, policy_id):
                raise _default_exists(row.project_id)
            changes["default_for_project"] = row.project_id if changes["is_default"] else None
        if "shared" in changes and changes["shared"] != row.shared:
            if not changes["shared"]:
                grants.check_unshare(tx.conn, RBAC, row, users(tx.conn, policy_id))
            grants.wildcard(tx, RBAC, policy_id, row.project_id, grants.SHARED, changes["shared"])
        common.touch(tx, QP, policy_id, "qos_policy", row.project_id, changes, row=row)
        return to_dicts(tx.conn, [tx.conn.execute(select(QP).where(QP.c.id == policy_id)).one()], ctx)[0]


def delete_policy(store: Store, ctx: Context, policy_id: str) -> None:
    with store.write() as tx:
        row = get_visible(tx.conn, ctx, policy_id, lock=True)
        admin_only(ctx, "delete_policy")
        for kind, table in (("port", t.ports), ("network", t.networks)):
            user = tx.conn.execute(select(table.c.id).where(table.c.qos_policy_id == policy_id).limit(1)).scalar()
            if user:
                raise Conflict(f"QoS Policy {policy_id} is used by {kind} {user}.", type="QosPolicyInUse")
        tx.conn.execute(delete(QR).where(QR.c.qos_policy_id == policy_id))
        tx.conn.execute(delete(t.tags).where(t.tags.c.resource_id == policy_id))
        tx.conn.execute(delete(QP).where(QP.c.id == policy_id))
        grants.remove_all(tx, RBAC, policy_id)
        tx.record("qos_policy", policy_id, "delete", row.project_id)


# -- use by networks and ports ----------------------------------------------------------------------------------


def check_usable(tx: Tx, ctx: Context, policy_id: str | None, port_id: str | None = None) -> str | None:
    """A policy a network or port of the caller's may use: one the caller sees (QosPolicyNotFound otherwise, as
    Neutron answers for another project's), whose rules the dataplanes enforce (QosRuleNotSupported). Its row is
    held until the transaction ends, so that it cannot be deleted under the new use."""
    if policy_id is None:
        return None
    get_visible(tx.conn, ctx, policy_id, lock=True)
    unsupported = tx.conn.execute(
        select(QR.c.type).where(QR.c.qos_policy_id == policy_id, QR.c.type.not_in(ENFORCED)).limit(1)
    ).scalar()
    if unsupported:
        raise Conflict(f"Rule {unsupported} is not supported by port {port_id or policy_id}",
                       type="QosRuleNotSupported")  # fmt: skip
    return policy_id


def for_new_network(tx: Tx, ctx: Context, project: str, given: bool, policy_id: str | None) -> str | None:
    """The policy of a new network: the one asked for, else the project's default (Neutron's qos-default)."""
    if given:
        return check_usable(tx, ctx, policy_id)
    return _default_of(tx.conn, project)


def used(conn: Connection, policy_id: str) -> bool:
    """Whether any network or port uses the policy (a rule the dataplanes cannot enforce may not join it)."""
    return any(
        conn.execute(select(table.c.id).where(table.c.qos_policy_id == policy_id).limit(1)).first() is not None
        for table in (t.ports, t.networks)
    )


def users(conn: Connection, policy_id: str) -> set[str]:
    """The projects whose ports or networks carry the policy (who a policy's removal may not leave without it)."""
    stmt = select(t.ports.c.project_id).where(t.ports.c.qos_policy_id == policy_id)
    stmt = stmt.union(select(t.networks.c.project_id).where(t.networks.c.qos_policy_id == policy_id))
    return {r.project_id for r in conn.execute(stmt)}


def touch_policy(tx: Tx, row: Any) -> None:
    """A rule of the policy changed: its revision moves (Neutron bumps the policy's), and its users' hosts follow."""
    tx.conn.execute(update(QP).where(QP.c.id == row.id).values(updated_at=tx.now,
                                                               revision_number=QP.c.revision_number + 1))  # fmt: skip
    tx.record("qos_policy", row.id, "update", row.project_id)
