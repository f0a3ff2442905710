"""Security groups (stored and served; enforcement is the dataplane's job): the default group of each project,
stateful or stateless groups, which groups a port may use. Their rules: security_group_rules.py."""

from __future__ import annotations

from collections import defaultdict
from typing import Annotated, Any

from pydantic import Field
from sqlalchemy import Connection, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite

from cloudnet.errors import Conflict, not_found
from cloudnet.services import cache, common, quotas
from cloudnet.services.context import Context
from cloudnet.services.networks import networks
from cloudnet.services.query import Attr, ListQuery, Page, fetch_page, to_bool
from cloudnet.services.rbac import grants
from cloudnet.services.security import security_group_rules as rules
from cloudnet.services.validation import Body, Tags, is_uuid, parse
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx

SG = t.security_groups
R = t.security_group_rules
P, PSG, PP = t.ports, t.port_security_groups, t.port_pools
# Groups one port may name (Neutron has no bound; a project has 10 groups by default).
MAX_PORT_GROUPS = 100
GroupIds = Annotated[list[Annotated[str, Field(max_length=255)]], Field(max_length=MAX_PORT_GROUPS)]

ATTRS: dict[str, Attr] = {
    **common.standard_attrs(SG),
    "stateful": Attr(SG.c.stateful, to_bool),
}


class GroupCreate(Body):
    name: str = Field("", max_length=255)
    description: str = Field("", max_length=255)
    project_id: str | None = Field(None, max_length=255)
    tenant_id: str | None = Field(None, max_length=255)
    stateful: bool = True
    tags: Tags


class GroupUpdate(Body):
    name: str | None = Field(None, max_length=255)
    description: str | None = Field(None, max_length=255)
    stateful: bool | None = None


def _sg_dicts(conn: Connection, rows: list[Any], ctx: Context) -> list[dict[str, Any]]:
    ids = [r.id for r in rows]
    shared = grants.shared_with(conn, "security_group", ids, ctx.project_id)  # (rbac-security-groups)
    by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for chunk in common.chunks(ids, 5000):
        for rule in conn.execute(select(R).where(R.c.security_group_id.in_(chunk)).order_by(R.c.created_at, R.c.id)):
            by_group[rule.security_group_id].append(rules.rule_dict(rule))
    tags = common.load_tags(conn, ids)
    out = []
    for r in rows:
        d = common.standard_fields(r, tags.get(r.id))
        d.update({"stateful": r.stateful, "shared": r.id in shared, "security_group_rules": by_group.get(r.id, [])})
        out.append(d)
    return out


# -- default group ------------------------------------------------------------------------------


def ensure_default(tx: Tx, project_id: str) -> str:
    """Id of the project's `default` group, created with Neutron's default rules on first use."""
    existing = cache.default_group(tx, project_id)
    if existing:
        return existing
    sg_id = common.new_id()
    module = postgresql if tx.conn.dialect.name == "postgresql" else sqlite
    # RETURNING, not rowcount: psycopg reports rowcount -1 here, which would read as "inserted".
    stmt = module.insert(SG).on_conflict_do_nothing(index_elements=["default_for_project"]).returning(SG.c.id)
    inserted = tx.conn.execute(
        stmt.values(
            id=sg_id, project_id=project_id, name="default", description="Default security group",
            created_at=tx.now, updated_at=tx.now, revision_number=0, stateful=True, default_for_project=project_id,
        )
    ).first()  # fmt: skip
    if not inserted:  # another server created it concurrently
        return str(tx.conn.execute(select(SG.c.id).where(SG.c.default_for_project == project_id)).scalar_one())
    # Neutron's: egress anywhere, ingress from the group's own members, for both ethertypes.
    specs = [(d, e, sg_id if d == "ingress" else None) for e in ("IPv4", "IPv6") for d in ("egress", "ingress")]
    rules.insert_plain(tx, project_id, sg_id, specs)
    tx.record("security_group", sg_id, "create", project_id)
    return sg_id


def check_usable(conn: Connection, ctx: Context, ids: list[str], port_project: str) -> list[str]:
    """The given groups, deduplicated; 404 for any the caller may not use on that port (another project's, for a
    member), 409 for stateful and stateless groups together (Neutron's _validate_sgs_for_port)."""
    unique = list(dict.fromkeys(ids))
    if not unique:
        return []
    found = [i for i in unique if is_uuid(i)]  # (anything else cannot exist, and PostgreSQL refuses NUL bytes)
    stmt = select(SG.c.id, SG.c.project_id, SG.c.stateful).where(SG.c.id.in_(found))
    rows = {r.id: r for r in conn.execute(stmt)} if found else {}
    others = [r.id for r in rows.values() if r.project_id != port_project]
    shared = grants.shared_with(conn, "security_group", others, port_project) if others and not ctx.is_admin else set()
    for sg_id in unique:
        row = rows.get(sg_id)
        if row is None or (row.project_id != port_project and not ctx.is_admin and sg_id not in shared):
            raise not_found("security_group", sg_id)
    if len({r.stateful for r in rows.values()}) > 1:
        raise Conflict(
            "Error Cannot apply both stateful and stateless security groups on the same port at the same time "
            "while attempting the operation.",
            type="SecurityGroupConflict",
        )
    return unique


# -- groups -------------------------------------------------------------------------------------


def _ensure_default_for(store: Store, ctx: Context) -> None:
    # Neutron creates a project's default group the first time the project looks at its groups.
    with store.read() as conn:
        if conn.execute(select(SG.c.id).where(SG.c.default_for_project == ctx.project_id)).first():
            return
    with store.write() as tx:
        ensure_default(tx, ctx.project_id)


def list_groups(store: Store, ctx: Context, q: ListQuery) -> Page:
    _ensure_default_for(store, ctx)
    with store.read() as conn:
        cond = grants.visible(SG, "security_group", ctx)
        stmt = select(SG) if cond is None else select(SG).where(cond)
        attrs = {**ATTRS, "shared": Attr(filter=grants.shared_filter(SG.c.id, "security_group", ctx), sortable=False)}
        rows, more = fetch_page(conn, SG, attrs, stmt, q, "security_group")
        return Page(_sg_dicts(conn, rows, ctx), more)


def get_group(store: Store, ctx: Context, sg_id: str) -> dict[str, Any]:
    with store.read() as conn:
        return _sg_dicts(conn, [get_visible(conn, ctx, sg_id)], ctx)[0]


def get_visible(conn: Connection, ctx: Context, sg_id: str) -> Any:
    """A group the caller owns or that is shared with their project (404 otherwise)."""
    return grants.get_visible(conn, SG, "security_group", sg_id, ctx)


def create_groups(store: Store, ctx: Context, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    specs = [parse(GroupCreate, b) for b in bodies]
    with store.write() as tx:
        ids = []
        for spec in specs:
            if spec.name == "default":
                raise Conflict("Default security group already exists.", type="SecurityGroupDefaultAlreadyExists")
            row = common.new_standard(
                ctx, spec.project_id or spec.tenant_id, tx.now, spec.name, spec.description, "security_group"
            )
            row.update(stateful=spec.stateful, default_for_project=None)
            ensure_default(tx, row["project_id"])
            quotas.enforce(tx, row["project_id"], "security_group", 1)
            quotas.enforce(tx, row["project_id"], "security_group_rule", 2)  # its two egress rules
            tx.conn.execute(SG.insert().values(**row))
            rules.insert_plain(tx, row["project_id"], row["id"], [("egress", e, None) for e in ("IPv4", "IPv6")])
            if spec.tags:
                common.set_tags(tx.conn, row["id"], spec.tags)
            tx.record("security_group", row["id"], "create", row["project_id"])
            ids.append(row["id"])
        rows = {r.id: r for r in tx.conn.execute(select(SG).where(SG.c.id.in_(ids)))}
        return _sg_dicts(tx.conn, [rows[i] for i in ids], ctx)


def update_group(store: Store, ctx: Context, sg_id: str, body: dict[str, Any]) -> dict[str, Any]:
    spec = parse(GroupUpdate, body)
    changes = {k: v for k, v in spec.model_dump(exclude_unset=True).items() if v is not None}
    with store.write() as tx:
        row = common.only_owner(get_visible(tx.conn, ctx, sg_id), ctx, "update_security_group")
        if row.default_for_project and changes.get("name", "default") != "default":
            raise Conflict("Updating default security group not allowed.", type="SecurityGroupCannotUpdateDefault")
        if changes.get("stateful", row.stateful) != row.stateful and _in_use(tx.conn, sg_id):
            # Neutron: the ports' filtering would change under them (their connections' state with it).
            raise Conflict(f"Security Group {sg_id} in use.", type="SecurityGroupInUse")
        common.touch(tx, SG, sg_id, "security_group", row.project_id, changes, row=row)
        return _sg_dicts(tx.conn, [tx.conn.execute(select(SG).where(SG.c.id == sg_id)).one()], ctx)[0]


def delete_group(store: Store, ctx: Context, sg_id: str) -> None:
    with store.write() as tx:
        row = common.only_owner(get_visible(tx.conn, ctx, sg_id), ctx, "delete_security_group")
        if row.default_for_project and not ctx.is_admin:
            raise Conflict("Removing default security group not allowed.", type="SecurityGroupCannotRemoveDefault")
        _forget_in_pools(tx, sg_id)
        in_use = _in_use(tx.conn, sg_id)
        referenced = tx.conn.execute(
            select(R.c.id).where(R.c.remote_group_id == sg_id, R.c.security_group_id != sg_id).limit(1)
        ).first()
        if in_use or referenced:
            raise Conflict(f"Security Group {sg_id} in use.", type="SecurityGroupInUse")
        rule_ids = [r[0] for r in tx.conn.execute(select(R.c.id).where(R.c.security_group_id == sg_id))]
        tx.conn.execute(delete(R).where(R.c.security_group_id == sg_id))
        for rule_id in rule_ids:
            tx.record("security_group_rule", rule_id, "delete", row.project_id)
        tx.conn.execute(delete(t.tags).where(t.tags.c.resource_id == sg_id))
        grants.remove_all(tx, "security_group", sg_id)
        tx.conn.execute(delete(SG).where(SG.c.id == sg_id))
        tx.record("security_group", sg_id, "delete", row.project_id)


def _in_use(conn: Connection, sg_id: str) -> bool:
    return conn.execute(select(PSG.c.port_id).where(PSG.c.security_group_id == sg_id).limit(1)).first() is not None


def _forget_in_pools(tx: Tx, sg_id: str) -> None:
    """The group is being deleted: ready pool ports lose it (moving to another bucket) and refills stop giving
    it, so that pool ports never block the deletion (the pools' caches follow the group's delete event)."""
    ready = select(P.c.id).where(P.c.device_owner == networks.POOL_FREE_OWNER)
    tx.conn.execute(delete(PSG).where(PSG.c.security_group_id == sg_id, PSG.c.port_id.in_(ready)))
    for pool_id, sgs in tx.conn.execute(select(PP.c.id, PP.c.security_groups)).all():
        if sg_id in (sgs or []):
            tx.conn.execute(update(PP).where(PP.c.id == pool_id).values(security_groups=[s for s in sgs if s != sg_id]))
