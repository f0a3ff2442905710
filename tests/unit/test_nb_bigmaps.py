"""Big NB maps kept out of the ovs IDL (northbound/bigmaps.py): what an update2 carries is taken out and kept as the
row holds it (inserts whole, modifies as update2 differences), anything but a map of strings is not trusted, and the
writes are the raw OVSDB operations that turn what NB holds into what is wanted."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

from cloudnet.northbound import bigmaps

ROW = uuid.UUID("8b1c0000-0000-4000-8000-000000000001")


class FakeRow:
    """An IDL row as far as bigmaps uses one: its attributes live in __dict__; `vips` is what the IDL holds."""

    def __init__(self, row_id: uuid.UUID, vips: dict[str, str] | None = None, inserted: bool = False) -> None:
        self.uuid, self.vips = row_id, dict(vips or {})
        self._table = SimpleNamespace(name="Load_Balancer")
        self._data = None if inserted else {}


def _tables(*rows: FakeRow) -> dict[str, Any]:
    return {"Load_Balancer": SimpleNamespace(rows={r.uuid: r for r in rows}), "ACL": SimpleNamespace(rows={})}


def _update(kind: str, **columns: Any) -> dict[str, Any]:
    return {"Load_Balancer": {str(ROW): {kind: columns}}}


def _vips(pairs: dict[str, str]) -> list[Any]:
    return ["map", [[k, v] for k, v in pairs.items()]]


def _parse(tables: dict[str, Any], update: dict[str, Any], version: str = "update3") -> Any:
    taken = bigmaps.take(tables, update, version)
    return bigmaps.keep(tables, taken)


def test_insert_is_kept_whole_and_modifies_apply_as_update2_differences() -> None:
    row = FakeRow(ROW)
    tables = _tables(row)
    update = _update("insert", name="lb", vips=_vips({"192.0.2.1:80": "10.0.0.5:80", "192.0.2.1:81": "10.0.0.5:81"}))
    assert _parse(tables, update) == {}
    assert update["Load_Balancer"][str(ROW)]["insert"] == {"name": "lb"}  # (the IDL parses the rest)
    assert bigmaps.value(row, "vips") == {"192.0.2.1:80": "10.0.0.5:80", "192.0.2.1:81": "10.0.0.5:81"}
    # a pair equal to the one held removes it, a new key is added, a key with another value is retargeted
    diff = {"192.0.2.1:80": "10.0.0.5:80", "192.0.2.1:82": "10.0.0.5:82", "192.0.2.1:81": "10.9.9.9:1"}
    assert _parse(tables, _update("modify", vips=_vips(diff))) == {ROW: ("Load_Balancer", {"vips"})}
    assert bigmaps.value(row, "vips") == {"192.0.2.1:81": "10.9.9.9:1", "192.0.2.1:82": "10.0.0.5:82"}
    # a modify of other columns leaves the map alone and names none of its columns
    assert _parse(tables, _update("modify", name="lb2")) == {ROW: ("Load_Balancer", set())}
    assert bigmaps.value(row, "vips") == {"192.0.2.1:81": "10.9.9.9:1", "192.0.2.1:82": "10.0.0.5:82"}


def test_an_insert_without_the_map_holds_an_empty_one() -> None:
    row = FakeRow(ROW, vips={"stale:1": "x:1"})
    tables = _tables(row)
    _parse(tables, _update("initial", name="lb"))
    assert bigmaps.value(row, "vips") == {}


def test_other_versions_and_tables_are_left_to_the_idl() -> None:
    row = FakeRow(ROW, vips={"192.0.2.1:80": "10.0.0.5:80"})
    tables = _tables(row)
    _parse(tables, _update("insert", vips=_vips({"a:1": "b:1"})))
    v1 = {"Load_Balancer": {str(ROW): {"new": {"vips": _vips({"c:1": "d:1"})}}}}
    assert bigmaps.take(tables, v1, "update") == {}
    assert v1["Load_Balancer"][str(ROW)]["new"]["vips"] == _vips({"c:1": "d:1"})
    bigmaps.forget(tables, v1)  # (the IDL parsed it: what was kept is no longer what the row holds)
    assert bigmaps.value(row, "vips") == {"192.0.2.1:80": "10.0.0.5:80"}
    acl = {"ACL": {str(ROW): {"insert": {"vips": _vips({"a:1": "b:1"})}}}}
    assert bigmaps.take(tables, acl, "update3") == {}


def test_a_value_that_is_not_a_map_of_strings_is_not_kept() -> None:
    row = FakeRow(ROW)
    tables = _tables(row)
    for hostile in (["map", [["a:1", 5]]], ["set", []], "x", ["map", [["a", "b", "c"]]], ["map", {"a": "b"}]):
        _parse(tables, _update("insert", vips=hostile))
        assert bigmaps.value(row, "vips") == {}  # (the IDL's, which never got it: a compare writes it whole)
    _parse(tables, _update("insert", vips=_vips({"a:1": "b:1"})))
    _parse(tables, _update("modify", vips=["map", [["a:1", ["uuid", "x"]]]]))
    assert bigmaps.value(row, "vips") == {}
    bad = {"Load_Balancer": {"not-a-uuid": {"insert": {"vips": _vips({})}}, str(ROW): {"insert": {}, "delete": None}}}
    assert bigmaps.take(tables, bad, "update3") == {}


class FakeTxn:
    def __init__(self) -> None:
        self.ops: list[dict[str, Any]] = []

    def add_op(self, op: dict[str, Any]) -> None:
        self.ops.append(op)


def test_writes_are_raw_operations_by_difference_or_whole() -> None:
    txn = FakeTxn()
    row = FakeRow(ROW)
    old = {"192.0.2.1:80": "10.0.0.5:80", "192.0.2.1:81": "10.0.0.5:81", "192.0.2.1:82": "10.0.0.5:82"}
    new = {"192.0.2.1:80": "10.0.0.5:80", "192.0.2.1:81": "10.9.9.9:1", "192.0.2.1:83": "10.0.0.5:83"}
    bigmaps.change(txn, row, "vips", old, new)
    where = [["_uuid", "==", ["uuid", str(ROW)]]]
    (op,) = txn.ops
    assert op["op"] == "mutate" and op["table"] == "Load_Balancer" and op["where"] == where
    (delete, insert) = op["mutations"]  # (a retargeted key is deleted first: an insert keeps a key that is there)
    assert delete[:2] == ["vips", "delete"] and sorted(delete[2][1]) == ["192.0.2.1:81", "192.0.2.1:82"]
    assert insert == ["vips", "insert", ["map", [["192.0.2.1:81", "10.9.9.9:1"], ["192.0.2.1:83", "10.0.0.5:83"]]]]
    bigmaps.change(txn, row, "vips", new, dict(new))
    assert len(txn.ops) == 1  # nothing changed: no operation
    inserted = FakeRow(uuid.UUID("8b1c0000-0000-4000-8000-000000000002"), inserted=True)
    bigmaps.put(txn, inserted, "vips", new)
    assert txn.ops[1] == {"op": "update", "table": "Load_Balancer",
                          "where": [["_uuid", "==", ["named-uuid", "row8b1c0000_0000_4000_8000_000000000002"]]],
                          "row": {"vips": ["map", [[k, v] for k, v in new.items()]]}}  # fmt: skip
