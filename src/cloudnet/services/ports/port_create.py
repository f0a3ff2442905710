"""Creating ports in bulk: plan each port (network, policy, addresses, groups), then write the batch in one
transaction with set-at-a-time queries: MACs generated and retried on a clash, IPs allocated and retried when
lost to a race, groups, pairs and tags inserted together."""

from __future__ import annotations

import ipaddress
import secrets
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from cloudnet.errors import BadRequest, Conflict, InvalidInput, disallowed, not_found
from cloudnet.services import cache, common, quotas
from cloudnet.services.context import Context
from cloudnet.services.forwards import forward_targets, uplinks
from cloudnet.services.networks import ipam, networks
from cloudnet.services.networks.ipam import SubnetInfo
from cloudnet.services.ports.port_specs import ROUTER_INTERFACE, FixedIp, PortCreate
from cloudnet.services.ports.port_views import port_dict
from cloudnet.services.qos import policies as qos_policies
from cloudnet.services.security import address_pairs, port_security, security_groups
from cloudnet.services.security.address_pairs import Pair
from cloudnet.store import tables as t
from cloudnet.store.db import Tx
from cloudnet.store.prepared import BulkInsert

P = t.ports
A = t.ip_allocations
PSG = t.port_security_groups
MAC_PREFIX = "fa:16:3e"


@dataclass
class Plan:
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


class Creator:
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
        self._targets: dict[str, set[str]] = {}  # network id -> its forwards' target addresses
        self.pairs: dict[str, list[dict[str, str]]] = {}  # port id -> its allowed address pairs, as stored

    def network(self, network_id: str) -> Any:
        if network_id not in self._networks:
            self._networks[network_id] = networks.visible_in_tx(self.tx, self.ctx, network_id)
        return self._networks[network_id]

    def subnets(self, network_id: str) -> Sequence[SubnetInfo]:
        return cache.subnets(self.tx, network_id)

    def plan(self, spec: PortCreate) -> Plan:
        network = self.network(spec.network_id)
        project = common.owner_project(self.ctx, spec.project_id or spec.tenant_id, "create_port")
        if not (self.ctx.is_admin or networks.usable_in_tx(self.tx, network, project)):
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
            qos_policy_id=qos_policies.check_usable(self.tx, self.ctx, spec.qos_policy_id),
        )
        plan = Plan(row=row, network=network, tags=spec.tags, pairs=address_pairs.parse(spec.allowed_address_pairs))
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
                if subnet.auto_address and owner != ROUTER_INTERFACE:  # (Neutron's AllocationOnAutoAddressSubnet)
                    raise BadRequest(f"IPv6 address {item.ip_address} cannot be directly assigned to a port on "
                                     f"subnet {subnet.id} as the subnet is configured for automatic addresses",
                                     type="AllocationOnAutoAddressSubnet")  # fmt: skip
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

    def write(self, plans: list[Plan]) -> None:
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

    def check_requested_macs(self, plans: list[Plan]) -> None:
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

    def insert_ports(self, plans: list[Plan]) -> None:
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

    def targets(self, network_id: str) -> set[str]:
        """Forward targets of the network: a forward outlives its target's port, and its next port is one that asks
        for the address, never one IPAM picked it for (cached)."""
        if network_id not in self._targets:
            self._targets[network_id] = forward_targets.on_network(self.tx.conn, network_id)
        return self._targets[network_id]

    def check_requested_free(self, plans: list[Plan]) -> None:
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

    def allocate(self, plans: list[Plan]) -> None:
        """Fill in automatic addresses, then insert every allocation; retry any lost to a race."""
        want: dict[str, list[tuple[Plan, SubnetInfo | None, int | None]]] = defaultdict(list)
        fixed_rows: list[dict[str, str]] = []
        for p in plans:
            for subnet, ip in p.ips:
                if ip is None and subnet.auto_address:
                    fixed_rows.append(self._alloc_row(p, subnet, ipam.eui64(subnet.cidr, p.row["mac_address"])))
                elif ip is None:
                    want[subnet.id].append((p, subnet, None))
                else:
                    fixed_rows.append(self._alloc_row(p, subnet, ip))
            for version in p.auto_versions:
                # Every automatic-address subnet gives the port its EUI-64 (as Neutron does); the others one
                # address of this version between them.
                auto = [s for s in self.subnets(p.network.id) if s.version == version and s.auto_address]
                fixed_rows += [self._alloc_row(p, s, ipam.eui64(s.cidr, p.row["mac_address"])) for s in auto]
                if any(s.version == version and not s.auto_address for s in self.subnets(p.network.id)):
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
        self, requests: list[tuple[Plan, SubnetInfo | None, int | None]], *, optimistic: bool = False
    ) -> list[Any]:
        """Allocate for requests that share one subnet (or one network and IP version)."""
        plan0, subnet0, version = requests[0]
        candidates = [subnet0] if subnet0 is not None else [
            s for s in self.subnets(plan0.network.id) if s.version == version and not s.auto_address
        ]  # fmt: skip
        remaining = list(requests)
        rows: list[dict[str, str]] = []
        exclude = self.external_in_use() if plan0.network.router_external else self.targets(plan0.network.id)
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

    def results(self, plans: list[Plan]) -> list[dict[str, Any]]:
        """The created ports in API shape, from what was written (no read-back queries)."""
        return [port_dict(p.row, self.allocated[p.row["id"]], p.sgs, sorted(set(p.tags)), self.pairs.get(p.row["id"]))
                for p in plans]  # fmt: skip

    @staticmethod
    def _alloc_row(plan: Plan, subnet: SubnetInfo, ip: str) -> dict[str, str]:
        return {"subnet_id": subnet.id, "ip_address": ip, "network_id": subnet.network_id, "port_id": plan.row["id"]}


def _fresh_mac(network_id: str, used: set[tuple[str, str]]) -> str:
    while True:
        b = secrets.token_bytes(3)
        mac = f"{MAC_PREFIX}:{b[0]:02x}:{b[1]:02x}:{b[2]:02x}"
        if (network_id, mac) not in used:
            used.add((network_id, mac))
            return mac
