"""Security groups and port security as a dataplane sees them: a small, driver-neutral model of per-port policy.

Parsed from the desired state (services/hosts/host_state.py desired_state; the fields are listed in the security-group
contract): each port with port security on has the (MAC, addresses) its frames may leave with, its groups, and
whether its groups are stateful; each group is a list of normalised rules; a remote group is a set of CIDRs (a
"remote set", named "group:<id>": another kind of set would get a prefix of its own). A backend enforces it: the
Linux one in nftables (linux/firewall.py), an OVN one with a Port_Group per group (its member ports), an ACL per
rule, an Address_Set per remote set and Logical_Switch_Port.port_security for the (MAC, addresses) pairs. Semantics
are Neutron's: a port's traffic passes when any rule of any of its groups allows it (plus what every instance needs
to come up: ND/MLD and its metadata); a stateful port also passes replies of what was allowed, a stateless one only
what rules allow in each direction.

Every parser raises ValueError on data it cannot enforce faithfully, so that the caller fails that object alone.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from cloudnet.dataplane.steps import Steps

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Direction = Literal["ingress", "egress"]
# Protocols whose rules may name destination port ranges (Neutron: tcp, udp, dccp, sctp, udplite).
PORT_PROTOCOLS = frozenset({6, 17, 33, 132, 136})
ICMP = {4: 1, 6: 58}
# What an instance needs to come up, whatever its groups (Neutron's iptables driver lets the same ICMPv6 through;
# cloudnet serves no DHCP or router advertisements, so neither is let in).
ND_EGRESS = (131, 132, 133, 135, 136, 143)  # MLD report/done, router solicitation, NS, NA, MLDv2 report
# MLD query, RA, NS, NA (a guest's own RAs never get this far: the bridge drops them where they enter, so an RA a port
# receives is a router leg's, as Neutron's and OVN's ACLs let RAs in for every port)
ND_INGRESS = (130, 134, 135, 136)
METADATA = ((ipaddress.ip_address("169.254.169.254"), 80), (ipaddress.ip_address("fe80::a9fe:a9fe"), 80))


@dataclass(frozen=True, order=True)
class Rule:
    direction: Direction
    version: int  # 4 | 6
    protocol: int | None  # None: any
    ports: tuple[int, int] | None  # destination port range (PORT_PROTOCOLS only); None: any
    icmp_type: int | None  # ICMP/ICMPv6 only; None: any
    icmp_code: int | None  # None: any
    prefix: IPNetwork | None  # remote_ip_prefix; None: anywhere
    remote: str | None  # "group:<id>": the remote end's addresses are that remote set


@dataclass(frozen=True)
class Group:
    id: str
    stateful: bool
    rules: tuple[Rule, ...]

    def remotes(self) -> set[str]:
        return {r.remote for r in self.rules if r.remote}


@dataclass(frozen=True)
class PortPolicy:
    id: str
    network_id: str
    mac: str
    allowed: tuple[tuple[str, IPNetwork], ...]  # (MAC, addresses) frames may leave with, IPv6 link-local included
    groups: tuple[str, ...]

    def macs(self) -> list[str]:
        return sorted({mac for mac, _net in self.allowed})


@dataclass(frozen=True)
class HostPolicy:
    """Everything a backend enforces on one host: filtered ports, the groups they use, the remote sets those name;
    `unfiltered` ports (port security off) pass everything."""

    ports: Mapping[str, PortPolicy]
    unfiltered: Mapping[str, str]  # port id -> network id
    groups: Mapping[str, Group]
    remotes: Mapping[str, tuple[IPNetwork, ...]]
    # Every port of the host, filtered or not: the addresses the metadata service knows it by (metadata_identity).
    identities: Mapping[str, tuple[IPAddress, ...]] = field(default_factory=dict)


class Firewall(Protocol):
    """A backend's enforcement of a HostPolicy (the Linux one: linux/firewall.py; an OVN one the same way)."""

    drift: list[str]  # what the last pass found changed behind the backend's back (and repaired)

    def apply(self, state: dict[str, Any], steps: Steps, full: bool, check: bool = False) -> dict[str, str]:
        """Converge to the policy of `state`; returns the ports that are not enforced as asked, with the reason
        (their devices must not be plugged). `full` makes sure of what the backend trusts to be as it left it when
        it has reason to doubt it, `check` in any case."""
        ...

    def enforced(self, port_id: str) -> bool:
        """Is the port filtered (port security on and its policy applied)?"""
        ...

    def step_keys(self) -> list[str]: ...

    def forget(self) -> None:
        """Drop what was applied (the kernel state is gone or unknown): the next apply writes it whole."""
        ...


# -- parsing --------------------------------------------------------------------------------------


def candidate_ports(state: dict[str, Any], include_pool: bool) -> dict[str, dict[str, Any]]:
    """The ports of this host with a device this backend plugs: instance ports that are not SR-IOV VFs (a VF cannot
    be filtered here: only its spoof check is set), and ready pool ports when their devices are parked."""
    ports = {pid: p for pid, p in state["ports"].items() if p.get("binding:vnic_type", "normal") != "direct"}
    if include_pool:
        for pid, p in state.get("pool_ports", {}).items():
            ports.setdefault(pid, p)
    return ports


def port_fingerprint(port: dict[str, Any]) -> tuple[Any, ...]:
    """What of a port's desired state its policy depends on (unchanged: nothing to parse again)."""
    pairs = tuple((p.get("ip_address"), p.get("mac_address")) for p in port.get("allowed_address_pairs") or [])
    return (port.get("port_security_enabled", True), port.get("mac_address"), port.get("network_id"),
            tuple(f.get("ip_address") for f in port.get("fixed_ips", [])), pairs,
            tuple(port.get("security_groups") or ()))  # fmt: skip


def group_fingerprint(group: dict[str, Any]) -> tuple[Any, ...]:
    rules = tuple(tuple(sorted((k, str(v)) for k, v in r.items() if k != "id")) for r in group.get("rules") or [])
    return group.get("id"), group.get("stateful", True), rules


def link_local(mac: str) -> ipaddress.IPv6Network:
    """The EUI-64 IPv6 link-local address a kernel derives from `mac` (the U/L bit flipped, ff:fe inserted)."""
    octets = [int(x, 16) for x in mac.split(":")]
    octets[0] ^= 0x02
    eui = [*octets[:3], 0xFF, 0xFE, *octets[3:]]
    return ipaddress.IPv6Network((int.from_bytes(bytes([0xFE, 0x80, 0, 0, 0, 0, 0, 0, *eui]), "big"), 128))


def metadata_identity(port: dict[str, Any]) -> tuple[IPAddress, ...]:
    """The source addresses the metadata service may see from this port: its fixed IPs and the link-local address
    of its MAC, never an allowed address pair (a pair may be another port's address) and whatever its port
    security. The metadata proxy knows a caller by (network, source address), so this is what makes that identity
    the dataplane's, not the guest's claim."""
    addresses = {ipaddress.ip_address(str(f["ip_address"])) for f in port.get("fixed_ips", [])}
    addresses.add(link_local(_mac(port["mac_address"])).network_address)
    return tuple(sorted(addresses, key=lambda a: (a.version, int(a))))


def _mac(text: Any) -> str:
    parts = str(text).lower().split(":")
    if len(parts) != 6 or not all(len(p) == 2 and all(c in "0123456789abcdef" for c in p) for p in parts):
        raise ValueError(f"invalid MAC address {text!r}")
    if int(parts[0], 16) & 1:
        raise ValueError(f"multicast MAC address {text!r}")
    return ":".join(parts)


def _network(text: Any) -> IPNetwork:
    try:
        return ipaddress.ip_network(str(text), strict=False)
    except ValueError:
        raise ValueError(f"invalid address {text!r}") from None


def parse_port(port: dict[str, Any]) -> PortPolicy | None:
    """The port's policy; None when port security is off."""
    if not port.get("port_security_enabled", True):
        return None
    mac = _mac(port["mac_address"])
    allowed = {(mac, _network(f["ip_address"])) for f in port.get("fixed_ips", [])}
    for pair in port.get("allowed_address_pairs") or []:
        allowed.add((_mac(pair.get("mac_address") or mac), _network(pair["ip_address"])))
    for m in {m for m, _net in allowed} | {mac}:
        allowed.add((m, link_local(m)))
    groups = tuple(sorted(set(port.get("security_groups") or [])))
    return PortPolicy(port["id"], port["network_id"], mac, tuple(sorted(allowed, key=_pair_key)), groups)


def _pair_key(pair: tuple[str, IPNetwork]) -> tuple[str, int, int, int]:
    return pair[0], pair[1].version, int(pair[1].network_address), pair[1].prefixlen


def _port(value: Any, what: str, top: int = 65535) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
        raise ValueError(f"invalid {what} {value!r}")
    return value


def parse_rule(rule: dict[str, Any]) -> Rule | None:
    """One rule, normalised; None when it can match nothing (a prefix of the other IP version, ICMPv6 for IPv4)."""
    direction = rule.get("direction")
    if direction not in ("ingress", "egress"):
        raise ValueError(f"invalid direction {direction!r}")
    version = {"IPv4": 4, "IPv6": 6}.get(rule.get("ethertype", ""))
    if version is None:
        raise ValueError(f"invalid ethertype {rule.get('ethertype')!r}")
    protocol = rule.get("protocol")
    if protocol is not None:
        protocol = _port(protocol, "protocol", 255)
        if protocol == 1 and version == 6:  # Neutron: "icmp" on an IPv6 rule means ICMPv6
            protocol = 58
        if protocol == 58 and version == 4:
            return None
    lo, hi = rule.get("port_range_min"), rule.get("port_range_max")
    ports = icmp_type = icmp_code = None
    if protocol in (1, 58):
        if lo is None and hi is not None:
            raise ValueError("an ICMP code needs an ICMP type")
        icmp_type = None if lo is None else _port(lo, "ICMP type", 255)
        icmp_code = None if hi is None else _port(hi, "ICMP code", 255)
    elif lo is not None or hi is not None:
        if protocol not in PORT_PROTOCOLS:
            raise ValueError(f"port ranges need tcp, udp, dccp, sctp or udplite, not protocol {protocol}")
        if lo is None:
            raise ValueError("port_range_max without port_range_min")
        ports = (_port(lo, "port"), _port(lo if hi is None else hi, "port"))
        if ports[0] > ports[1]:
            raise ValueError(f"port range {ports[0]}-{ports[1]}")
        if ports == (0, 65535) or ports == (1, 65535):
            ports = None
    prefix = None
    if rule.get("remote_ip_prefix"):
        prefix = _network(rule["remote_ip_prefix"])
        if prefix.version != version:
            return None
        if prefix.prefixlen == 0:
            prefix = None
    if rule.get("remote_ip_prefix") and rule.get("remote_group_id"):
        raise ValueError("a rule names remote_ip_prefix or remote_group_id, not both")
    if rule.get("remote_address_group_id"):  # (none is ever sent; read as "from anywhere" it would fail open)
        raise ValueError("remote address groups are not enforced")
    remote = f"group:{rule['remote_group_id']}" if rule.get("remote_group_id") else None
    return Rule(direction, version, protocol, ports, icmp_type, icmp_code, prefix, remote)


def parse_group(group: dict[str, Any]) -> Group:
    rules = {r for r in (parse_rule(rule) for rule in group.get("rules") or []) if r is not None}
    return Group(group["id"], bool(group.get("stateful", True)), tuple(sorted(rules, key=_rule_key)))


def _rule_key(rule: Rule) -> tuple[Any, ...]:
    return (rule.direction, rule.version, rule.protocol if rule.protocol is not None else -1, rule.ports or (),
            rule.icmp_type if rule.icmp_type is not None else -1, rule.icmp_code if rule.icmp_code is not None else -1,
            str(rule.prefix or ""), rule.remote or "")  # fmt: skip


def parse_remote(cidrs: Iterable[Any]) -> tuple[IPNetwork, ...]:
    """A remote set's addresses, overlaps merged (10.0.0.0/24 and 10.0.0.5/32 are one range)."""
    nets = [_network(c) for c in cidrs]
    out: list[IPNetwork] = []
    for version in (4, 6):
        out += ipaddress.collapse_addresses([n for n in nets if n.version == version])  # type: ignore[arg-type]
    return tuple(out)


def remote_cidrs(state: dict[str, Any], remote: str) -> list[Any] | None:
    """The desired state's member list of a remote set ("group:<id>"); None if absent."""
    found = (state.get("remote_groups") or {}).get(remote.removeprefix("group:"))
    return None if found is None else list(found)


def port_stateful(port: PortPolicy, groups: Mapping[str, Group]) -> bool:
    """Neutron refuses mixing: a port is stateless only when all of its (known) groups are stateless."""
    known = [groups[g] for g in port.groups if g in groups]
    return not known or any(g.stateful for g in known)


# -- evaluation (for connections already established: which ones a new policy cuts) ----------------------


@dataclass(frozen=True)
class Flow:
    """A connection as conntrack saw its first packet, from one port's point of view."""

    direction: Direction  # egress: the port opened it; ingress: the remote end did
    version: int
    protocol: int
    dport: int | None
    icmp_type: int | None
    icmp_code: int | None
    remote: IPNetwork  # the other end's address (/32 or /128)


def permits(policy: HostPolicy, port: PortPolicy, flow: Flow) -> bool:
    """Would `port`'s policy let `flow` start? (The same decision the backend makes on a new connection.)"""
    if flow.protocol == 58 and flow.icmp_type in (ND_EGRESS if flow.direction == "egress" else ND_INGRESS):
        return True
    metadata = any(flow.remote.network_address == addr and flow.dport == p for addr, p in METADATA)
    if flow.direction == "egress" and flow.protocol == 6 and metadata:
        return True
    for group_id in port.groups:
        group = policy.groups.get(group_id)
        if group is not None and any(_rule_matches(policy, rule, flow) for rule in group.rules):
            return True
    return False


def _rule_matches(policy: HostPolicy, rule: Rule, flow: Flow) -> bool:
    if rule.direction != flow.direction or rule.version != flow.version:
        return False
    if rule.protocol is not None and rule.protocol != flow.protocol:
        return False
    if rule.ports is not None and not (flow.dport is not None and rule.ports[0] <= flow.dport <= rule.ports[1]):
        return False
    if rule.icmp_type is not None and rule.icmp_type != flow.icmp_type:
        return False
    if rule.icmp_code is not None and rule.icmp_code != flow.icmp_code:
        return False
    if rule.prefix is not None and not flow.remote.subnet_of(rule.prefix):  # type: ignore[arg-type]
        return False
    if rule.remote is not None:
        members = policy.remotes.get(rule.remote, ())
        return any(n.version == flow.version and flow.remote.subnet_of(n) for n in members)  # type: ignore[arg-type]
    return True


def losers(old: HostPolicy, new: HostPolicy) -> set[str]:
    """Filtered ports of `new` that may have lost something since `old` (a group, a rule, a remote member, their
    state), and those newly filtered: their established connections must be judged again (a new port's address may
    be a gone port's, its connections not its own). Ports that only gained keep them all."""
    changed = {g for g, group in old.groups.items()
               if new.groups.get(g) is not group and (g not in new.groups or group.stateful != new.groups[g].stateful
                                                      or not set(group.rules) <= set(new.groups[g].rules))}  # fmt: skip
    shrunk = {r for r, members in old.remotes.items()
              if new.remotes.get(r) is not members and not set(members) <= set(new.remotes.get(r, ()))}  # fmt: skip
    out = set()
    for pid, port in new.ports.items():
        before = old.ports.get(pid)
        if before is None:
            out.add(pid)  # new, or port security turned on
            continue
        if before is port and not changed and not shrunk:
            continue  # (the same parsed object: nothing of its own changed)
        lost_group = bool(set(before.groups) - set(port.groups) or changed & set(port.groups))
        lost_member = any(shrunk & new.groups[g].remotes() for g in port.groups if g in new.groups)
        if lost_group or lost_member or set(before.allowed) != set(port.allowed):
            out.add(pid)
    return out
