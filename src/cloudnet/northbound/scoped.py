"""The desired rows after a small change, rebuilt from the revision log instead of from the whole database.

A full read (desired.build_with_basis) keeps its rows by key, with its Basis. A later pass reads the log's events
since then in the same snapshot as the data (one event per revision, so a gap shows). When every event is of a port,
or of something the desired rows never read (instances, quotas), only the rows that depend on those ports are built
again, by the full build's own code, from the ports' rows read now and the Basis:
- each port's Logical_Switch_Port, its DHCP budget and metadata identity ACLs (desired.port_row,
  desired_dhcp.budget, desired_acls.identity_rules);
- `cloudnet_pg_drop` and the Port_Group of every group the port was or is a filtered member of (their members);
- the Address_Sets of every group in use as a remote group that the port was or is in (their addresses, read again).
Anything that may reach further is read in full instead (`advance` says None): any other event (networks, subnets,
routers, security groups and rules, forwards, hosts), a port that was or becomes special (Basis.special: router and
metadata ports, routers' gateways, ports refused or without a switch, ports holding a forward's target address), a
port taking a forward's target address (the forward's rows follow it), a group that gets its first filtered member or
loses its last (other groups' rules and which address sets exist depend on the groups in use), a gap in the log,
more than MAX_EVENTS events. Full passes (start, reconnect, failure, every FULL_EVERY seconds) always read in full.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, select

from cloudnet.northbound import desired_acls, desired_dhcp, desired_qos
from cloudnet.northbound.desired import AP, PAIRS, ROUTER_LSP_OWNERS, Basis, port_row
from cloudnet.northbound.rows import SAFE_NAME, Desired, Row, ip_key
from cloudnet.services.ports import metadata_ports
from cloudnet.services.qos import qos_state
from cloudnet.services.security.host_security import members
from cloudnet.store import tables as t

MAX_EVENTS = 500  # beyond this, a full read is as cheap
IGNORED = frozenset({"instance", "quota"})  # resources none of the desired rows is built from
DROP_KEY = "pg/drop"


def _own_keys(port_id: str) -> tuple[str, ...]:
    return (f"lsp/{port_id}", f"qos/dhcp/{port_id}", f"acl/identity/{port_id}/4", f"acl/identity/{port_id}/6",
            *desired_qos.keys(port_id))  # fmt: skip


@dataclass
class Cache:
    revision: int
    rows: dict[str, Row]  # by key, parents before their children
    refused: list[str]
    basis: Basis
    scoped: bool = False  # advanced from the log since its full read

    @classmethod
    def of(cls, desired: Desired, basis: Basis) -> Cache:
        rows: dict[str, Row] = {}
        for row in desired.rows:
            rows.setdefault(row.key, row)  # (as the writer takes them: the first of a key)
        return cls(desired.revision, rows, list(desired.refused), basis)

    def desired(self) -> Desired:
        return Desired(self.revision, list(self.rows.values()), list(self.refused))

    def advance(self, conn: Connection, revision: int) -> set[str] | None:
        """Bring the rows to `revision` (read in `conn`'s snapshot); the keys of the rows built again, or None when
        this change needs a full read (the cache is then as it was, or to be dropped)."""
        if revision == self.revision:
            return set()
        if not 0 < revision - self.revision <= MAX_EVENTS:
            return None
        E = t.events
        events = conn.execute(select(E.c.resource, E.c.resource_id).where(
            E.c.revision > self.revision, E.c.revision <= revision)).all()  # fmt: skip
        if len(events) != revision - self.revision:
            return None  # (a gap: the log was reset or trimmed)
        ports: set[str] = set()
        for resource, resource_id in events:
            if resource == "port":
                ports.add(resource_id)
            elif resource not in IGNORED:
                return None
        if ports & self.basis.special:
            return None
        built = self._build(conn, sorted(ports), revision)
        if built is None:
            return None
        changed: set[str] = set()
        for port_id in ports:
            for key in _own_keys(port_id):
                if self.rows.pop(key, None) is not None:
                    changed.add(key)
        for row in built.rows:
            self.rows[row.key] = row  # (a key kept in place, a new one after its switch)
            changed.add(row.key)
        self.revision, self.scoped = revision, True
        return changed

    def _build(self, conn: Connection, port_ids: list[str], revision: int) -> Desired | None:
        basis, acls = self.basis, self.basis.acls
        P, A, PSG = t.ports, t.ip_allocations, t.port_security_groups
        rows = {p.id: p for p in conn.execute(select(P).where(P.c.id.in_(port_ids)))}
        fixed: dict[str, list[tuple[str, str]]] = {p: [] for p in port_ids}
        for port_id, subnet_id, address in conn.execute(
            select(A.c.port_id, A.c.subnet_id, A.c.ip_address).where(A.c.port_id.in_(port_ids))
        ):
            fixed[port_id].append((subnet_id, address))
        pairs: dict[str, list[tuple[str, str]]] = {p: [] for p in port_ids}
        for port_id, mac, address in conn.execute(PAIRS.where(AP.c.port_id.in_(port_ids))):
            pairs[port_id].append((mac, address))
        groups: dict[str, list[str]] = {}
        for port_id, group_id in conn.execute(
            select(PSG.c.port_id, PSG.c.security_group_id).where(PSG.c.port_id.in_(port_ids))
        ):
            groups.setdefault(port_id, []).append(group_id)

        out = Desired(revision)
        qos = qos_state.for_ports(conn, port_ids)
        filtered = set(acls.filtered)
        touched: dict[str, set[str]] = {}  # group -> its filtered members now
        in_groups: set[str] = set()  # every group a port was or is in
        for port_id in port_ids:
            p: Any = rows.get(port_id)
            was = set(basis.groups.get(port_id, ()))
            now = groups.get(port_id, [])
            in_groups |= was | set(now)
            for g in was | set(now):
                touched.setdefault(g, set(acls.members.get(g, ())))
            for g in was:
                touched[g].discard(port_id)
            filtered.discard(port_id)
            if p is None:
                continue
            if not self._plain(p, fixed[port_id]) or any(
                (p.network_id, a) in basis.targets for _s, a in fixed[port_id]
            ):
                return None  # (taking a forward's target address: the forward's rows change too)
            fixed[port_id].sort(key=lambda item: ip_key(item[1]))
            lsp = port_row(p, fixed[port_id], pairs[port_id], basis.subnets, basis.dhcp, False)
            out.rows.append(lsp)
            if (budget := desired_dhcp.budget(lsp)) is not None:
                out.rows.append(budget)
            out.rows += desired_qos.rows(lsp, qos.get(port_id))
            identity = (p.network_id, p.mac_address, [address for _subnet, address in fixed[port_id]])
            if desired_acls.identity_rules(out, {port_id: identity}):
                return None  # (a refusal: read in full, so that the report stays the full read's)
            if p.port_security_enabled:
                filtered.add(port_id)
                for g in now:
                    touched[g].add(port_id)
        if any(bool(now) != bool(acls.members.get(g)) for g, now in touched.items()):
            return None  # a group comes into use or goes out of it
        if filtered != acls.filtered:
            out.rows.append(replace(self.rows[DROP_KEY], refs=desired_acls.member_refs(filtered)))
        for g, now in sorted(touched.items()):
            if now != acls.members.get(g, set()) and f"pg/{g}" in self.rows:
                out.rows.append(replace(self.rows[f"pg/{g}"], refs=desired_acls.member_refs(now)))
        remote = sorted(in_groups & acls.address_sets)
        for g, cidrs in members(conn, remote).items():
            desired_acls.address_sets(out, g, cidrs)
        # Only now, when nothing can call for a full read any more: the Basis follows.
        acls.filtered = filtered
        for g, now in touched.items():
            if now:
                acls.members[g] = now
            else:
                acls.members.pop(g, None)
        for port_id in port_ids:
            if port_id in rows and groups.get(port_id):
                basis.groups[port_id] = groups[port_id]
            else:
                basis.groups.pop(port_id, None)
        return out

    def _plain(self, p: Any, fixed: list[tuple[str, str]]) -> bool:
        """Whether the port's rows are its own (and its groups'): see Basis.special."""
        return (
            p.network_id in self.basis.switches
            and SAFE_NAME.fullmatch(p.id) is not None
            and p.device_owner not in ROUTER_LSP_OWNERS
            and p.device_owner != metadata_ports.DEVICE_OWNER
            and all(subnet in self.basis.subnets for subnet, _address in fixed)
        )
