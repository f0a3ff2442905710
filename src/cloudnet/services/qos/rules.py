"""QoS rules, sub-resources of a policy: bandwidth limit (`qos-bw-limit-direction`), DSCP marking and minimum
bandwidth, with Neutron's values, wordings and conflicts; and the rule types (`qos-rule-type-details`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, delete, select, update

from cloudnet.errors import BadRequest, Conflict, NotFound, disallowed
from cloudnet.services import common
from cloudnet.services.context import Context
from cloudnet.services.qos import policies
from cloudnet.services.query import Attr, ListQuery, Page, fetch_page, to_int
from cloudnet.store import tables_qos as tq
from cloudnet.store.db import Store

QR = tq.qos_rules
INT_MAX = 2**31 - 1  # Neutron's DB_INTEGER_MAX_VALUE
# neutron-lib's VALID_DSCP_MARKS
DSCP_MARKS = [0, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36, 38, 40, 46, 48, 56]
DIRECTIONS = ["egress", "ingress"]


@dataclass(frozen=True)
class Kind:
    type: str  # rule type, e.g. "bandwidth_limit"
    collection: str  # URL segment and body key of many, e.g. "bandwidth_limit_rules"
    member: str  # body key of one
    params: dict[str, tuple[Any, ...]]  # attribute -> ("range", lo, hi) | ("values", [...]), with its default
    defaults: dict[str, Any]


KINDS = {
    k.collection: k
    for k in (
        Kind("bandwidth_limit", "bandwidth_limit_rules", "bandwidth_limit_rule",
             {"max_kbps": ("range", 0, INT_MAX), "max_burst_kbps": ("range", 0, INT_MAX),
              "direction": ("values", DIRECTIONS)}, {"max_burst_kbps": 0, "direction": "egress"}),
        Kind("dscp_marking", "dscp_marking_rules", "dscp_marking_rule", {"dscp_mark": ("values", DSCP_MARKS)}, {}),
        Kind("minimum_bandwidth", "minimum_bandwidth_rules", "minimum_bandwidth_rule",
             {"min_kbps": ("range", 0, INT_MAX), "direction": ("values", ["egress"])}, {"direction": "egress"}),
    )
}  # fmt: skip
BY_TYPE = {k.type: k for k in KINDS.values()}


def _invalid(attr: str, reason: str) -> BadRequest:
    return BadRequest(f"Invalid input for {attr}. Reason: {reason}.")


def _value(attr: str, spec: tuple[Any, ...], raw: Any) -> Any:
    """A parameter checked as neutron-lib's validators check it (type:range / type:values, after convert_to_int)."""
    if spec[0] == "values" and attr == "direction":
        if raw not in spec[1]:
            raise _invalid(attr, f"'{raw}' is not in {spec[1]}")
        return raw
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise _invalid(attr, f"'{raw}' is not an integer")
    try:
        number = int(raw)
    except ValueError:
        raise _invalid(attr, f"'{raw}' is not an integer") from None
    if spec[0] == "values":
        if number not in spec[1]:
            raise _invalid(attr, f"'{number}' is not in {spec[1]}")
    elif number < spec[1]:
        raise _invalid(attr, f"'{number}' is too small - must be at least '{spec[1]}'")
    elif number > spec[2]:
        raise _invalid(attr, f"'{number}' is too large - must be no larger than '{spec[2]}'")
    return number


def _parse(kind: Kind, body: Any, create: bool) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise BadRequest("Body contains invalid data")
    extra = [k for k in body if k not in kind.params]
    if extra:
        raise BadRequest(f"Unrecognized attribute(s) '{', '.join(extra)}'")
    values = {k: _value(k, kind.params[k], v) for k, v in body.items()}
    if create:
        for attr in kind.params:
            if attr not in values:
                if attr not in kind.defaults:
                    raise BadRequest(f"Failed to parse request. Required attribute '{attr}' not specified")
                values[attr] = kind.defaults[attr]
    return values


def rule_not_found(rule_id: str, policy_id: str) -> NotFound:
    return NotFound(f"QoS rule {rule_id} for policy {policy_id} could not be found.", type="QosRuleNotFound")


def _rule(conn: Connection, kind: Kind, policy_id: str, rule_id: str) -> Any:
    row = conn.execute(select(QR).where(QR.c.id == rule_id, QR.c.qos_policy_id == policy_id,
                                        QR.c.type == kind.type)).first()  # fmt: skip
    if row is None:
        raise rule_not_found(rule_id, policy_id)
    return row


ATTRS: dict[str, Attr] = {
    "id": Attr(QR.c.id),
    "direction": Attr(QR.c.direction),
    **{name: Attr(QR.c[name], to_int) for name in ("max_kbps", "max_burst_kbps", "dscp_mark", "min_kbps")},
}


def list_rules(store: Store, ctx: Context, collection: str, policy_id: str, q: ListQuery) -> Page:
    kind = KINDS[collection]
    with store.read() as conn:
        policies.get_visible(conn, ctx, policy_id)
        stmt = select(QR).where(QR.c.qos_policy_id == policy_id, QR.c.type == kind.type)
        rows, more = fetch_page(conn, QR, ATTRS, stmt, q, kind.member)
        return Page([policies.rule_body(r) for r in rows], more)


def get_rule(store: Store, ctx: Context, collection: str, policy_id: str, rule_id: str) -> dict[str, Any]:
    kind = KINDS[collection]
    with store.read() as conn:
        policies.get_visible(conn, ctx, policy_id)
        return policies.rule_body(_rule(conn, kind, policy_id, rule_id))


def _check_conflicts(conn: Connection, kind: Kind, policy_id: str, rule_id: str, values: dict[str, Any]) -> None:
    """Neutron's rule checks: one rule of a type per direction (QoSRulesConflict), and a minimum bandwidth never
    above the maximum of the same direction (QoSRuleParameterConflict)."""
    direction = values.get("direction", "egress")
    same = conn.execute(select(QR.c.id).where(QR.c.qos_policy_id == policy_id, QR.c.type == kind.type,
                                              QR.c.direction == direction, QR.c.id != rule_id)).scalar()  # fmt: skip
    if same:
        raise Conflict(f"Rule {kind.type} conflicts with rule {same} which already exists in QoS Policy {policy_id}.",
                       type="QoSRulesConflict")  # fmt: skip
    pair = {"minimum_bandwidth": ("bandwidth_limit", "min_kbps", "max_kbps"),
            "bandwidth_limit": ("minimum_bandwidth", "max_kbps", "min_kbps")}.get(kind.type)  # fmt: skip
    if pair is None or pair[1] not in values:
        return
    other = conn.execute(select(QR).where(QR.c.qos_policy_id == policy_id, QR.c.type == pair[0],
                                          QR.c.direction == direction)).first()  # fmt: skip
    if other is None:
        return
    mine, theirs = values[pair[1]], getattr(other, pair[2])
    if (mine > theirs) if kind.type == "minimum_bandwidth" else (mine < theirs):
        raise Conflict(
            f"Unable to add the rule with value {mine} to the policy {policy_id} as the existing rule of "
            f"type {pair[0]} restricts the bandwidth to {theirs}.",
            type="QoSRuleParameterConflict",
        )


def create_rule(store: Store, ctx: Context, collection: str, policy_id: str, body: Any) -> dict[str, Any]:
    kind = KINDS[collection]
    with store.write() as tx:
        policy = policies.get_visible(tx.conn, ctx, policy_id, lock=True)
        if not ctx.is_admin:
            raise disallowed(f"create_policy_{kind.member}")
        values = _parse(kind, body, create=True)
        if kind.type not in policies.ENFORCED and policies.used(tx.conn, policy_id):
            raise Conflict(f"Rule {kind.type} is not supported by port {policy_id}", type="QosRuleNotSupported")
        _check_conflicts(tx.conn, kind, policy_id, "", values)
        row = {"id": common.new_id(), "qos_policy_id": policy_id, "type": kind.type, "created_at": tx.now,
               "direction": values.pop("direction", "egress"), **values}  # fmt: skip
        tx.conn.execute(QR.insert().values(**row))
        policies.touch_policy(tx, policy)
        return policies.rule_body(tx.conn.execute(select(QR).where(QR.c.id == row["id"])).one())


def update_rule(store: Store, ctx: Context, collection: str, policy_id: str, rule_id: str,
                body: Any) -> dict[str, Any]:  # fmt: skip
    kind = KINDS[collection]
    with store.write() as tx:
        policy = policies.get_visible(tx.conn, ctx, policy_id, lock=True)
        row = _rule(tx.conn, kind, policy_id, rule_id)
        if not ctx.is_admin:
            raise disallowed(f"update_policy_{kind.member}")
        changes = _parse(kind, body, create=False)
        merged = {k: getattr(row, k) for k in kind.params} | changes
        _check_conflicts(tx.conn, kind, policy_id, rule_id, merged)
        if any(getattr(row, k) != v for k, v in changes.items()):
            tx.conn.execute(update(QR).where(QR.c.id == rule_id).values(**changes))
            policies.touch_policy(tx, policy)
        return policies.rule_body(tx.conn.execute(select(QR).where(QR.c.id == rule_id)).one())


def delete_rule(store: Store, ctx: Context, collection: str, policy_id: str, rule_id: str) -> None:
    kind = KINDS[collection]
    with store.write() as tx:
        policy = policies.get_visible(tx.conn, ctx, policy_id, lock=True)
        _rule(tx.conn, kind, policy_id, rule_id)
        if not ctx.is_admin:
            raise disallowed(f"delete_policy_{kind.member}")
        tx.conn.execute(delete(QR).where(QR.c.id == rule_id))
        policies.touch_policy(tx, policy)


# -- rule types -------------------------------------------------------------------------------------------------

DRIVER = "cloudnet"  # both dataplanes enforce the same types and values (Linux: tc and nftables; OVN: QoS rows)


def _parameters(kind: Kind) -> list[dict[str, Any]]:
    out = []
    for name, spec in kind.params.items():
        if spec[0] == "range":
            out.append({"parameter_name": name, "parameter_type": "range",
                        "parameter_values": {"start": spec[1], "end": spec[2]}})  # fmt: skip
        else:
            out.append({"parameter_name": name, "parameter_type": "choices", "parameter_values": list(spec[1])})
    return out


def list_rule_types(ctx: Context) -> list[dict[str, Any]]:
    """The types a network or port may carry: those the dataplanes enforce (as Neutron lists those its drivers
    support); minimum bandwidth rules are stored but not enforced, and refused where they would have to be."""
    return [{"type": name} for name in policies.ENFORCED]


def get_rule_type(ctx: Context, name: str) -> dict[str, Any]:
    if not ctx.is_admin:
        raise disallowed("get_rule_type")
    if name not in policies.ENFORCED:
        raise NotFound("The resource could not be found.", type="HTTPNotFound")
    return {"type": name, "drivers": [{"name": DRIVER, "supported_parameters": _parameters(BY_TYPE[name])}]}
