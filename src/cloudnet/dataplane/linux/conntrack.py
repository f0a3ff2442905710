"""Cutting connections a new policy denies: their conntrack entries are deleted (as Neutron's drivers do).

A stateful port passes every packet of a connection conntrack knows as established, whatever its rules say now. So
after a change that takes something away from a port (a rule, a group, a remote member), each entry of the port's
zone (its network) that involves one of its addresses is judged again, as the connection's first packet was: from
the port when the port opened it (egress), towards it when the remote end did (ingress). Entries the new policy
would not let start are deleted; the connection's next packet is then a new one, and is dropped.

One zone at a time (the kernel filters a dump by zone), so that the cost is that of the zone's entries, not of the
whole table. A zone whose network is gone is emptied before its number is given to another network, whose ports
would otherwise inherit its connections. Runs in the host namespace (where the bridges' conntrack table is), through
pyroute2's ctnetlink socket.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import time
from collections.abc import Iterable
from typing import Any

from pyroute2 import NFCTSocket
from pyroute2.netlink import NLM_F_ACK, NLM_F_REQUEST
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.nfnetlink.nfctsocket import IPCTNL_MSG_CT_DELETE, nfct_msg, terminate_error_msg

from cloudnet.dataplane import security

log = logging.getLogger(__name__)
ICMP_ATTRS = {1: "CTA_PROTO_ICMP", 58: "CTA_PROTO_ICMPV6"}
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


Shape = tuple[int, int | None, int | None, int | None]  # (protocol, destination port, ICMP type, ICMP code)


def _shape(orig: Any) -> Shape:
    proto_attrs = orig.get_attr("CTA_TUPLE_PROTO")
    protocol = int(proto_attrs.get_attr("CTA_PROTO_NUM"))
    dport = icmp_type = icmp_code = None
    if protocol in ICMP_ATTRS:
        icmp_type = proto_attrs.get_attr(f"{ICMP_ATTRS[protocol]}_TYPE")
        icmp_code = proto_attrs.get_attr(f"{ICMP_ATTRS[protocol]}_CODE")
    elif protocol in security.PORT_PROTOCOLS:
        dport = proto_attrs.get_attr("CTA_PROTO_DST_PORT")
    return protocol, dport, icmp_type, icmp_code


def _flow(direction: security.Direction, shape: Shape, remote: str) -> security.Flow:
    address = ipaddress.ip_address(remote)
    return security.Flow(direction, address.version, *shape, ipaddress.ip_network(address))


class OutOfTime(Exception):
    """A zone's entries could not all be judged before the deadline (the zone is judged again later)."""


class _Owners:
    """Which of the ports to judge own an address (in their zone): single addresses by lookup, prefixes by scan."""

    def __init__(self, policy: security.HostPolicy, ports: Iterable[str]) -> None:
        self.exact: dict[IPAddress, list[security.PortPolicy]] = {}
        self.prefixes: list[tuple[security.IPNetwork, security.PortPolicy]] = []
        self._verdicts: dict[tuple[str, str, Shape], bool] = {}  # (connections differing only in the source port)
        for port_id in ports:
            port = policy.ports.get(port_id)
            if port is None or not security.port_stateful(port, policy.groups):
                continue  # (a stateless port's chains never look at conntrack)
            for _mac, net in port.allowed:
                if net.prefixlen == net.max_prefixlen:
                    self.exact.setdefault(net.network_address, []).append(port)
                else:
                    self.prefixes.append((net, port))

    def of(self, address: IPAddress) -> list[security.PortPolicy]:
        found = list(self.exact.get(address, ()))
        found += [port for net, port in self.prefixes if address in net and port not in found]
        return found

    def deny(self, policy: security.HostPolicy, msg: Any) -> bool:
        """Would `policy` not let the entry's connection start any more, for one of the ports?"""
        orig = msg.get_attr("CTA_TUPLE_ORIG")
        ip = orig.get_attr("CTA_TUPLE_IP")
        v = "V4" if msg["nfgen_family"] == socket.AF_INET else "V6"
        src, dst = ip.get_attr(f"CTA_IP_{v}_SRC"), ip.get_attr(f"CTA_IP_{v}_DST")
        shape = _shape(orig)
        verdict = self._verdicts.get((src, dst, shape))
        if verdict is None:
            flows = [(port, _flow("egress", shape, dst)) for port in self.of(ipaddress.ip_address(src))]
            flows += [(port, _flow("ingress", shape, src)) for port in self.of(ipaddress.ip_address(dst))]
            verdict = self._verdicts[src, dst, shape] = any(not security.permits(policy, p, f) for p, f in flows)
        return verdict


def sweep(policy: security.HostPolicy, ports: Iterable[str] | None, zone: int, deadline: float) -> int:
    """Delete the entries of conntrack zone `zone` that `policy` denies to `ports` (None: every entry, the zone
    belongs to no network any more), in the calling thread's namespace; how many. OutOfTime once `deadline`
    (time.monotonic) passes, reading or deleting: what was done by then stays done."""
    owners = None if ports is None else _Owners(policy, ports)
    doomed = []
    # Only the zone's entries are read (the kernel filters a dump by zone), both families in one dump.
    ct = NFCTSocket(nfgen_family=socket.AF_UNSPEC)
    try:
        for msg in ct.dump(zone=zone):
            if time.monotonic() > deadline:
                _delete(doomed, deadline + 1.0)  # (a little more, to cut what was found denied)
                raise OutOfTime(f"conntrack zone {zone}: not judged whole in time")
            if (msg.get_attr("CTA_ZONE") or 0) == zone and (owners is None or owners.deny(policy, msg)):
                doomed.append(msg)
    finally:
        ct.close()
    return _delete(doomed, deadline)


def _delete(doomed: list[Any], deadline: float) -> int:
    deleted = 0
    for family in {msg["nfgen_family"] for msg in doomed}:
        ct = NFCTSocket(nfgen_family=family)  # (a delete names its tuple's family)
        try:
            for msg in (m for m in doomed if m["nfgen_family"] == family):
                if time.monotonic() > deadline:
                    raise OutOfTime(f"conntrack: {deleted} of {len(doomed)} connections cut in time")
                request = nfct_msg()
                request["attrs"] = [["CTA_TUPLE_ORIG", msg.get_attr("CTA_TUPLE_ORIG")],
                                    ["CTA_ZONE", msg.get_attr("CTA_ZONE") or 0]]  # fmt: skip
                try:
                    ct.request(request, IPCTNL_MSG_CT_DELETE, msg_flags=NLM_F_REQUEST | NLM_F_ACK,
                               terminate=terminate_error_msg)  # fmt: skip
                    deleted += 1
                except NetlinkError as exc:
                    if exc.code != 2:  # ENOENT: gone meanwhile (closed, timed out)
                        raise
        finally:
            ct.close()
    if deleted:
        log.info("cut %d connection(s) the security group rules deny", deleted)
    return deleted
