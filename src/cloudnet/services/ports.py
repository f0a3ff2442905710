"""Ports: addresses (IPAM), MACs, security groups, port security and binding attributes; bulk create is atomic."""

from __future__ import annotations

import ipaddress
import secrets
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from sqlalchemy import Connection, and_, delete, or_, select
from sqlalchemy.exc import IntegrityError

from cloudnet.errors import BadRequest, Conflict, InvalidInput, disallowed, not_found
from cloudnet.services import (
    address_pairs,
    cache,
    common,
    floating_common,
    forward_deps,
    ipam,
    networks,
    port_policy,
    port_security,
    quotas,
    security_groups,
    uplinks,
)
from cloudnet.services.address_pairs import Pair
from cloudnet.services.context import Context
from cloudnet.services.ipam import SubnetInfo
from cloudnet.services.query import Attr, ListQuery, Page, fetch_page, to_bool
from cloudnet.services.security_groups import GroupIds
from cloudnet.services.validation import Body, Tags, check_ip, check_mac, parse
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx
from cloudnet.store.prepared import BulkInsert

P = t.ports
A = t.ip_allocations
PSG = t.port_security_groups
MAC_PREFIX = "fa:16:3e"
ROUTER_INTERFACE = port_policy.ROUTER_INTERFACE
ROUTER_GATEWAY = port_policy.ROUTER_GATEWAY
ROUTER_OWNERS = (ROUTER_INTERFACE, ROUTER_GATEWAY)
VNIC_TYPES = ("normal", "direct")


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
    "binding:vnic_type": Attr(P.c.vnic_type),
    "binding:host_id": Attr(P.c.host_id),
    "binding:vif_type": Attr(P.c.vif_type),
    "fixed_ips": Attr(filter=_fixed_ips_filter, sortable=False),
    "security_groups": Attr(
        filter=lambda values: P.c.id.in_(select(PSG.c.port_id).where(PSG.c.security_group_id.in_(values))),
        sortable=False,
    ),
}


class FixedIp(Body):
    subnet_id: str | None = None
    ip_address: str | None = None

    _ip = field_validator("ip_address")(lambda v: None if v is None else check_ip(v))

    @model_validator(mode="after")
    def _one(self) -> FixedIp:
        if self.subnet_id is None and self.ip_address is None:
            raise ValueError("a fixed IP needs a subnet_id, an ip_address or both")
        return self


def _mac(value: str | None) -> str | None:
    return None if value is None else check_mac(value)


class PortCreate(Body):
    network_id: str
    name: str = Field("", max_length=255)
    description: str = Field("", max_length=255)
    project_id: str | None = Field(None, max_length=255)
    tenant_id: str | None = Field(None, max_length=255)
    admin_state_up: bool = True
    mac_address: str | None = None
    fixed_ips: list[FixedIp] | None = None
    device_id: str = Field("", max_length=255)
    device_owner: str = Field("", max_length=255)
    security_groups: GroupIds | None = None
    # None: the network's (port_security.for_new_port).
    port_security_enabled: bool | None = None
    allowed_address_pairs: Any = None  # checked by address_pairs.parse, with Neutron's errors
    vnic_type: Literal["normal", "direct"] = Field("normal", alias="binding:vnic_type")
    host_id: str = Field("", alias="binding:host_id", max_length=255)
    profile: dict[str, Any] | None = Field(None, alias="binding:profile")
    tags: Tags

    _mac = field_validator("mac_address")(_mac)


class PortUpdate(Body):
    name: str | None = Field(None, max_length=255)
    description: str | None = Field(None, max_length=255)
    admin_state_up: bool | None = None
    mac_address: str | None = None
    fixed_ips: list[FixedIp] | None = None
    device_id: str | None = Field(None, max_length=255)
    device_owner: str | None = Field(None, max_length=255)
    security_groups: GroupIds | None = None
    port_security_enabled: bool | None = None
    allowed_address_pairs: Any = None
    vnic_type: Literal["normal", "direct"] | None = Field(None, alias="binding:vnic_type")
    host_id: str | None = Field(None, alias="binding:host_id", max_length=255)
    profile: dict[str, Any] | None = Field(None, alias="binding:profile")

    _mac = field_validator("mac_address")(_mac)


READ_ONLY = ("id", "status", "binding:vif_type", "binding:vif_details", "created_at", "updated_at", "revision_number")


# -- reading ------------------------------------------------------------------------------------


def to_dicts(conn: Connection, rows: list[Any], fields: set[str] | None = None) -> list[dict[str, Any]]:
    which = RELATED_FIELDS if not fields else RELATED_FIELDS & fields
    extra = related(conn, [r.id for r in rows], which)
    ips, sgs, tags = extra.get("fixed_ips", {}), extra.get("security_groups", {}), extra.get("tags", {})
    pairs = extra.get("allowed_address_pairs", {})
    keys = rows[0]._fields if rows else ()
    return [
        port_dict(dict(zip(keys, r, strict=True)), ips.get(r.id, []), sgs.get(r.id, []), tags.get(r.id),
                  pairs.get(r.id, []))
        for r in rows
    ]  # fmt: skip


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
    "revision_number": P.c.revision_number,
}  # fmt: skip
RELATED_FIELDS = {"fixed_ips", "security_groups", "tags", "allowed_address_pairs"}


def list_ports(store: Store, ctx: Context, q: ListQuery) -> Page:
    fields = set(q.fields)
    projected = bool(fields) and fields <= COLUMN_FIELDS.keys() | RELATED_FIELDS
    with store.read() as conn:
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


def get_port(store: Store, ctx: Context, port_id: str) -> dict[str, Any]:
    with store.read() as conn:
        return to_dicts(conn, [common.get_row(conn, P, "port", port_id, ctx)])[0]


def load(conn: Connection, ids: list[str]) -> list[dict[str, Any]]:
    rows = {r.id: r for chunk in common.chunks(ids, 5000) for r in conn.execute(select(P).where(P.c.id.in_(chunk)))}
    return to_dicts(conn, [rows[i] for i in ids])


# -- creating -----------------------------------------------------------------------------------


@dataclass
class _Plan:
    row: dict[str, Any]
    network: Any
    # (subnet, requested address or None for "any free one")
    ips: list[tuple[SubnetInfo, str | None]] = field(default_factory=list)
    # IP versions for which to pick a subnet and address automatically.
    auto_versions: list[int] = field(default_factory=list)
    sgs: list[str] = field(default_factory=list)
    pairs: list[Pair] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)


# A generated MAC that another port of the network already has is not an error: that port gets a new one.
_INSERT_PORT = BulkInsert(P, [c.name for c in P.c], conflict=["network_id", "mac_address"], returning=["id"])
_INSERT_PSG = BulkInsert(PSG, ["port_id", "security_group_id"])
_INSERT_TAG = BulkInsert(t.tags, ["resource_id", "tag"])
# Rounds of "generate MACs, insert, regenerate those that clashed": 16M MACs per network make a second rare.
MAC_ATTEMPTS = 20


class _Creator:
    """Plans, then writes, a batch of ports in one transaction with set-at-a-time queries."""

    def __init__(self, tx: Tx, ctx: Context, *, quota: bool = True) -> None:
        self.tx, self.ctx = tx, ctx
        self.quota = quota  # checked for what a request creates, not for the ports cloudnet makes itself
        self._networks: dict[str, Any] = {}
        self._default_sg: dict[str, str] = {}
        self._usable: dict[tuple[str, ...], list[str]] = {}
        # port id -> the fixed IPs actually inserted for it, so results need no read-back.
        self.allocated: dict[str, list[dict[str, str]]] = defaultdict(list)
        self._taken: dict[str, set[str]] = defaultdict(set)  # subnet id -> addresses allocated here
        self._external_in_use: set[str] | None = None
        self.pairs: dict[str, list[dict[str, str]]] = {}  # port id -> its allowed address pairs, as stored

    def network(self, network_id: str) -> Any:
        if network_id not in self._networks:
            self._networks[network_id] = networks.visible_in_tx(self.tx, self.ctx, network_id)
        return self._networks[network_id]

    def subnets(self, network_id: str) -> Sequence[SubnetInfo]:
        return cache.subnets(self.tx, network_id)

    def plan(self, spec: PortCreate) -> _Plan:
        network = self.network(spec.network_id)
        project = common.owner_project(self.ctx, spec.project_id or spec.tenant_id, "create_port")
        if network.project_id != project and not (network.shared or self.ctx.is_admin):
            # Neutron's _validate_network_tenant_ownership: 404, an external network included (its addresses
            # go to routers and forwards, not to ports of other projects).
            raise not_found("network", spec.network_id)
        if spec.mac_address is not None and not self.ctx.is_admin and network.project_id != project:
            raise disallowed("create_port:mac_address")
        if any(f.ip_address for f in spec.fixed_ips or []) and not self.ctx.is_admin and network.project_id != project:
            # Neutron's create_port:fixed_ips:ip_address policy: a subnet_id alone is fine on a shared network.
            raise disallowed("create_port:fixed_ips:ip_address")
        given = {k for k in spec.model_fields_set if getattr(spec, k) is not None}
        port_security.check_policy(self.ctx, network, given, "create_port")
        row = common.new_standard(self.ctx, project, self.tx.now, spec.name, spec.description)
        secured = port_security.for_new_port(network, spec.device_owner, spec.port_security_enabled)
        row.update(
            network_id=network.id,
            mac_address=spec.mac_address,
            admin_state_up=spec.admin_state_up,
            status="DOWN",
            device_id=spec.device_id,
            device_owner=spec.device_owner,
            port_security_enabled=secured,
            vnic_type=spec.vnic_type,
            host_id=spec.host_id,
            profile=spec.profile or {},
            vif_type="unbound",
            vif_details={},
        )
        plan = _Plan(row=row, network=network, tags=spec.tags, pairs=address_pairs.parse(spec.allowed_address_pairs))
        port_security.check_new_port(secured, spec.security_groups, plan.pairs)
        if spec.fixed_ips is None:
            versions = sorted({s.version for s in self.subnets(network.id)})
            plan.auto_versions = versions
        else:
            plan.ips = self.requested_ips(network.id, spec.fixed_ips, spec.device_owner)
        plan.sgs = self.security_groups(spec.security_groups, secured, project)
        return plan

    def requested_ips(self, network_id: str, fixed: list[FixedIp], owner: str) -> list[tuple[SubnetInfo, str | None]]:
        subnets = {s.id: s for s in self.subnets(network_id)}
        out: list[tuple[SubnetInfo, str | None]] = []
        for item in fixed:
            if item.subnet_id is not None:
                subnet = subnets.get(item.subnet_id)
                if subnet is None:
                    raise InvalidInput(
                        f"Failed to create port on network {network_id}, because fixed_ips included invalid "
                        f"subnet {item.subnet_id}."
                    )
            else:
                ip = ipaddress.ip_address(item.ip_address or "")
                subnet = next((s for s in subnets.values() if s.contains(ip)), None)
                if subnet is None:
                    raise InvalidInput(
                        f"Failed to create port on network {network_id}, because fixed_ips included invalid "
                        f"IP address {item.ip_address}."
                    )
            if item.ip_address is not None:
                ip = ipaddress.ip_address(item.ip_address)
                if not subnet.contains(ip) or subnet.reserved(ip):
                    raise BadRequest(
                        f"IP address {item.ip_address} is not a valid IP for the specified subnet.",
                        type="InvalidIpForSubnet",
                    )
                if item.ip_address == subnet.gateway_ip and owner not in (ROUTER_INTERFACE,):
                    raise ipam.already_allocated(item.ip_address, network_id)
            entry = (subnet, item.ip_address)
            if item.ip_address is not None and entry in out:
                raise InvalidInput(f"Duplicate IP address '{item.ip_address}' in fixed_ips")
            out.append(entry)
        return out

    def security_groups(self, requested: list[str] | None, secured: bool, project: str) -> list[str]:
        """The port's groups: those requested, else the project's default group (none without port security)."""
        if not secured:  # (port_security.check_new_port refused any requested)
            return []
        if requested is not None:  # checked once per batch (a pool refill gives every port the same groups)
            key = (project, *requested)
            if key not in self._usable:
                self._usable[key] = security_groups.check_usable(self.tx.conn, self.ctx, requested, project)
            return list(self._usable[key])
        if project not in self._default_sg:
            self._default_sg[project] = security_groups.ensure_default(self.tx, project)
        return [self._default_sg[project]]

    # -- writing --

    def write(self, plans: list[_Plan]) -> None:
        if self.quota:
            per_project: dict[str, int] = defaultdict(int)
            for p in plans:
                if p.row["device_owner"] not in quotas.UNCOUNTED_PORT_OWNERS:
                    per_project[p.row["project_id"]] += 1
            for project, n in sorted(per_project.items()):
                quotas.enforce(self.tx, project, "port", n)
        self.check_requested_macs(plans)
        self.check_requested_free(plans)
        self.insert_ports(plans)
        self.allocate(plans)
        conn = self.tx.conn
        _INSERT_PSG.run(conn, [{"port_id": p.row["id"], "security_group_id": sg} for p in plans for sg in p.sgs])
        # (after insert_ports: a pair without a MAC gets the port's, generated or not)
        self.pairs = {p.row["id"]: address_pairs.resolve(p.pairs, p.row["mac_address"]) for p in plans if p.pairs}
        address_pairs.insert(conn, self.pairs.items())
        _INSERT_TAG.run(conn, [{"resource_id": p.row["id"], "tag": tag} for p in plans for tag in sorted(set(p.tags))])
        for p in plans:
            self.tx.record("port", p.row["id"], "create", p.row["project_id"])

    def check_requested_macs(self, plans: list[_Plan]) -> None:
        by_network: dict[str, list[str]] = defaultdict(list)
        for p in plans:
            if p.row["mac_address"]:
                by_network[p.row["network_id"]].append(p.row["mac_address"])
        for network_id, chosen in by_network.items():
            taken = self._macs_in_use(network_id, chosen)
            if taken or len(set(chosen)) != len(chosen):
                mac = taken[0] if taken else next(m for m in chosen if chosen.count(m) > 1)
                raise Conflict(
                    f"Unable to complete operation for network {network_id}. The mac address {mac} is in use.",
                    type="MacAddressInUse",
                )

    def insert_ports(self, plans: list[_Plan]) -> None:
        """Insert the port rows, generating the MACs not given; a generated one that clashes is replaced."""
        generated = {p.row["id"] for p in plans if not p.row["mac_address"]}
        used = {(p.row["network_id"], p.row["mac_address"]) for p in plans if p.row["mac_address"]}
        pending = plans
        for _attempt in range(MAC_ATTEMPTS):
            for p in pending:
                if p.row["id"] in generated:
                    p.row["mac_address"] = _fresh_mac(p.row["network_id"], used)
            try:
                inserted = {r[0] for r in _INSERT_PORT.run(self.tx.conn, [p.row for p in pending])}
            except IntegrityError as exc:
                if "foreign key" in str(exc.orig).lower():  # the network was deleted since plan() read it
                    raise not_found("network", pending[0].row["network_id"]) from None
                raise
            pending = [p for p in pending if p.row["id"] not in inserted]
            if not pending:
                return
            if any(p.row["id"] not in generated for p in pending):
                break
        raise Conflict("A MAC address was taken concurrently; retry the request.", type="MacAddressInUse")

    def _macs_in_use(self, network_id: str, macs: list[str]) -> list[str]:
        out: list[str] = []
        for chunk in common.chunks(macs, 5000):
            stmt = select(P.c.mac_address).where(P.c.network_id == network_id, P.c.mac_address.in_(chunk))
            out += [r[0] for r in self.tx.conn.execute(stmt)]
        return out

    def external_in_use(self) -> set[str]:
        """Forward listen and SNAT addresses: an external network's ports must not get them (cached)."""
        if self._external_in_use is None:
            self._external_in_use = uplinks.external_addresses_in_use(self.tx.conn)
        return self._external_in_use

    def check_requested_free(self, plans: list[_Plan]) -> None:
        by_subnet: dict[str, list[str]] = defaultdict(list)
        for p in plans:
            for subnet, ip in p.ips:
                if ip is not None:
                    if ip in by_subnet[subnet.id]:
                        raise ipam.already_allocated(ip, subnet.network_id)
                    if p.network.router_external and ip in self.external_in_use():
                        raise ipam.already_allocated(ip, subnet.network_id)
                    by_subnet[subnet.id].append(ip)
        for subnet_id, ips in by_subnet.items():
            for chunk in common.chunks(ips, 5000):
                taken = self.tx.conn.execute(
                    select(A.c.ip_address, A.c.network_id).where(A.c.subnet_id == subnet_id, A.c.ip_address.in_(chunk))
                ).first()
                if taken:
                    raise ipam.already_allocated(taken[0], taken[1])

    def allocate(self, plans: list[_Plan]) -> None:
        """Fill in automatic addresses, then insert every allocation; retry any lost to a race."""
        want: dict[str, list[tuple[_Plan, SubnetInfo | None, int | None]]] = defaultdict(list)
        fixed_rows: list[dict[str, str]] = []
        for p in plans:
            for subnet, ip in p.ips:
                if ip is None:
                    want[subnet.id].append((p, subnet, None))
                else:
                    fixed_rows.append(self._alloc_row(p, subnet, ip))
            for version in p.auto_versions:
                want[f"{p.network.id}/v{version}"].append((p, None, version))
        lost = self._insert_allocations(fixed_rows)
        if lost:
            _subnet_id, ip = next(iter(lost))
            raise ipam.already_allocated(ip, next(r["network_id"] for r in fixed_rows if r["ip_address"] == ip))
        for _key, requests in want.items():
            # First the addresses after the cursor, unchecked (almost always free); then scans replace the
            # taken ones. Every address lost is now taken for good, so this ends: all allocated, or
            # _allocate_group finds the pool exhausted (the bound only guards against endless churn).
            pending = self._allocate_group(requests, optimistic=True)
            for _attempt in range(ipam.MAX_ATTEMPTS):
                if not pending:
                    break
                pending = self._allocate_group(pending)
            if pending:
                raise ipam.generation_failed(pending[0][0].network.id)

    def _allocate_group(
        self, requests: list[tuple[_Plan, SubnetInfo | None, int | None]], *, optimistic: bool = False
    ) -> list[Any]:
        """Allocate for requests that share one subnet (or one network and IP version)."""
        plan0, subnet0, version = requests[0]
        candidates = [subnet0] if subnet0 is not None else [
            s for s in self.subnets(plan0.network.id) if s.version == version
        ]  # fmt: skip
        remaining = list(requests)
        rows: list[dict[str, str]] = []
        exclude = self.external_in_use() if plan0.network.router_external else set()
        for subnet in candidates:
            if not remaining:
                break
            if optimistic:  # not the addresses this transaction took already (requested ones)
                free = ipam.next_after_cursor(subnet, len(remaining), exclude | self._taken[subnet.id])
            else:
                free = ipam.find_free(self.tx.conn, subnet, len(remaining), exclude)
            for ip in free:
                req = remaining.pop(0)
                rows.append(self._alloc_row(req[0], subnet, ip))
        if remaining:
            raise ipam.generation_failed(plan0.network.id)
        lost = self._insert_allocations(rows)
        if not lost:
            return []
        by_port = {p.row["id"]: p for p, _s, _v in requests}
        return [(by_port[r["port_id"]], subnet0, version) for r in rows if (r["subnet_id"], r["ip_address"]) in lost]

    def _insert_allocations(self, rows: list[dict[str, str]]) -> set[tuple[str, str]]:
        try:
            lost = ipam.insert_allocations(self.tx.conn, rows)
        except IntegrityError as exc:
            if "foreign key" in str(exc.orig).lower():  # a subnet was deleted since it was read
                raise not_found("subnet", rows[0]["subnet_id"]) from None
            raise
        for r in rows:
            if (r["subnet_id"], r["ip_address"]) not in lost:
                self.allocated[r["port_id"]].append({"subnet_id": r["subnet_id"], "ip_address": r["ip_address"]})
                self._taken[r["subnet_id"]].add(r["ip_address"])
        return lost

    def results(self, plans: list[_Plan]) -> list[dict[str, Any]]:
        """The created ports in API shape, from what was written (no read-back queries)."""
        return [port_dict(p.row, self.allocated[p.row["id"]], p.sgs, sorted(set(p.tags)), self.pairs.get(p.row["id"]))
                for p in plans]  # fmt: skip

    @staticmethod
    def _alloc_row(plan: _Plan, subnet: SubnetInfo, ip: str) -> dict[str, str]:
        return {"subnet_id": subnet.id, "ip_address": ip, "network_id": subnet.network_id, "port_id": plan.row["id"]}


def _fresh_mac(network_id: str, used: set[tuple[str, str]]) -> str:
    while True:
        b = secrets.token_bytes(3)
        mac = f"{MAC_PREFIX}:{b[0]:02x}:{b[1]:02x}:{b[2]:02x}"
        if (network_id, mac) not in used:
            used.add((network_id, mac))
            return mac


def create_in_tx(tx: Tx, ctx: Context, specs: list[PortCreate], *, quota: bool = True) -> list[str]:
    """Create ports for a caller inside `tx`; `quota` False for the ports cloudnet makes for itself (a router's
    interface and gateway, a network's metadata port), which Neutron does not check either."""
    creator = _Creator(tx, ctx, quota=quota)
    plans = [creator.plan(s) for s in specs]
    creator.write(plans)
    return [p.row["id"] for p in plans]


def create_ports(store: Store, ctx: Context, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for b in bodies:
        _reject_read_only(b, "POST")
    specs = [parse(PortCreate, b) for b in bodies]
    for spec in specs:
        port_policy.check_binding(ctx, spec.model_fields_set, "create")
    with store.write() as tx:
        creator = _Creator(tx, ctx)
        plans = [creator.plan(s) for s in specs]
        for p in plans:
            row = p.row
            port_policy.check(tx.conn, ctx, row["device_owner"], row["device_id"], row["project_id"], p.network)
        creator.write(plans)
        return creator.results(plans)


def _reject_read_only(body: Any, method: str) -> None:
    if isinstance(body, dict):
        for key in READ_ONLY:
            if key in body:
                raise BadRequest(f"Attribute '{key}' not allowed in {method}")


# -- updating and deleting ----------------------------------------------------------------------


def update_port(store: Store, ctx: Context, port_id: str, body: dict[str, Any]) -> dict[str, Any]:
    _reject_read_only(body, "PUT")
    if isinstance(body, dict) and "network_id" in body:
        raise BadRequest("Attribute 'network_id' not allowed in PUT")
    spec = parse(PortUpdate, body)
    with store.write() as tx:
        row = common.get_row(tx.conn, P, "port", port_id, ctx)  # (404 first for a port the caller cannot see)
        port_policy.check_binding(ctx, spec.model_fields_set, "update")
        if spec.device_owner is not None or spec.device_id is not None:
            owner = row.device_owner if spec.device_owner is None else spec.device_owner
            device = row.device_id if spec.device_id is None else spec.device_id
            port_policy.check(tx.conn, ctx, owner, device, row.project_id, cache.network(tx, row.network_id))
        # A router leg's change may move its network's uplink, which the network's forwards keep.
        leg = {row.network_id} if ROUTER_INTERFACE in (row.device_owner, spec.device_owner) else set()
        with forward_deps.links_kept(tx.conn, leg, f"Port {port_id} cannot be changed", "UplinkInUseByForward"):
            update_in_tx(tx, ctx, port_id, spec)
        return load(tx.conn, [port_id])[0]


def update_in_tx(tx: Tx, ctx: Context, port_id: str, spec: PortUpdate, extra: dict[str, Any] | None = None) -> None:
    row = common.get_row(tx.conn, P, "port", port_id, ctx)
    given = spec.model_fields_set
    changes: dict[str, Any] = dict(extra or {})
    # What lives in other tables is compared before and after: a no-op update bumps nothing.
    side = sorted({"fixed_ips", "security_groups", "allowed_address_pairs"} & given)
    before = {k: v for k, v in load(tx.conn, [port_id])[0].items() if k in side} if side else {}
    for key in ("name", "description", "admin_state_up", "device_id", "device_owner", "vnic_type", "host_id"):
        if key in given and getattr(spec, key) is not None:
            changes[key] = getattr(spec, key)
    if "profile" in given:
        changes["profile"] = spec.profile or {}
    if "mac_address" in given and spec.mac_address and spec.mac_address != row.mac_address:
        if not ctx.is_admin:
            raise disallowed("update_port:mac_address")
        if row.vif_type not in ("unbound", "binding_failed"):
            raise Conflict(f"Unable to complete operation on port {port_id}, port is already bound", type="PortBound")
        clash = tx.conn.execute(
            select(P.c.id).where(P.c.network_id == row.network_id, P.c.mac_address == spec.mac_address)
        ).first()
        if clash:
            raise Conflict(
                f"Unable to complete operation for network {row.network_id}. "
                f"The mac address {spec.mac_address} is in use.",
                type="MacAddressInUse",
            )
        changes["mac_address"] = spec.mac_address
    if {"port_security_enabled", "security_groups", "allowed_address_pairs"} & given:
        mac = changes.get("mac_address", row.mac_address)
        changes.setdefault("port_security_enabled", port_security.update(tx, ctx, row, spec, mac))
    if "fixed_ips" in given:
        _update_fixed_ips(tx, ctx, row, spec.fixed_ips or [], changes.get("device_owner", row.device_owner))
    after = {k: v for k, v in load(tx.conn, [port_id])[0].items() if k in side} if side else {}
    common.touch(tx, P, port_id, "port", row.project_id, changes, row=row, changed=after != before)


def _update_fixed_ips(tx: Tx, ctx: Context, row: Any, fixed: list[FixedIp], owner: str) -> None:
    creator = _Creator(tx, ctx)
    requested = creator.requested_ips(row.network_id, fixed, owner)
    current = {
        (sid, ip) for sid, ip in tx.conn.execute(select(A.c.subnet_id, A.c.ip_address).where(A.c.port_id == row.id))
    }
    keep: set[tuple[str, str]] = set()
    new: list[tuple[SubnetInfo, str | None]] = []
    for subnet, ip in requested:
        if ip is not None and (subnet.id, ip) in current:
            keep.add((subnet.id, ip))
        elif ip is None and (held := next((c for c in current if c[0] == subnet.id and c not in keep), None)):
            keep.add(held)
        else:
            new.append((subnet, ip))
    for sid, ip in current - keep:
        tx.conn.execute(delete(A).where(A.c.subnet_id == sid, A.c.ip_address == ip))
    network = creator.network(row.network_id)
    if any(ip for _subnet, ip in new) and not ctx.is_admin and network.project_id != row.project_id:
        raise disallowed("update_port:fixed_ips:ip_address")
    if new:
        plan = _Plan(row={"id": row.id}, network=network, ips=new)
        creator.check_requested_free([plan])
        creator.allocate([plan])


def delete_port(store: Store, ctx: Context, port_id: str) -> None:
    with store.write() as tx:
        row = common.get_row(tx.conn, P, "port", port_id, ctx)
        # As Neutron: a router's port is refused only while that router exists (else it is an orphan).
        R = t.routers
        router = select(R.c.id).where(or_(R.c.id == row.device_id, R.c.gw_port_id == row.id))
        if row.device_owner in ROUTER_OWNERS and tx.conn.execute(router).first():
            raise Conflict(
                f"Port {port_id} cannot be deleted directly via the port API: has device owner {row.device_owner}.",
                type="ServicePortInUse",
            )
        delete_in_tx(tx, row)


def delete_in_tx(tx: Tx, row: Any) -> None:
    floating_common.release_port(tx, row)  # its floating IPs and port forwardings let go of it, as in Neutron
    tx.conn.execute(delete(A).where(A.c.port_id == row.id))
    tx.conn.execute(delete(PSG).where(PSG.c.port_id == row.id))
    tx.conn.execute(delete(t.tags).where(t.tags.c.resource_id == row.id))
    tx.conn.execute(delete(P).where(P.c.id == row.id))
    tx.record("port", row.id, "delete", row.project_id)
