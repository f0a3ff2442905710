"""Hosts (agents): registration, heartbeats, liveness, port status reports, and each host's desired state."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field
from sqlalchemy import Connection, delete, insert, select, update

from cloudnet.errors import Conflict, Forbidden, not_found
from cloudnet.services import common
from cloudnet.services.context import Context
from cloudnet.services.hosts import agent_samples
from cloudnet.services.networks import networks
from cloudnet.services.pools import pool_recovery
from cloudnet.services.ports import metadata_ports, sriov, trunks
from cloudnet.services.ports.port_specs import ROUTER_GATEWAY, ROUTER_INTERFACE
from cloudnet.services.validation import Body, parse
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx, utcnow
from cloudnet.wire import request_ids, zones

H = t.hosts
P = t.ports
A = t.ip_allocations
AGENT_PORT_STATUSES = ("ACTIVE", "DOWN", "BUILD", "ERROR")


class HostReport(Body):
    agent_version: str = Field("", max_length=64)
    # The zone its agent reports (as Neutron's agents do in their state reports); absent: the one it had (new: nova).
    availability_zone: Annotated[str, Field(max_length=zones.MAX_LENGTH), AfterValidator(zones.check)] | None = None
    report: dict[str, Any] = Field(default_factory=dict)


class PortStatus(Body):
    id: str
    status: Literal["ACTIVE", "DOWN", "BUILD", "ERROR"]
    vif_type: str | None = Field(None, alias="binding:vif_type", max_length=32)
    vif_details: dict[str, Any] | None = Field(None, alias="binding:vif_details")
    # The request whose change the agent's pass realised (the id its event carried): the status event names it.
    request_id: str | None = Field(None, max_length=request_ids.MAX_LENGTH, pattern=f"^{request_ids.PATTERN}$")


class PortStatusReport(Body):
    ports: list[PortStatus]


def admin_only(ctx: Context) -> None:
    if not ctx.is_admin:
        raise Forbidden("Only admins (agents) may manage hosts")


def _naive_utc(value: datetime) -> datetime:
    """The naive UTC value as written (`utcnow()`): PostgreSQL returns timestamptz values aware, in the session's
    time zone, the same zone it read the naive value in; SQLite returns it naive. (Also what `sweep_dead`
    compares in SQL, so `alive` and the sweep agree whatever the session time zone is.)"""
    return value.replace(tzinfo=None)


def alive(row: Any, now: datetime, down_time: float) -> bool:
    return _naive_utc(row.heartbeat_at) >= now - timedelta(seconds=down_time)


def _host_dict(row: Any, now: datetime, down_time: float) -> dict[str, Any]:
    return {
        "name": row.name,
        "agent_version": row.agent_version,
        "availability_zone": row.availability_zone,
        "heartbeat_at": common.fmt_time(row.heartbeat_at),
        "alive": alive(row, now, down_time),
        "created_at": common.fmt_time(row.created_at),
        "updated_at": common.fmt_time(row.updated_at),
        "report": without_metrics(row.report),
    }


def without_metrics(report: Any) -> Any:
    """The report as `host show` shows it and as heartbeats compare it: without the agent's metric samples (they
    change on every heartbeat, and are for scrapes: api/metrics.py)."""
    return {k: v for k, v in report.items() if k != agent_samples.KEY} if isinstance(report, dict) else report


def heartbeat(store: Store, ctx: Context, name: str, body: dict[str, Any], down_time: float) -> dict[str, Any]:
    """Register the host, or refresh its heartbeat and report; events only when the report changes."""
    admin_only(ctx)
    spec = parse(HostReport, body)
    spec.report = agent_samples.rendered(name, spec.report)
    with store.write() as tx:
        row = tx.conn.execute(select(H).where(H.c.name == name)).first()
        if row is None:
            tx.conn.execute(
                insert(H).values(
                    name=name, agent_version=spec.agent_version, heartbeat_at=tx.now, dead_since=None,
                    created_at=tx.now, updated_at=tx.now, revision_number=0, report=spec.report,
                    availability_zone=spec.availability_zone or zones.DEFAULT,
                )
            )  # fmt: skip
            tx.record("host", name, "create", type="host.up", detail="registered")
            _note_failures(tx, name, {}, spec.report, alone=True)
        else:
            zone = spec.availability_zone or row.availability_zone
            changed = (row.agent_version != spec.agent_version or row.dead_since or zone != row.availability_zone
                       or without_metrics(row.report) != without_metrics(spec.report))  # fmt: skip
            values: dict[str, Any] = {"heartbeat_at": tx.now, "dead_since": None}
            if row.report != spec.report:  # (new samples alone: stored, without an event that wakes every agent)
                values["report"] = spec.report
            if changed:
                values.update(
                    agent_version=spec.agent_version, report=spec.report, updated_at=tx.now, availability_zone=zone,
                    revision_number=H.c.revision_number + 1,
                )  # fmt: skip
                tx.record("host", name, "update")
                if row.dead_since:
                    tx.describe("host.up", "heartbeat again")
                _note_failures(tx, name, row.report or {}, spec.report, alone=bool(row.dead_since))
            tx.conn.execute(update(H).where(H.c.name == name).values(**values))
        row = tx.conn.execute(select(H).where(H.c.name == name)).one()
        return _host_dict(row, tx.now, down_time)


def _note_failures(tx: Tx, host: str, before: dict[str, Any], after: dict[str, Any], alone: bool) -> None:
    """A report that names objects the agent could not converge, not named before, is an agent.failure (the first
    of them as its reason); one that names none after some, agent.recovered: the host's update event becomes one,
    or (`alone`: that event is already typed) one more event says so."""
    old = {str(f.get("object")) for f in before.get("failures") or [] if isinstance(f, dict)}
    new = [f for f in after.get("failures") or [] if isinstance(f, dict) and str(f.get("object")) not in old]
    if new:
        more = f" (and {len(new) - 1} more)" if len(new) > 1 else ""
        kind, detail = "agent.failure", f"{new[0].get('object')}: {new[0].get('reason')}{more}"
    elif old and not after.get("failures"):
        kind, detail = "agent.recovered", None
    else:
        return
    if alone:
        tx.record("host", host, "update", type=kind, detail=detail)
    else:
        tx.describe(kind, detail)


def _note_status(tx: Tx, before: str, item: PortStatus) -> None:
    """A port the agent reports ACTIVE or failed: an event of that type (its reason: the agent's)."""
    if item.status == before:
        return
    if item.status == "ACTIVE":
        tx.describe("port.active", None, item.request_id)
    elif item.status == "ERROR":
        reason = (item.vif_details or {}).get("reason")
        tx.describe("port.failed", None if reason is None else str(reason), item.request_id)
    elif item.status == "DOWN":
        tx.describe("port.down", None, item.request_id)


def list_hosts(store: Store, ctx: Context, down_time: float) -> list[dict[str, Any]]:
    admin_only(ctx)
    now = utcnow()
    with store.read() as conn:
        return [_with_sriov(conn, r, _host_dict(r, now, down_time)) for r in conn.execute(select(H).order_by(H.c.name))]


def get_host(store: Store, ctx: Context, name: str, down_time: float) -> dict[str, Any]:
    admin_only(ctx)
    with store.read() as conn:
        row = conn.execute(select(H).where(H.c.name == name)).first()
        if row is None:
            raise not_found("host", name)
        return _with_sriov(conn, row, _host_dict(row, utcnow(), down_time))


def delete_host(store: Store, ctx: Context, name: str, down_time: float, force: bool = False) -> int:
    """Forget a decommissioned host (Neutron's `DELETE /v2.0/agents/{id}`, Kuryr's removed-node cleanup): its
    port pools and their ready ports go, so that their addresses are free again; returns how many ports that
    deleted. Only a host whose agent stopped heart-beating: a live one would register again at its next
    heartbeat (`force`: one whose certificates were just revoked, which cannot). Instances bound to the host (and
    their ports, pooled or not) and its SR-IOV VF reservations are left alone: they belong to their owners, who
    delete or move them."""
    admin_only(ctx)
    with store.write() as tx:
        stmt = select(H).where(H.c.name == name)
        if tx.conn.dialect.name == "postgresql":  # a heartbeat committing meanwhile waits, then finds no row
            stmt = stmt.with_for_update()
        row = tx.conn.execute(stmt).first()
        if row is None:
            raise not_found("host", name)
        if not force and alive(row, tx.now, down_time):
            raise Conflict(
                f"Host {name} is alive (heartbeat at {common.fmt_time(row.heartbeat_at)}): stop its agent first, "
                f"else it registers again at its next heartbeat; delete it once it has been silent for "
                f"{down_time:g} s.",
                type="HostAlive",
            )
        freed = pool_recovery.drop_host(tx, name)
        tx.conn.execute(delete(H).where(H.c.name == name))
        tx.record("host", name, "delete")  # (every server's cache of registered hosts follows it)
    return freed


def _with_sriov(conn: Connection, row: Any, item: dict[str, Any]) -> dict[str, Any]:
    """The host's SR-IOV PFs, physical networks and VFs with their state (free/reserved/in-use/excluded)."""
    view = sriov.host_view(conn, row.name, row.report)
    if view is not None:
        item["sriov"] = view
    return item


def sweep_dead(store: Store, down_time: float) -> list[str]:
    """Hosts whose heartbeat stopped: mark them dead once and report their ports DOWN."""
    cutoff = utcnow() - timedelta(seconds=down_time)
    with store.read() as conn:
        due = conn.execute(select(H.c.name).where(H.c.heartbeat_at < cutoff, H.c.dead_since.is_(None))).all()
    if not due:
        return []
    dead: list[str] = []
    with store.write() as tx:
        for (name,) in due:
            marked = tx.conn.execute(
                update(H)
                .where(H.c.name == name, H.c.heartbeat_at < cutoff, H.c.dead_since.is_(None))
                .values(dead_since=tx.now)
            ).rowcount
            if not marked:  # it came back, or another server swept it
                continue
            dead.append(name)
            tx.record("host", name, "update", type="host.down", detail=f"no heartbeat for {down_time:g} s")
            active = tx.conn.execute(select(P.c.id, P.c.project_id).where(P.c.host_id == name, P.c.status != "DOWN"))
            for port_id, project in active.all():
                common.touch(tx, P, port_id, "port", project, {"status": "DOWN"})
                tx.describe("port.down", "its host stopped answering")
    return dead


# Ports a host realises for a whole network (router legs, metadata ports): bound to no host, any host that has
# realised them may say so (they are ACTIVE once one has).
SHARED_OWNERS = frozenset({ROUTER_INTERFACE, ROUTER_GATEWAY, metadata_ports.DEVICE_OWNER})


def _reports_on(row: Any, host: str) -> bool:
    """Whether `host` may report the status of this port: one bound to it, or an unbound shared one."""
    return bool(row.host_id == host or (row.device_owner in SHARED_OWNERS and not row.host_id))


def report_ports(store: Store, ctx: Context, host: str, body: dict[str, Any]) -> dict[str, Any]:
    """Statuses the host's agent observed; ports bound elsewhere are refused, unchanged ones are skipped."""
    admin_only(ctx)
    spec = parse(PortStatusReport, body)
    wanted = {p.id: p for p in spec.ports}
    updated: list[str] = []
    with store.write() as tx:
        # The revision before this report's own changes: an agent whose desired state was read at exactly
        # this revision can skip the events of its own report instead of reconciling again for them.
        before = tx.revision_before()
        rows = tx.conn.execute(
            select(
                P.c.id, P.c.project_id, P.c.status, P.c.vif_type, P.c.vif_details, P.c.host_id, P.c.device_owner
            ).where(P.c.id.in_(list(wanted)))
        ).all()
        found = {r.id: r for r in rows}
        # A trunk's subports are reported by the host of their parent, and bound there (as Neutron binds them).
        riding = trunks.subports_on(tx.conn, [r.id for r in rows if r.device_owner == trunks.SUBPORT_OWNER], host)
        for port_id, item in wanted.items():
            row = found.get(port_id)
            if row is None or not (_reports_on(row, host) or port_id in riding):
                continue
            values: dict[str, Any] = {} if port_id not in riding or row.host_id == host else {"host_id": host}
            if row.status != item.status:
                values["status"] = item.status
            if row.device_owner in SHARED_OWNERS:  # (status only: their binding is no host's)
                item = PortStatus(id=port_id, status=item.status)
            if item.vif_type is not None and row.vif_type != item.vif_type:
                values["vif_type"] = item.vif_type
            details = item.vif_details
            if details is not None and "prepared_netns" in details and row.device_owner != networks.POOL_FREE_OWNER:
                # A parked namespace is offered only by a ready port: a report read before a claim must not
                # offer the namespace of a port that is in use by now.
                details = {k: v for k, v in details.items() if k != "prepared_netns"}
            if details is not None and row.vif_details != details:
                values["vif_details"] = details
            if values:
                common.touch(tx, P, port_id, "port", row.project_id, values)
                _note_status(tx, row.status, item)
                updated.append(port_id)
    ignored = set(wanted) - set(found) | {i for i, r in found.items() if not (_reports_on(r, host) or i in riding)}
    return {"updated": updated, "ignored": sorted(ignored), "revision_before": before,
            "revision": before + len(tx.events)}  # fmt: skip
