"""New logical switch ports go into NB in a transaction of their own, disabled, before the pass that writes the rest.

Why: ovn-northd 25.03 (incremental processing) leaves a Logical_Switch_Port out of its switch's flood groups
(`_MC_flood`, `_MC_flood_l2` in SB's Multicast_Group) when the transaction that adds it also changes ACLs (the
switch's `acls`, or a port group's), and nothing but a full recompute puts it back: such a port gets unicast but no
broadcast or multicast (no ARP request, no RA, so no SLAAC address for a VM). Every new port of cloudnet comes with
such a change (its metadata identity ACLs, its security groups' port groups). Seen with `ovn-nbctl lsp-add ... --
acl-add ...` against 25.03's northd; 23.03's recomputes and is not affected. A port added alone is put in the groups,
and stays there when the next transaction enables it and adds its ACLs.

So the writer first inserts each LSP it is about to create on a switch NB already has, with its columns but
`enabled` false (OVN drops all its traffic meanwhile: nothing passes before its filter is in), linked into the
switch; the pass that follows (apply.py) finds the row by its key as any other, enables it and writes its ACLs and
group memberships in one transaction. A port whose switch is new is left to that pass (a new switch is a recompute).
"""

from __future__ import annotations

from typing import Any

from ovsdbapp.backend.ovs_idl.command import BaseCommand

from cloudnet.northbound.mirror import Mirror, NbIdl
from cloudnet.northbound.rows import KEY, Row

TABLE = "Logical_Switch_Port"


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
    """The ovsdbapp command that inserts them (its result: how many)."""

    def __init__(self, api: Any, rows: list[Row], mirror: Mirror) -> None:
        super().__init__(api)
        self.rows, self.mirror = rows, mirror

    def run_idl(self, txn: Any) -> None:
        tables = self.api.tables
        staged = to_stage(self.rows, self.mirror, tables, self.api.idl)
        for spec, switch in staged:
            idl_row = txn.insert(tables[TABLE])
            for column, value in spec.columns.items():
                setattr(idl_row, column, value)
            idl_row.enabled = [False]
            switch.addvalue(spec.parent_column, idl_row)
        self.result = len(staged)
