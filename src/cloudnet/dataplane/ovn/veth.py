"""The veth pairs the OVN driver plugs: the host end a "system" port of br-int (read by a userspace ovs-vswitchd
through AF_PACKET), the other end created directly inside its namespace (no move: no RCU barrier).

The userspace datapath never completes partial checksums: a namespace end that offloads them sends TCP segments
nobody accepts (ping works, TCP times out), so transmit checksumming is turned off there (`ethtool -K tx off`).
"""

from __future__ import annotations

import ctypes
import fcntl
import socket
import struct
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from cloudnet.dataplane.kernel import netns

ENODEV, EEXIST = 19, 17
SIOCETHTOOL = 0x8946
ETHTOOL_GTXCSUM, ETHTOOL_STXCSUM = 0x16, 0x17


def index(ipr: IPRoute, name: str) -> int | None:
    found = ipr.link_lookup(ifname=name)
    return found[0] if found else None


def same_ns_peer(ipr: IPRoute, idx: int) -> str | None:
    """The name of a veth's other end when it is in the same namespace (a pair made as a stand-in for a wire),
    else None (not a veth, or its peer elsewhere: not ours to look at)."""
    link = ipr.get_links(idx)[0]
    info = link.get_attr("IFLA_LINKINFO")
    if info is None or info.get_attr("IFLA_INFO_KIND") != "veth" or link.get_attr("IFLA_LINK_NETNSID") is not None:
        return None
    peer = link.get_attr("IFLA_LINK")
    found = ipr.get_links(peer) if peer else []
    return str(found[0].get_attr("IFLA_IFNAME")) if found else None


def mac(ipr: IPRoute, idx: int) -> str:
    return str(ipr.get_links(idx)[0].get_attr("IFLA_ADDRESS") or "").lower()


def delete(ipr: IPRoute, name: str) -> None:
    """Delete a link that may be gone already (one end of a veth takes its peer along)."""
    idx = index(ipr, name)
    if idx is None:
        return
    try:
        ipr.link("del", index=idx)
    except NetlinkError as exc:
        if exc.code != ENODEV:
            raise


def create(host: IPRoute, name: str, peer: dict[str, Any], ns_fd: int, mtu: int) -> int:
    """The pair `name` (up, in the host namespace) / `peer` (inside the namespace `ns_fd`); a stale pair of the same
    name is replaced. Returns the peer's ifindex inside."""
    delete(host, name)
    try:
        host.link("add", ifname=name, kind="veth", mtu=mtu, state="up", peer={**peer, "mtu": mtu, "net_ns_fd": ns_fd})
    except NetlinkError as exc:
        if exc.code != EEXIST:
            raise
        delete(host, peer["ifname"])  # an interrupted plug's peer left in the host namespace
        host.link("add", ifname=name, kind="veth", mtu=mtu, state="up", peer={**peer, "mtu": mtu, "net_ns_fd": ns_fd})
    return int(host.link("get", ifname=name)[0].get_attr("IFLA_LINK"))


def tx_checksum_off(ns: int | str, ifname: str) -> None:
    """`ethtool -K IFNAME tx off` inside the namespace (SIOCETHTOOL, no process)."""
    set_tx_checksum(ns, ifname, False)


def set_tx_checksum(ns: int | str, ifname: str, on: bool) -> None:
    _ethtool_value(ns, ifname, ETHTOOL_STXCSUM, int(on))


def tx_checksum(ns: int | str, ifname: str) -> bool:
    """Whether the device offloads transmit checksums (`ethtool -k IFNAME`'s tx-checksumming)."""
    return bool(_ethtool_value(ns, ifname, ETHTOOL_GTXCSUM))


def _ethtool_value(ns: int | str, ifname: str, cmd: int, data: int = 0) -> int:
    """One SIOCETHTOOL call with a `struct ethtool_value` inside the namespace; the value the kernel left in it."""
    value = ctypes.create_string_buffer(struct.pack("II", cmd, data))
    request = struct.pack("16sP16x", ifname.encode(), ctypes.addressof(value))
    with netns.entered(ns), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        fcntl.ioctl(sock, SIOCETHTOOL, request)
    return int(struct.unpack_from("II", value.raw)[1])
