"""Security group rules: Neutron's validation (protocols by name or number, port ranges, ICMP type and code,
remote prefix or group), duplicates refused however spelt, and the rules as the agents take them."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator
from sqlalchemy import delete, insert, or_, select

from cloudnet.errors import Conflict
from cloudnet.services import common, quotas
from cloudnet.services.context import Context
from cloudnet.services.query import Attr, ListQuery, Page, fetch_page, to_int, to_time
from cloudnet.services.rbac import grants
from cloudnet.services.validation import Body, parse
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx

SG = t.security_groups
R = t.security_group_rules
PROTOCOL_NUMBERS = {
    "ah": 51, "dccp": 33, "egp": 8, "esp": 50, "gre": 47, "icmp": 1, "icmpv6": 58, "igmp": 2,
    "ipip": 4, "ipv6-encap": 41, "ipv6-frag": 44, "ipv6-icmp": 58, "ipv6-nonxt": 59, "ipv6-opts": 60,
    "ipv6-route": 43, "ospf": 89, "pgm": 113, "rsvp": 46, "sctp": 132, "tcp": 6, "udp": 17,
    "udplite": 136, "vrrp": 112,
}  # fmt: skip
PORT_PROTOCOLS = {"tcp", "udp", "sctp", "dccp", "udplite", "6", "17", "132", "33", "136"}
ICMP_PROTOCOLS = {"icmp", "icmpv6", "ipv6-icmp", "1", "58"}
# Protocols that only exist over IPv6 (Neutron rejects them on an IPv4 rule).
IPV6_ONLY_PROTOCOLS = {"ipv6-encap", "ipv6-frag", "ipv6-icmp", "icmpv6", "ipv6-nonxt", "ipv6-opts", "ipv6-route",
                       "41", "44", "58", "59", "60", "43"}  # fmt: skip

RULE_ATTRS: dict[str, Attr] = {
    "id": Attr(R.c.id),
    "project_id": Attr(R.c.project_id),
    "tenant_id": Attr(R.c.project_id),
    "description": Attr(R.c.description),
    "security_group_id": Attr(R.c.security_group_id),
    "direction": Attr(R.c.direction),
    "ethertype": Attr(R.c.ethertype),
    "protocol": Attr(R.c.protocol),
    "port_range_min": Attr(R.c.port_range_min, to_int),
    "port_range_max": Attr(R.c.port_range_max, to_int),
    "remote_ip_prefix": Attr(R.c.remote_ip_prefix),
    "remote_group_id": Attr(R.c.remote_group_id),
    "revision_number": Attr(R.c.revision_number, to_int),
    "created_at": Attr(R.c.created_at, to_time),
    "updated_at": Attr(R.c.updated_at, to_time),
}


class RuleCreate(Body):
    security_group_id: str = Field(..., max_length=255)
    direction: Literal["ingress", "egress"]
    ethertype: Literal["IPv4", "IPv6"] = "IPv4"
    protocol: Annotated[str, Field(max_length=40)] | int | None = None
    port_range_min: int | None = Field(None, ge=0, le=65535)
    port_range_max: int | None = Field(None, ge=0, le=65535)
    remote_ip_prefix: str | None = Field(None, max_length=64)
    remote_group_id: str | None = Field(None, max_length=255)
    remote_address_group_id: None = None
    description: str = Field("", max_length=255)
    project_id: str | None = Field(None, max_length=255)
    tenant_id: str | None = Field(None, max_length=255)

    @field_validator("ethertype", mode="before")
    @classmethod
    def _ethertype(cls, value: Any) -> Any:
        # Neutron takes the ethertype in any case ("ipv4").
        return {"ipv4": "IPv4", "ipv6": "IPv6"}.get(value.lower(), value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check(self) -> RuleCreate:
        proto = self.protocol
        if isinstance(proto, int) or (isinstance(proto, str) and proto.isdigit()):
            number = int(proto)
            if not 0 <= number <= 255:
                raise ValueError(f"Security group rule protocol {proto} not supported; numbers must be 0..255")
            self.protocol = str(number)
        elif proto is not None:
            if proto.lower() not in PROTOCOL_NUMBERS and proto.lower() != "any":
                raise ValueError(f"Security group rule protocol {proto} not supported")
            self.protocol = None if proto.lower() == "any" else proto.lower()
        if self.ethertype == "IPv6" and self.protocol in ("icmp", "icmpv6", "1"):
            # Neutron's canonical spelling of ICMP on an IPv6 rule.
            self.protocol = "58" if self.protocol == "1" else "ipv6-icmp"
        if self.ethertype == "IPv4" and self.protocol in IPV6_ONLY_PROTOCOLS:
            raise ValueError(f"Invalid ethertype IPv4 for protocol {self.protocol}")
        self._check_ports()
        if self.remote_ip_prefix is not None and self.remote_group_id is not None:
            raise ValueError("Only remote_ip_prefix or remote_group_id may be provided")
        if self.remote_ip_prefix is not None:
            try:
                net = ipaddress.ip_network(self.remote_ip_prefix, strict=False)
            except ValueError:
                raise ValueError(f"'{self.remote_ip_prefix}' is not a valid IP prefix") from None
            if f"IPv{net.version}" != self.ethertype:
                raise ValueError(f"Conflicting value ethertype {self.ethertype} for CIDR {self.remote_ip_prefix}")
            self.remote_ip_prefix = str(net)
        return self

    def _check_ports(self) -> None:
        """Neutron's port range rules: TCP-like protocols need both ends, ICMP takes a type and a code."""
        lo, hi = self.port_range_min, self.port_range_max
        if lo is None and hi is None:
            return
        if self.protocol is None:
            raise ValueError("Must also specify protocol if port range is given")
        if self.protocol in PORT_PROTOCOLS:
            if lo == 0 or hi == 0:
                raise ValueError("Invalid value for port 0")
            if lo is None or hi is None or lo > hi:
                raise ValueError("For TCP/UDP protocols, port_range_min must be <= port_range_max")
        elif self.protocol in ICMP_PROTOCOLS:
            for value, name, field in ((lo, "type", "port_range_min"), (hi, "code", "port_range_max")):
                if value is not None and not 0 <= value <= 255:
                    raise ValueError(f"Invalid value for ICMP {name} ({field}): {value}. It must be 0 to 255")
            if lo is None:
                raise ValueError(
                    f"ICMP code (port_range_max) {hi} is provided but ICMP type (port_range_min) is missing"
                )
        else:
            raise ValueError(
                f"Invalid protocol {self.protocol} for port range, only supported for TCP, UDP, UDPLITE, SCTP and "
                "DCCP protocols"
            )


def _protocol_spellings(protocol: str) -> list[str]:
    """The name and the number of a protocol: "tcp" and "6" are the same rule (Neutron's duplicate check)."""
    if protocol in PROTOCOL_NUMBERS:
        return [protocol, str(PROTOCOL_NUMBERS[protocol])]
    return [protocol, *[name for name, number in PROTOCOL_NUMBERS.items() if str(number) == protocol]]


def insert_plain(tx: Tx, project_id: str, sg_id: str, specs: list[tuple[str, str, str | None]]) -> None:
    """Rules of any protocol to or from anywhere or a remote group, (direction, ethertype, remote group) each: the
    rules a new group starts with."""
    tx.conn.execute(
        insert(R),
        [
            {
                "id": common.new_id(), "project_id": project_id, "description": "", "created_at": tx.now,
                "updated_at": tx.now, "revision_number": 0, "security_group_id": sg_id, "direction": direction,
                "ethertype": ethertype, "protocol": None, "port_range_min": None, "port_range_max": None,
                "remote_ip_prefix": None, "remote_group_id": remote,
            }
            for direction, ethertype, remote in specs
        ],
    )  # fmt: skip


def protocol_number(protocol: str | None) -> int | None:
    """A stored protocol (a name or a number's digits) as its IANA number; None for any. Protocol 0 is "any"
    too, as Neutron's iptables driver applies it (`-p 0`)."""
    if protocol is None:
        return None
    number = PROTOCOL_NUMBERS[protocol] if protocol in PROTOCOL_NUMBERS else int(protocol)
    return number or None


def agent_rule(r: Any) -> dict[str, Any]:
    """A rule as the agents apply it (the desired state's shape: protocol as a number)."""
    return {
        "id": r.id, "direction": r.direction, "ethertype": r.ethertype, "protocol": protocol_number(r.protocol),
        "port_range_min": r.port_range_min, "port_range_max": r.port_range_max,
        "remote_ip_prefix": r.remote_ip_prefix, "remote_group_id": r.remote_group_id, "remote_address_group_id": None,
    }  # fmt: skip


def rule_dict(r: Any) -> dict[str, Any]:
    return {
        "id": r.id,
        "project_id": r.project_id,
        "tenant_id": r.project_id,
        "security_group_id": r.security_group_id,
        "direction": r.direction,
        "ethertype": r.ethertype,
        "protocol": r.protocol,
        "port_range_min": r.port_range_min,
        "port_range_max": r.port_range_max,
        "remote_ip_prefix": r.remote_ip_prefix,
        "remote_group_id": r.remote_group_id,
        "remote_address_group_id": None,
        "normalized_cidr": r.remote_ip_prefix,
        "description": r.description,
        "created_at": common.fmt_time(r.created_at),
        "updated_at": common.fmt_time(r.updated_at),
        "revision_number": r.revision_number,
        "tags": [],
        "belongs_to_default_sg": None,
    }


def list_rules(store: Store, ctx: Context, q: ListQuery) -> Page:
    with store.read() as conn:
        stmt = common.only_visible(select(R), R, ctx)
        rows, more = fetch_page(conn, R, RULE_ATTRS, stmt, q, "security_group_rule")
        return Page([rule_dict(r) for r in rows], more)


def get_rule(store: Store, ctx: Context, rule_id: str) -> dict[str, Any]:
    with store.read() as conn:
        return rule_dict(common.get_row(conn, R, "security_group_rule", rule_id, ctx))


def create_rules(store: Store, ctx: Context, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    specs = [parse(RuleCreate, b) for b in bodies]
    with store.write() as tx:
        ids = []
        for spec in specs:
            group = common.get_row(tx.conn, SG, "security_group", spec.security_group_id, ctx)
            if spec.remote_group_id is not None:  # (a group shared with the project may be named, as in Neutron)
                grants.get_visible(tx.conn, SG, "security_group", spec.remote_group_id, ctx)
            values = {
                "security_group_id": group.id, "direction": spec.direction, "ethertype": spec.ethertype,
                "protocol": spec.protocol, "port_range_min": spec.port_range_min,
                "port_range_max": spec.port_range_max, "remote_ip_prefix": spec.remote_ip_prefix,
                "remote_group_id": spec.remote_group_id,
            }  # fmt: skip
            same = [R.c[k].is_(v) if v is None else R.c[k] == v for k, v in values.items()
                    if k not in ("protocol", "remote_ip_prefix")]  # fmt: skip
            if spec.protocol is None:
                same.append(R.c.protocol.is_(None))
            else:
                same.append(R.c.protocol.in_(_protocol_spellings(spec.protocol)))
            if spec.remote_ip_prefix in (None, "0.0.0.0/0", "::/0"):  # "anywhere", however spelt
                same.append(or_(R.c.remote_ip_prefix.is_(None), R.c.remote_ip_prefix.in_(["0.0.0.0/0", "::/0"])))
            else:
                same.append(R.c.remote_ip_prefix == spec.remote_ip_prefix)
            dup = tx.conn.execute(select(R.c.id).where(*same)).scalar()
            if dup:
                raise Conflict(f"Security group rule already exists. Rule id is {dup}.", type="SecurityGroupRuleExists")
            quotas.enforce(tx, group.project_id, "security_group_rule", 1)
            rule_id = common.new_id()
            tx.conn.execute(
                insert(R).values(
                    id=rule_id, project_id=group.project_id, description=spec.description, created_at=tx.now,
                    updated_at=tx.now, revision_number=0, **values,
                )
            )  # fmt: skip
            common.touch(tx, SG, group.id, "security_group", group.project_id)
            tx.record("security_group_rule", rule_id, "create", group.project_id)
            ids.append(rule_id)
        rows = {r.id: r for r in tx.conn.execute(select(R).where(R.c.id.in_(ids)))}
        return [rule_dict(rows[i]) for i in ids]


def delete_rule(store: Store, ctx: Context, rule_id: str) -> None:
    with store.write() as tx:
        rule = common.get_row(tx.conn, R, "security_group_rule", rule_id, ctx)
        tx.conn.execute(delete(R).where(R.c.id == rule_id))
        common.touch(tx, SG, rule.security_group_id, "security_group", rule.project_id)
        tx.record("security_group_rule", rule_id, "delete", rule.project_id)
