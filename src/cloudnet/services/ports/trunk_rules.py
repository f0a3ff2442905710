"""Neutron's trunk rules (neutron/services/trunk/rules.py and neutron-lib's validate_subports), worded as Neutron
words them: what a request's sub_ports must look like, and which ports may be a trunk's parent or subport."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, select

from cloudnet.errors import BadRequest, Conflict, InvalidInput
from cloudnet.services import common
from cloudnet.services.context import Context
from cloudnet.services.validation import is_uuid
from cloudnet.store import tables as t
from cloudnet.store.tables_trunks import subports as S
from cloudnet.store.tables_trunks import trunks as T

VLAN_MIN, VLAN_MAX = 1, 4094  # neutron-lib's MIN_VLAN_TAG/MAX_VLAN_TAG: the vlan segmentation type's range
SEGMENTATION_TYPES = ("vlan",)
# Subports one request may name (Neutron has no bound): every one is checked and written in one transaction.
MAX_SUBPORTS_PER_CALL = 500
SUBPORT_OWNER = "trunk:subport"  # neutron-lib's TRUNK_SUBPORT_OWNER


def in_use(message: str, type: str) -> Conflict:
    return Conflict(message, type=type)


def subports_error(data: Any) -> str | None:
    """neutron-lib's validate_subports: the list's shape, unique port ids, both segmentation details given and
    each (type, id) once. None when the list is well formed."""
    if not isinstance(data, list):
        return f"Invalid data format for subports: '{data}' is not a list"
    if len(data) > MAX_SUBPORTS_PER_CALL:
        return f"At most {MAX_SUBPORTS_PER_CALL} subports may be given in one request"
    ids: set[str] = set()
    seen: set[tuple[str, str]] = set()
    for sub in data:
        if not isinstance(sub, dict):
            return f"Invalid data format for subport: '{sub}' is not a dict"
        port_id = sub.get("port_id")
        if port_id is None:
            return "A valid port UUID must be specified"
        if not isinstance(port_id, str) or not is_uuid(port_id):
            return f"Invalid UUID for subport: '{port_id}'"
        if port_id in ids:
            return f"Non unique UUID for subport: '{port_id}'"
        ids.add(port_id)
        kind, seg = sub.get("segmentation_type"), sub.get("segmentation_id")
        if (not kind or seg is None) and len(sub) > 1:
            return (f"Invalid subport details '{sub}': missing segmentation information. Must specify both "
                    "segmentation_id and segmentation_type")  # fmt: skip
        key = (str(kind), str(seg))  # (hashable whatever was sent)
        if seg is not None and key in seen:
            return f"Segmentation ID '{seg}' for '{sub}' is not unique"
        if seg is not None:
            seen.add(key)
        unknown = set(sub) - {"port_id", "segmentation_type", "segmentation_id"}
        if unknown:
            return f"Unrecognized attribute(s) '{', '.join(sorted(unknown))}' in subport '{port_id}'"
    return None


def segmentation(sub: dict[str, Any]) -> tuple[str, int]:
    """SubPortsValidator._validate's segmentation checks: both given, an integer id, a known type, in range."""
    if "segmentation_type" not in sub or "segmentation_id" not in sub:
        raise InvalidInput(f"Invalid subport details '{sub}': missing segmentation information. Must specify both "
                           "segmentation_id and segmentation_type")  # fmt: skip
    kind, raw = sub["segmentation_type"], sub["segmentation_id"]
    try:
        if isinstance(raw, bool | float) or not isinstance(raw, int | str):
            raise ValueError
        seg = int(raw)
    except ValueError:
        raise InvalidInput(f"Invalid subport details: segmentation_id '{raw}' is not an integer") from None
    if kind not in SEGMENTATION_TYPES:
        raise InvalidInput(f"Unknown segmentation_type '{kind}'")
    if not VLAN_MIN <= seg <= VLAN_MAX:
        raise InvalidInput(f"Segmentation ID '{seg}' is not in range")
    return str(kind), seg


def check_not_in_a_trunk(conn: Connection, port_id: str) -> None:
    """TrunkPortValidator.validate's first two rules: the port is no subport and no trunk's parent yet."""
    if conn.execute(select(S.c.trunk_id).where(S.c.port_id == port_id)).first():
        raise in_use(f"Port {port_id} is in use by another trunk.", "TrunkPortInUse")
    if conn.execute(select(T.c.id).where(T.c.port_id == port_id)).first():
        raise in_use(f"Port {port_id} is currently in use and is not eligible for use as a parent port.",
                     "ParentPortInUse")  # fmt: skip


def parent(conn: Connection, ctx: Context, port_id: Any) -> Any:
    """The port a trunk is made on: one the caller sees, in no trunk. A bound port may be (both dataplanes add
    subports to a plugged port: Neutron's can_trunk_bound_port)."""
    if not isinstance(port_id, str) or not is_uuid(port_id):
        raise BadRequest(f"Invalid input for port_id. Reason: '{port_id}' is not a valid UUID.")
    row = common.get_row(conn, t.ports, "port", port_id, ctx)
    check_not_in_a_trunk(conn, port_id)
    return row


def _mtu(conn: Connection, network_id: str) -> int | None:
    N = t.networks
    return conn.execute(select(N.c.mtu).where(N.c.id == network_id)).scalar()


def subport(conn: Connection, ctx: Context, sub: dict[str, Any], parent_row: Any) -> tuple[Any, str, int]:
    """SubPortsValidator._validate for one subport: not the parent, an MTU within the parent's, its segmentation,
    a port the caller sees that is in no trunk and serves no device."""
    port_id = sub["port_id"]
    if port_id == parent_row.id:
        raise in_use(f"Port {port_id} is currently in use and is not eligible for use as a parent port.",
                     "ParentPortInUse")  # fmt: skip
    kind, seg = segmentation(sub)
    # (the caller must see the port before anything about it is told: Neutron says "in use" first)
    row = common.get_row(conn, t.ports, "port", port_id, ctx)
    trunk_mtu, port_mtu = _mtu(conn, parent_row.network_id), _mtu(conn, row.network_id)
    if trunk_mtu and port_mtu and port_mtu > trunk_mtu:
        raise Conflict(f"MTU {port_mtu} of subport {port_id} cannot be greater than MTU {trunk_mtu} of trunk "
                       f"{parent_row.id}.", type="SubPortMtuGreaterThanTrunkPortMtu")  # fmt: skip
    check_not_in_a_trunk(conn, port_id)
    if row.device_id:
        raise in_use(f"Unable to complete operation on port {port_id} for network {row.network_id}. Port already "
                     f"has an attached device {row.device_id}.", "PortInUse")  # fmt: skip
    return row, kind, seg


def port_deletable(conn: Connection, port_id: str) -> None:
    """enforce_port_deletion_rules: a trunk's subport or parent is not deleted under it."""
    trunk_id = conn.execute(select(S.c.trunk_id).where(S.c.port_id == port_id)).scalar()
    if trunk_id is not None:
        raise in_use(f"Port {port_id} is currently a subport for trunk {trunk_id}.", "PortInUseAsSubPort")
    trunk_id = conn.execute(select(T.c.id).where(T.c.port_id == port_id)).scalar()
    if trunk_id is not None:
        raise in_use(f"Port {port_id} is currently a parent port for trunk {trunk_id}.", "PortInUseAsTrunkParent")
