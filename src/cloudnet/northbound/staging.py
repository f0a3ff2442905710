"""New logical switch ports reach ovn-northd alone, disabled, before the pass that enables them and writes the rest.

Why: ovn-northd 25.03 (incremental processing) leaves a Logical_Switch_Port out of its switch's flood groups
(`_MC_flood`, `_MC_flood_l2` in SB's Multicast_Group) when the changes it takes in at once add the port and change
ACLs (the switch's `acls`, a port group's), and nothing but a full recompute puts it back: such a port gets unicast
but no broadcast or multicast (no ARP request, no RA, so no SLAAC address for a VM). Every new port of cloudnet
comes with such changes (its metadata identity ACLs, its security groups' port groups). Seen with `ovn-nbctl
lsp-add ... -- acl-add ...` against 25.03's northd, and with two writer transactions northd took in together (a
pass's ACLs, then the next pass's new ports). A port northd takes in alone is put in the groups, and stays there
when the next transaction enables it and adds its ACLs.

So the writer keeps new ports out of any northd run that takes in other changes: each pass that wrote something
ends with a fence (NB_Global's nb_cfg bumped, then a wait until northd's sb_cfg reaches it, as `ovn-nbctl
--wait=sb` does; a full pass, after a failed one, fences first too); a pass that creates LSPs on switches NB
already has first inserts them alone, with their columns but `enabled` false (OVN drops all their traffic
meanwhile: nothing passes before its filter is in), linked into their switches, and waits for northd again; the
transaction that follows (apply.py) finds the rows by their keys as any other, enables them and writes their ACLs
and group memberships. A port whose switch is new is left to that pass (a new switch makes northd recompute). A northd
that recomputes in full on every change (OVN 23.03, NB schema 7.0) does not need this and is spared the fences.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ovsdbapp.backend.ovs_idl.command import BaseCommand

from cloudnet.northbound.mirror import Mirror, NbIdl
from cloudnet.northbound.rows import KEY, Row

TABLE = "Logical_Switch_Port"
FENCE_WAIT = 2.0  # seconds a fence waits for northd at most (then the pass goes on: northd may be away)


def needed(schema_version: str) -> bool:
    """Whether NB's northd processes changes incrementally (after NB schema 7.0: OVN 23.03's)."""
    return tuple(int(x) for x in schema_version.split(".")[:2]) > (7, 0)


def to_stage(rows: list[Row], mirror: Mirror, tables: dict[str, Any], idl: Any = None) -> list[tuple[Row, Any]]:
    """The LSP specs NB has no row for yet whose switch it has: (spec, the switch's IDL row). Rows inserted since
    the mirror's index was last brought up to date (a staging whose pass then failed) count as there."""
    present: dict[str, Any] = {}
    for row_id, (table, key) in mirror.index.items():
        if table in (TABLE, "Logical_Switch"):
            idl_row = tables[table].rows.get(row_id)
            if idl_row is not None:
                present[key] = idl_row
    for row_id in idl.inserted() if isinstance(idl, NbIdl) else ():
        idl_row = tables[TABLE].rows.get(row_id)
        key = None if idl_row is None else idl_row.external_ids.get(KEY)
        if key is not None:
            present[key] = idl_row
    return [(spec, present[spec.parent]) for spec in rows
            if spec.table == TABLE and spec.key not in present and spec.parent in present]  # fmt: skip


class StageNewPorts(BaseCommand):  # type: ignore[misc]
    """The ovsdbapp command of a fence (`insert` False: only nb_cfg bumped) or of the staging (the ports inserted,
    and nb_cfg bumped); neither writes anything when there is nothing to stage. Result: how many there are;
    `target`: the nb_cfg to wait for."""

    def __init__(self, api: Any, rows: list[Row], mirror: Mirror, insert: bool) -> None:
        super().__init__(api)
        self.rows, self.mirror, self.insert = rows, mirror, insert
        self.target: int | None = None

    def run_idl(self, txn: Any) -> None:
        tables = self.api.tables
        staged = to_stage(self.rows, self.mirror, tables, self.api.idl)
        self.result = len(staged)
        if not staged:
            return
        for spec, switch in staged if self.insert else ():
            idl_row = txn.insert(tables[TABLE])
            for column, value in spec.columns.items():
                setattr(idl_row, column, value)
            idl_row.enabled = [False]
            switch.addvalue(spec.parent_column, idl_row)
        self.target = bump(tables)


class Fence(BaseCommand):  # type: ignore[misc]
    """NB_Global's nb_cfg bumped, nothing else: `target` the value to wait for."""

    def __init__(self, api: Any) -> None:
        super().__init__(api)
        self.target: int | None = None

    def run_idl(self, txn: Any) -> None:
        self.target = self.result = bump(self.api.tables)


def bump(tables: dict[str, Any]) -> int:
    """nb_cfg one up (set, not the IDL's increment: the Python IDL drops an increment from a transaction with nothing
    else); the new value."""
    nb_global = next(iter(tables["NB_Global"].rows.values()))
    value = int(nb_global.nb_cfg) + 1
    nb_global.nb_cfg = value
    return value


class NorthdCfg(BaseCommand):  # type: ignore[misc]
    """NB_Global's sb_cfg: the nb_cfg northd has taken NB in up to (ovsdbapp's lookup by "." knows no NB_Global)."""

    def run_idl(self, txn: Any) -> None:
        self.result = next(iter(self.api.tables["NB_Global"].rows.values())).sb_cfg


def wait_northd(api: Any, changed: threading.Event, target: int, timeout: float = FENCE_WAIT) -> bool:
    """Wait until northd has taken in NB up to nb_cfg `target` (NB_Global's sb_cfg); False when it did not in time.
    `changed` is set whenever NB_Global changes (mirror.NbIdl)."""
    deadline = time.monotonic() + timeout
    while True:
        changed.clear()
        if int(NorthdCfg(api).execute(check_error=True)) >= target:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        changed.wait(left)
