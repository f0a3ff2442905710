"""Security groups as Port_Group + ACL rows, with the Linux dataplane's semantics, in the shape Neutron's OVN driver
gives them.

- `cloudnet_pg_drop` holds every port with port security on: IP traffic from and to it is dropped at priority 1001
  unless an allow at 1002 lets it through; it also carries what every instance needs to come up (its DHCP and
  DHCPv6 requests and the metadata service, as the Linux dataplane lets them out whatever the groups), and drops
  at 1003, whatever the groups allow, what a guest's own DHCP or DHCPv6 server would answer (its neighbours ask
  the network's server, OVN's: a rogue one must not reach them).
- each security group is a Port_Group `pg_<id>` (its filtered member ports) with one ACL per rule at 1002:
  ingress -> to-lport on `outport == @pg_<id>`, egress -> from-lport on `inport == @pg_<id>`; allow-related for a
  stateful group, allow-stateless for a stateless one. A remote group is an Address_Set of ours per IP version
  (`cn_as_<id>_ip4`/`_ip6`) holding the same member addresses the Linux dataplane uses (fixed IPs, address pairs).
- the metadata identity rule, on every port whatever its port security: a packet to the metadata address from any
  source but the port's own fixed IPs (and its link-local address) is dropped at 1003 on its switch, so the proxy's
  (network, source address) identity is the dataplane's, never a guest's claim (an address pair is not an identity).

Matches are built only from values parsed here (ints, canonical addresses and CIDRs, ids that are plain tokens):
a rule or group that can't be expressed so is left out and reported, never written with the text it came with.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from cloudnet.northbound.rows import SAFE_NAME, Desired, Row, address, ids, network
from cloudnet.services.security.host_security import groups_of

DROP_GROUP = "cloudnet_pg_drop"
ALLOW, DROP, IDENTITY = 1002, 1001, 1003
METADATA = {4: "169.254.169.254", 6: "fe80::a9fe:a9fe"}
L4 = {6: "tcp", 17: "udp", 132: "sctp"}  # protocols whose destination ports OVN can match


@dataclass
class Groups:
    """What `add` built the group rows from beyond each port's own rows (scoped.py follows them port by port)."""

    filtered: set[str] = field(default_factory=set)  # the ports in cloudnet_pg_drop
    members: dict[str, set[str]] = field(default_factory=dict)  # group -> its filtered ports (each such port's groups)
    address_sets: set[str] = field(default_factory=set)  # groups with Address_Set rows (remote groups in use)
    unidentified: set[str] = field(default_factory=set)  # ports left without a metadata identity rule


def pg_name(group_id: str) -> str:
    return "pg_" + group_id.replace("-", "_")


def as_name(group_id: str, version: int) -> str:
    return f"cn_as_{group_id.replace('-', '_')}_ip{version}"


def link_local(mac: str) -> str:
    octets = [int(x, 16) for x in mac.split(":")]
    octets[0] ^= 0x02
    eui = bytes([0xFE, 0x80, 0, 0, 0, 0, 0, 0, *octets[:3], 0xFF, 0xFE, *octets[3:]])
    return str(ipaddress.IPv6Address(eui))


def member_refs(ports: Iterable[str]) -> dict[str, list[str]]:
    """A Port_Group's `ports`: its member ports' switch ports."""
    return {"ports": [f"lsp/{p}" for p in sorted(ports)]}


def _acl(key: str, direction: str, priority: int, match: str, action: str, parent: str, **extra: str) -> Row:
    return Row("ACL", key, {
        "direction": direction, "priority": priority, "match": match, "action": action,
        "external_ids": ids(key, **extra),
    }, parent=parent, parent_column="acls")  # fmt: skip


def add(conn: Connection, out: Desired, filtered: dict[str, list[str]], identities: dict[str, Any]) -> Groups:
    """`filtered`: {port id: its security group ids} of every switch port with port security on (ids already plain);
    `identities`: {port id: (network id, MAC, [fixed IPs])} of every instance-side port."""
    basis = Groups(filtered=set(filtered), unidentified=identity_rules(out, identities))
    drop_key = "pg/drop"
    out.rows.append(Row("Port_Group", drop_key, {"name": DROP_GROUP, "external_ids": ids(drop_key)},
                        refs=member_refs(filtered)))  # fmt: skip
    out.rows += [
        _acl("acl/drop/egress", "from-lport", DROP, f"inport == @{DROP_GROUP} && ip", "drop", drop_key),
        _acl("acl/drop/ingress", "to-lport", DROP, f"outport == @{DROP_GROUP} && ip", "drop", drop_key),
        _acl("acl/drop/dhcp", "from-lport", ALLOW,
             f"inport == @{DROP_GROUP} && ip4 && udp && udp.src == 68 && udp.dst == 67", "allow", drop_key),
        _acl("acl/drop/dhcp6", "from-lport", ALLOW,
             f"inport == @{DROP_GROUP} && ip6 && udp && udp.src == 546 && udp.dst == 547", "allow", drop_key),
        _acl("acl/drop/dhcp-server", "from-lport", IDENTITY,
             f"inport == @{DROP_GROUP} && ip4 && udp && udp.src == 67 && udp.dst == 68", "drop", drop_key),
        _acl("acl/drop/dhcp6-server", "from-lport", IDENTITY,
             f"inport == @{DROP_GROUP} && ip6 && udp && udp.src == 547 && udp.dst == 546", "drop", drop_key),
        _acl("acl/drop/metadata", "from-lport", ALLOW,
             f"inport == @{DROP_GROUP} && ip4 && ip4.dst == {METADATA[4]} && tcp && tcp.dst == 80", "allow-related",
             drop_key),
    ]  # fmt: skip
    groups, remotes = groups_of(conn, [{"security_groups": g} for g in filtered.values()])
    members: dict[str, set[str]] = {}
    for port_id, group_ids in filtered.items():
        for g in group_ids:
            members.setdefault(g, set()).add(port_id)
    basis.members = members
    usable = {g for g in groups if SAFE_NAME.fullmatch(g)}
    out.refused += [f"security group {g!r}: its id is not a plain name" for g in sorted(set(groups) - usable)]
    basis.address_sets = set(remotes) & usable
    for remote_id in sorted(basis.address_sets):
        address_sets(out, remote_id, remotes[remote_id])
    for group_id in sorted(usable & set(members)):
        group = groups[group_id]
        key = f"pg/{group_id}"
        out.rows.append(Row("Port_Group", key, {"name": pg_name(group_id), "external_ids": ids(key, sg_id=group_id)},
                            refs=member_refs(members[group_id])))  # fmt: skip
        action = "allow-related" if group["stateful"] else "allow-stateless"
        for rule in group["rules"]:
            try:
                match = rule_match(pg_name(group_id), rule, usable)
            except (ValueError, TypeError) as exc:
                out.refused.append(f"security group rule {rule.get('id')!r}: not enforced on OVN ({exc})")
                continue
            if match is None:
                continue
            direction = "to-lport" if rule["direction"] == "ingress" else "from-lport"
            rule_key = f"acl/{group_id}/{rule['id']}"
            out.rows.append(_acl(rule_key, direction, ALLOW, match, action, key, sg_id=group_id,
                                 rule_id=str(rule["id"])))  # fmt: skip
    return basis


def address_sets(out: Desired, group_id: str, cidrs: Iterable[str]) -> None:
    nets = [ipaddress.ip_network(c, strict=False) for c in cidrs]
    for version in (4, 6):
        key = f"as/{group_id}/{version}"
        found = ipaddress.collapse_addresses([n for n in nets if n.version == version])  # type: ignore[misc]
        members = [str(n.network_address) if n.prefixlen == n.max_prefixlen else str(n) for n in found]
        out.rows.append(Row("Address_Set", key, {"name": as_name(group_id, version), "addresses": members,
                                                 "external_ids": ids(key, sg_id=group_id)}))  # fmt: skip


def _int(value: Any, top: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
        raise ValueError(f"not a number in 0..{top}: {value!r}")
    return value


def rule_match(pg: str, rule: dict[str, Any], groups: set[str]) -> str | None:
    """The ACL match of one rule (None: it can match nothing, as a prefix of the other IP version)."""
    version = {"IPv4": 4, "IPv6": 6}[rule["ethertype"]]
    ip = f"ip{version}"
    ingress = {"ingress": True, "egress": False}[rule["direction"]]
    parts = [f"outport == @{pg}" if ingress else f"inport == @{pg}", ip]
    remote_end = f"{ip}.src" if ingress else f"{ip}.dst"
    if rule.get("remote_ip_prefix"):
        prefix = ipaddress.ip_network(network(rule["remote_ip_prefix"]))
        if prefix.version != version:
            return None
        if prefix.prefixlen:
            parts.append(f"{remote_end} == {prefix}")
    elif rule.get("remote_group_id"):
        remote = str(rule["remote_group_id"])
        if remote not in groups:
            raise ValueError("its remote group's id is not a plain name")
        parts.append(f"{remote_end} == ${as_name(remote, version)}")
    protocol = rule.get("protocol")
    lo, hi = rule.get("port_range_min"), rule.get("port_range_max")
    if protocol is None:
        return " && ".join(parts)
    protocol = _int(protocol, 255)
    if protocol == 1 and version == 6:
        protocol = 58
    if protocol in (1, 58):
        if (protocol == 58) != (version == 6):
            return None
        icmp = "icmp4" if version == 4 else "icmp6"
        parts.append(icmp)
        if lo is not None:
            parts.append(f"{icmp}.type == {_int(lo, 255)}")
            if hi is not None:
                parts.append(f"{icmp}.code == {_int(hi, 255)}")
        return " && ".join(parts)
    if protocol in L4:
        name = L4[protocol]
        parts.append(name)
        if lo is not None:
            first, last = _int(lo, 65535), _int(lo if hi is None else hi, 65535)
            if (first, last) not in ((0, 65535), (1, 65535)):
                parts.append(f"{name}.dst == {first}" if first == last else f"{name}.dst >= {first} && "
                             f"{name}.dst <= {last}")  # fmt: skip
        return " && ".join(parts)
    if lo is not None or hi is not None:
        raise ValueError(f"OVN matches no destination ports of protocol {protocol}")
    parts.append(f"ip.proto == {protocol}")
    return " && ".join(parts)


def identity_rules(out: Desired, identities: dict[str, Any]) -> set[str]:
    """The metadata identity rules of these ports; returns the ports left without (refused)."""
    refused: set[str] = set()
    for port_id, (network_id, mac, fixed) in sorted(identities.items()):
        try:
            own = {4: [address(a) for a in fixed if ":" not in a], 6: [address(a) for a in fixed if ":" in a]}
            own[6].append(link_local(mac))
        except ValueError as exc:
            out.refused.append(f"port {port_id!r}: no metadata identity rule ({exc}); left out")
            refused.add(port_id)
            continue
        for version, dst in METADATA.items():
            ip = f"ip{version}"
            allowed = own[version]
            source = f" && {ip}.src != {{{', '.join(allowed)}}}" if allowed else ""
            match = f'inport == "{port_id}" && {ip} && {ip}.dst == {dst}{source}'
            key = f"acl/identity/{port_id}/{version}"
            out.rows.append(_acl(key, "from-lport", IDENTITY, match, "drop", f"ls/{network_id}", port_id=port_id))
    return refused
