"""The nftables text of cloudnet's firewall in a host namespace: two tables, and one part per object.

Bridged IPv4/IPv6 is filtered statefully in `inet cloudnet`, which br_netfilter runs from the bridge hooks (this
kernel's bridge family has no conntrack). There the in and out devices are the bridge, not its ports, so the
bridge table tags each frame first (meta mark: the number of the instance port it came from, before br_netfilter's
prerouting hook at priority 0; of the port it goes to, before its forward hook at -1), and the inet chains dispatch
on that mark through verdict maps: one chain per port and direction. Conntrack zones (one per network, set from the
bridge at raw priority) keep overlapping tenant address spaces apart.

Anti-spoofing is stateless, in the bridge table: a frame from a filtered port passes only with one of the port's
(MAC, address) pairs, RAs, redirects and DHCP server replies never do, and neighbour advertisements only for the
port's own addresses. Its DHCP client asks pass (from 0.0.0.0 with its own MAC, as Neutron lets them; the port's
chains accept them, DHCPv6 asks, and DHCP/DHCPv6 replies whatever its groups say) only when the client hardware
address inside is one of its own MACs: the server answers by that address, so another's would get another's lease.
A metadata namespace's DHCP replies reach this host's instance ports only (not an uplink: each host answers its own
guests, as OVN's distributed DHCP does).
Frames other than IPv4, IPv6 and ARP (VLAN-tagged ones skip br_netfilter) neither leave nor
reach a filtered port, and an instance device the firewall does not know (yet) passes nothing. No instance device
sends a tagged frame into its bridge, port security or not (as OVN drops a VIF's tagged frames): a trunk's subport
VLANs leave the parent's device through their VLAN devices (linux/trunk_vlans.py) before the bridge sees them.

The metadata service knows a caller by its source address: a frame from any instance port (port security or not)
to 169.254.169.254 or fe80::a9fe:a9fe passes only from one of the port's own fixed IPs or its MAC's link-local
address, never from an allowed address pair, which may be another port's address.

A port's chain starts with what every instance needs (neighbour discovery, its metadata) and, for a stateful port,
conntrack's verdict (replies pass, invalid packets drop; a stateless port's chains never look at conntrack), then
jumps to the shared group chain once per group, with the group's number as the mark. Rules are set elements keyed
by that number, so a new connection costs the same with 1 or 1,000 rules, and a rule change is an element change.
Remote groups are elements keyed by the remote set's number; a rule naming one is a "pair" (group, remote set,
direction, IP version) number with its protocol/port elements. Single addresses go to hash sets and prefixes to
interval sets: libnftables reads an interval set whole to delete an element from it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cloudnet.dataplane import security
from cloudnet.dataplane.linux import names
from cloudnet.dataplane.linux.fw_sets import Box, elements, raw_addresses, split
from cloudnet.dataplane.security import IPNetwork

TABLE = "cloudnet"
DIRS = {"egress": "e", "ingress": "i"}
ANYWHERE = {4: ipaddress.ip_network("0.0.0.0/0"), 6: ipaddress.ip_network("::/0")}
ADDR = {4: ("ip", "ipv4_addr", "icmp", "icmp_type . icmp_code"), 6: ("ip6", "ipv6_addr", "icmpv6",
                                                                     "icmpv6_type . icmpv6_code")}  # fmt: skip
Element = tuple[str, str, str]  # (family, set or map, element text)


@dataclass(frozen=True)
class Part:
    """One object's share of the tables: chains of its own (in the inet table) and elements of the shared sets."""

    chains: tuple[tuple[str, tuple[str, ...]], ...] = ()
    elements: frozenset[Element] = field(default_factory=frozenset)


def quoted(name: str) -> str:
    return f'"{name}"'


def _join(*items: str) -> str:
    return ", ".join(items)


# A port's budget of DHCP asks (v4 and v6 together): a guest that floods its server does not starve the others. A
# client asks a handful of times a lease; the budget is per port (the dynamic set's key), kept a minute after it.
DHCP_RATE = "10/second burst 30 packets"


def skeleton() -> str:
    """Both tables with their base chains and shared sets (no object in them)."""
    nd_out, nd_in = (_join(*map(str, t)) for t in (security.ND_EGRESS, security.ND_INGRESS))
    (md4, port4), (md6, port6) = ((str(a), p) for a, p in security.METADATA)
    taps = quoted(f"{names.TAP}*")  # every container port's host end
    vm_taps = names.VM_TAP_GROUP  # every VM tap cloudnet made (its name is Nova's: the device group marks it)
    meta_legs = quoted(f"{names.METADATA_LEG}*")  # (this host's DHCP server answers this host's ports only)
    dhcp_ask = "ip saddr 0.0.0.0 ip daddr 255.255.255.255 udp sport 68 udp dport 67"  # (a client with no address)
    dhcp_client = "meta l4proto udp th sport { 68, 546 } th dport { 67, 547 }"  # (DHCPv4 and DHCPv6 asks)
    bridge = f"""table bridge {TABLE} {{
  map ports {{ type ifname : mark; }}
  set unfiltered {{ type ifname; }}
  set src4 {{ type ifname . ether_addr . ipv4_addr; }}
  set src4_nets {{ type ifname . ether_addr . ipv4_addr; flags interval; }}
  set arp_src4 {{ type ifname . ether_addr . ether_addr . ipv4_addr; }}
  set arp_src4_nets {{ type ifname . ether_addr . ether_addr . ipv4_addr; flags interval; }}
  set src6 {{ type ifname . ether_addr . ipv6_addr; }}
  set src6_nets {{ type ifname . ether_addr . ipv6_addr; flags interval; }}
  set dad_macs {{ type ifname . ether_addr; }}
  set dhcp_macs {{ typeof iifname . @th,288,48; }}
  set nd_targets {{ typeof iifname . @th,64,128; }}
  set nd_target_nets {{ typeof iifname . @th,64,128; flags interval; }}
  set meta_src4 {{ type ifname . ipv4_addr; }}
  set meta_src6 {{ type ifname . ipv6_addr; }}
  set dhcp_budget {{ type ifname; flags dynamic; timeout 60s; }}
  chain prerouting {{
    type filter hook prerouting priority -200; policy accept;
    meta mark set 0
    ether type {{ 8021q, 8021ad }} iifname {taps} drop
    ether type {{ 8021q, 8021ad }} iifgroup {vm_taps} drop
    ether type ip ip daddr {md4} iifname {taps} iifname . ip saddr != @meta_src4 drop
    ether type ip6 ip6 daddr {md6} iifname {taps} iifname . ip6 saddr != @meta_src6 drop
    ether type ip ip daddr {md4} iifgroup {vm_taps} iifname . ip saddr != @meta_src4 drop
    ether type ip6 ip6 daddr {md6} iifgroup {vm_taps} iifname . ip6 saddr != @meta_src6 drop
    iifname @unfiltered accept
    meta mark set iifname map @ports
    meta mark 0 iifname {taps} drop
    meta mark 0 iifgroup {vm_taps} drop
    meta mark 0 accept
    ether type ip udp sport 67 udp dport 68 drop
    ether type ip6 udp sport 547 udp dport 546 drop
    ether type ip6 icmpv6 type {{ 134, 137 }} drop
    ether type ip6 icmpv6 type 136 iifname . @th,64,128 != @nd_targets iifname . @th,64,128 != @nd_target_nets drop
    ether type ip udp sport 68 udp dport 67 iifname . @th,288,48 != @dhcp_macs drop
    {dhcp_client} update @dhcp_budget {{ iifname limit rate over {DHCP_RATE} }} drop
    ether type ip {dhcp_ask} iifname . ether saddr @dad_macs accept
    ether type arp iifname . ether saddr . arp saddr ether . arp saddr ip @arp_src4 accept
    ether type arp iifname . ether saddr . arp saddr ether . arp saddr ip @arp_src4_nets accept
    ether type ip iifname . ether saddr . ip saddr @src4 accept
    ether type ip iifname . ether saddr . ip saddr @src4_nets accept
    ether type ip6 iifname . ether saddr . ip6 saddr @src6 accept
    ether type ip6 iifname . ether saddr . ip6 saddr @src6_nets accept
    ether type ip6 ip6 saddr :: icmpv6 type {{ 131, 135, 143 }} iifname . ether saddr @dad_macs accept
    drop
  }}
  chain forward {{
    type filter hook forward priority -200; policy accept;
    meta mark set 0
    ether type ip udp sport 67 udp dport 68 iifname {meta_legs} oifname != {taps} oifgroup != {vm_taps} drop
    ether type ip6 udp sport 547 udp dport 546 iifname {meta_legs} oifname != {taps} oifgroup != {vm_taps} drop
    oifname @unfiltered accept
    meta mark set oifname map @ports
    meta mark 0 oifname {taps} drop
    meta mark 0 oifgroup {vm_taps} drop
    meta mark != 0 ether type != {{ ip, ip6, arp }} drop
  }}
}}
"""
    sets, groups = [], {"e": [], "i": []}
    for d, end in (("e", "daddr"), ("i", "saddr")):
        for v, (ipk, addr, icmpk, icmp_types) in ADDR.items():
            sets += [f"  set {d}_any{v} {{ type mark . {addr}; flags interval; }}",
                     f"  set {d}_proto{v} {{ type mark . inet_proto . {addr}; flags interval; }}",
                     f"  set {d}_port{v} {{ type mark . inet_proto . inet_service . {addr}; flags interval; }}",
                     f"  set {d}_icmp{v} {{ type mark . {icmp_types} . {addr}; flags interval; }}"]  # fmt: skip
            groups[d] += [f"meta mark . {ipk} {end} @{d}_any{v} accept",
                          f"meta mark . meta l4proto . {ipk} {end} @{d}_proto{v} accept",
                          f"meta mark . meta l4proto . th dport . {ipk} {end} @{d}_port{v} accept",
                          f"meta mark . {icmpk} type . {icmpk} code . {ipk} {end} @{d}_icmp{v} accept"]  # fmt: skip
        groups[d].append(f"meta mark vmap @{d}_remote")
    inet = f"""table inet {TABLE} {{
  map zones {{ typeof iifname : ct zone; }}
  map ctstate {{ type ct_state : verdict; elements = {{ established : accept, related : accept, invalid : drop }}; }}
  map egress_ports {{ type mark : verdict; }}
  map ingress_ports {{ type mark : verdict; }}
  map e_remote {{ type mark : verdict; }}
  map i_remote {{ type mark : verdict; }}
{chr(10).join(sets)}
  set rgm4 {{ type mark . ipv4_addr; }}
  set rgm4_nets {{ type mark . ipv4_addr; flags interval; }}
  set rgm6 {{ type mark . ipv6_addr; }}
  set rgm6_nets {{ type mark . ipv6_addr; flags interval; }}
  set p_any {{ type mark; }}
  set p_proto {{ type mark . inet_proto; }}
  set p_port {{ type mark . inet_proto . inet_service; flags interval; }}
  set p_icmp4 {{ type mark . icmp_type . icmp_code; flags interval; }}
  set p_icmp6 {{ type mark . icmpv6_type . icmpv6_code; flags interval; }}
  chain raw {{
    type filter hook prerouting priority raw; policy accept;
    ct zone set iifname map @zones
  }}
  chain egress_hook {{
    type filter hook prerouting priority filter; policy accept;
    meta mark vmap @egress_ports
  }}
  chain ingress_hook {{
    type filter hook forward priority filter; policy accept;
    meta mark vmap @ingress_ports
  }}
  chain head_e {{
    icmpv6 type {{ {nd_out} }} accept
    meta nfproto ipv4 udp sport 68 udp dport 67 accept
    meta nfproto ipv6 udp sport 546 udp dport 547 accept
    ct state vmap @ctstate
    ip daddr {md4} tcp dport {port4} accept
    ip6 daddr {md6} tcp dport {port6} accept
  }}
  chain head_i {{
    icmpv6 type {{ {nd_in} }} accept
    meta nfproto ipv4 udp sport 67 udp dport 68 accept
    meta nfproto ipv6 udp sport 547 udp dport 546 accept
    ct state vmap @ctstate
  }}
  chain head_e_stateless {{
    icmpv6 type {{ {nd_out} }} accept
    meta nfproto ipv4 udp sport 68 udp dport 67 accept
    meta nfproto ipv6 udp sport 546 udp dport 547 accept
    ip daddr {md4} tcp dport {port4} accept
    ip6 daddr {md6} tcp dport {port6} accept
  }}
  chain head_i_stateless {{
    icmpv6 type {{ {nd_in} }} accept
    meta nfproto ipv4 udp sport 67 udp dport 68 accept
    meta nfproto ipv6 udp sport 547 udp dport 546 accept
    ip saddr {md4} tcp sport {port4} accept
    ip6 saddr {md6} tcp sport {port6} accept
  }}
  chain pair {{
    meta mark @p_any accept
    meta mark . meta l4proto @p_proto accept
    meta mark . meta l4proto . th dport @p_port accept
    meta mark . icmp type . icmp code @p_icmp4 accept
    meta mark . icmpv6 type . icmpv6 code @p_icmp6 accept
  }}
{chain("grp_e", groups["e"])}
{chain("grp_i", groups["i"])}
}}
"""
    return bridge + inet


def chain(name: str, rules: Iterable[str]) -> str:
    body = "".join(f"    {r}\n" for r in rules)
    return f"  chain {name} {{\n{body}  }}"


# -- parts --------------------------------------------------------------------------------------------


def zone_part(bridge: str, zone: int) -> Part:
    return Part(elements=frozenset({("inet", "zones", f"{quoted(bridge)} : {zone}")}))


def unfiltered_part(tap: str) -> Part:
    return Part(elements=frozenset({("bridge", "unfiltered", quoted(tap))}))


def identity_part(tap: str, addresses: Iterable[security.IPAddress]) -> Part:
    """The addresses a port may ask the metadata service from (security.metadata_identity)."""
    return Part(elements=frozenset(("bridge", f"meta_src{a.version}", f"{quoted(tap)} . {a}") for a in addresses))


def port_chains(ident: str) -> tuple[str, str]:
    return f"e_{ident}", f"i_{ident}"


def port_part(port: security.PortPolicy, tap: str, ident: str, number: int, stateful: bool,
              groups: list[int]) -> Part:  # fmt: skip
    """A filtered port: its number (the mark of its frames), its (MAC, address) pairs, its two chains."""
    name = quoted(tap)
    els: set[Element] = {("bridge", "ports", f"{name} : {number}")}
    boxes: dict[str, list[Box]] = {"src4": [], "arp_src4": [], "src6": []}
    for mac in port.macs():
        els.add(("bridge", "dad_macs", f"{name} . {mac}"))
        els.add(("bridge", "dhcp_macs", f"{name} . 0x{mac.replace(':', '')}"))  # (its DHCP asks' chaddr)
        boxes["arp_src4"].append(((name, mac, mac), None, ipaddress.ip_network("0.0.0.0/32")))  # ARP probes (RFC 5227)
    for mac, net in port.allowed:
        if net.version == 4:
            boxes["src4"].append(((name, mac), None, net))
            boxes["arp_src4"].append(((name, mac, mac), None, net))
        else:
            boxes["src6"].append(((name, mac), None, net))
    for set_name, items in boxes.items():
        exact, nets = split(items)
        els.update(("bridge", set_name, e) for e in exact)
        els.update(("bridge", f"{set_name}_nets", e) for e in nets)
    exact, nets = raw_addresses(name, (net for _mac, net in port.allowed))
    els.update(("bridge", "nd_targets", e) for e in exact)
    els.update(("bridge", "nd_target_nets", e) for e in nets)
    egress, ingress = port_chains(ident)
    els.add(("inet", "egress_ports", f"{number} : jump {egress}"))
    els.add(("inet", "ingress_ports", f"{number} : jump {ingress}"))
    # What every instance needs (neighbour discovery, its metadata) and, when stateful, what conntrack lets pass
    # (replies) or drops (invalid) first; then the port's groups, each under its number; then nothing else.
    head = "" if stateful else "_stateless"
    chains = tuple((chain, (f"jump head_{d}{head}", *(f"meta mark set {g} jump grp_{d}" for g in groups), "drop"))
                   for d, chain in (("e", egress), ("i", ingress)))  # fmt: skip
    return Part(chains, frozenset(els))


def group_chains(ident: str) -> dict[str, str]:
    return {"e": f"re_{ident}", "i": f"ri_{ident}"}


def group_part(group: security.Group, ident: str, number: int, refs: Mapping[tuple[str, str, int], tuple[int, int]]
               ) -> Part:  # fmt: skip
    """A group's rules as elements keyed by its number; rules naming a remote set go through that set's members
    (a line per remote set, direction and IP version in the group's own chains) and their pair's elements. `refs`:
    (remote set, direction, IP version) -> (the remote set's number, the pair's number)."""
    boxes: dict[str, list[Box]] = {}
    plain: set[Element] = set()
    lines: dict[str, list[str]] = {"e": [], "i": []}
    for rule in group.rules:
        d, v = DIRS[rule.direction], rule.version
        if rule.remote is None:
            key: tuple[str, ...] = (str(number),)
            prefix: IPNetwork | None = rule.prefix or ANYWHERE[v]
            target = f"{d}_%s{v}"
        else:
            remote, pair = refs[(rule.remote, rule.direction, v)]
            for members in (f"rgm{v}", f"rgm{v}_nets"):
                line = (f"meta mark set {remote} meta mark . {ADDR[v][0]} "
                        f"{'daddr' if d == 'e' else 'saddr'} @{members} meta mark set {pair} jump pair")  # fmt: skip
                if line not in lines[d]:
                    lines[d].append(line)
            key, prefix, target = (str(pair),), None, "p_%s"
        if rule.protocol is None:
            if rule.remote is None:
                boxes.setdefault(target % "any", []).append((key, None, prefix))
            else:
                plain.add(("inet", "p_any", key[0]))
        elif rule.ports is not None:
            boxes.setdefault(target % "port", []).append(((*key, str(rule.protocol)), rule.ports, prefix))
        elif rule.protocol in (1, 58) and rule.icmp_type is not None:
            codes = (0, 255) if rule.icmp_code is None else (rule.icmp_code, rule.icmp_code)
            name = target % "icmp" if rule.remote is None else f"p_icmp{v}"
            boxes.setdefault(name, []).append(((*key, str(rule.icmp_type)), codes, prefix))
        elif rule.remote is None:
            boxes.setdefault(target % "proto", []).append(((*key, str(rule.protocol)), None, prefix))
        else:
            plain.add(("inet", "p_proto", f"{key[0]} . {rule.protocol}"))
    els = set(plain)
    for set_name, items in boxes.items():
        els.update(("inet", set_name, e) for e in elements(items))
    chains = []
    for d, name in group_chains(ident).items():
        if lines[d]:
            chains.append((name, tuple(lines[d])))
            els.add(("inet", f"{d}_remote", f"{number} : jump {name}"))
    return Part(tuple(chains), frozenset(els))


def remote_part(number: int, members: Iterable[IPNetwork]) -> Part:
    boxes: dict[int, list[Box]] = {4: [], 6: []}
    for net in members:
        boxes[net.version].append(((str(number),), None, net))
    els: set[Element] = set()
    for v, items in boxes.items():
        exact, nets = split(items)
        els.update(("inet", f"rgm{v}", e) for e in exact)
        els.update(("inet", f"rgm{v}_nets", e) for e in nets)
    return Part(elements=frozenset(els))
