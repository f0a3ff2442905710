"""A port's QoS policy as OVN's QoS rows on its switch, as Neutron's OVN driver writes them: for what the instance
sends (egress) a `from-lport` row matching `inport`, with its bandwidth limit (`bandwidth` rate/burst in kbit/s and
kbit) and its DSCP mark (`action` dscp); for what it receives (ingress) a `to-lport` row matching `outport`, with its
limit. The values come from services/qos/qos_state.py; the match names the port by its id (a plain name: checked
with the port's row)."""

from __future__ import annotations

from typing import Any

from cloudnet.northbound.rows import Row, ids

PRIORITY = 2002  # Neutron's OVN QoS priority for a port's rules (the DHCP budget's is above: desired_dhcp)
BURST_SHARE = 0.8  # a rule without a burst: 80 % of its rate's bits in a second (as the Linux dataplane: qos_tc.py)


def keys(port_id: str) -> tuple[str, str]:
    return f"qos/port/{port_id}/egress", f"qos/port/{port_id}/ingress"


def _bandwidth(limit: dict[str, Any] | None) -> dict[str, int]:
    if not limit:
        return {}
    rate = int(limit["max_kbps"])
    return {"rate": rate, "burst": int(limit.get("max_burst_kbps") or 0) or max(int(rate * BURST_SHARE), 1)}


def rows(lsp: Row, values: dict[str, Any] | None) -> list[Row]:
    """The QoS rows of the port `lsp` (a VIF's) for its effective policy's `values` (None: none)."""
    if not values or lsp.columns["type"] != "":
        return []
    port = lsp.columns["name"]
    limits = values.get("bandwidth_limit") or {}
    out = []
    for key, direction, match, limit, dscp in (
        (keys(port)[0], "from-lport", f'inport == "{port}"', limits.get("egress"), values.get("dscp_mark")),
        (keys(port)[1], "to-lport", f'outport == "{port}"', limits.get("ingress"), None),
    ):
        bandwidth = _bandwidth(limit)
        if not bandwidth and dscp is None:
            continue
        out.append(Row("QoS", key, {
            "priority": PRIORITY, "direction": direction, "match": match, "bandwidth": bandwidth,
            "action": {} if dscp is None else {"dscp": int(dscp)},
            "external_ids": ids(key, port_id=port, policy_id=values.get("policy_id", "")),
        }, parent=lsp.parent, parent_column="qos_rules"))  # fmt: skip
    return out
