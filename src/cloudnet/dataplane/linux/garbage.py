"""Collection on the Linux driver: cloudnet's own devices and namespaces of this host that nothing wants any more,
and an uplink nobody needs handed back to the agent's namespace. Only what carries this host's prefixes is touched
(names.py), or a VM tap's mark for this host (an alias: the tap's name is Nova's, which anybody may use): two agents on
one machine never collect each other's objects, and a foreign device on a cloudnet bridge is left as it is."""

from __future__ import annotations

import os

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from cloudnet.dataplane.kernel import netns, tuntap
from cloudnet.dataplane.linux import names, nat, nft
from cloudnet.dataplane.linux.links import ENODEV, ifname


class Garbage:
    def __init__(self, host: str, nat_tables: nat.NatTables, uplinks: frozenset[str] = frozenset()) -> None:
        self.host = host
        self.host_ns = names.host_ns(host)
        self.router_prefix = names.router_ns_prefix(host)
        self.metadata_prefix = names.metadata_ns_prefix(host)
        self.park_ns = names.park_ns(host)  # the shared holding namespace of earlier versions: removed
        self.managed_prefix = names.managed_ns_prefix(host)
        self.nat = nat_tables
        self.uplinks = uplinks  # the interfaces --uplink maps: the only foreign devices cloudnet moves

    def collect(
        self, host: IPRoute, wanted: set[str], uplinks: set[str], namespaces: set[str], found: list[dict[str, str]]
    ) -> None:
        """Remove cloudnet's own devices and router/metadata namespaces that nothing wants any more; what is removed
        goes into `found`."""
        for msg in host.get_links():
            name = ifname(msg)
            ours = names.is_ours(name) or tuntap.is_marked(msg.get_attr("IFLA_IFALIAS"), self.host)
            if ours and name not in wanted:
                found.append({"object": "garbage", "difference": f"leftover device {name}"})
                try:  # (a VM's tap goes at once, whether or not a VMM still holds it)
                    host.link("del", index=msg["index"])
                except NetlinkError as exc:  # its veth peer went first
                    if exc.code != ENODEV:
                        raise
            elif name in self.uplinks and name not in uplinks:
                # An uplink nobody needs any more goes back to the agent's own namespace. Any other device that is
                # not cloudnet's (a VMM's tap someone put on a bridge) is left where it is, as it is.
                fd = netns.fd_of(netns.AGENT_NS)
                try:
                    host.link("set", index=msg["index"], nomaster=True)
                    host.link("set", index=msg["index"], net_ns_fd=fd)
                finally:
                    os.close(fd)
        for ns in netns.names(self.router_prefix) + netns.names(self.metadata_prefix):
            if ns not in namespaces:
                found.append({"object": "garbage", "difference": f"leftover namespace {ns}"})
                netns.remove(ns)
                self.nat.forget(ns)
        # Namespaces cloudnet provided: of instances gone, of parked devices taken or gone. (What runs in one
        # keeps it alive; only its name goes.)
        for ns in netns.names(self.managed_prefix):
            if ns not in namespaces:
                found.append({"object": "garbage", "difference": f"leftover namespace {ns}"})
                netns.remove(ns)
        netns.remove(self.park_ns)

    def teardown(self) -> None:
        """Remove everything of this host (routers, then the host namespace with its devices)."""
        for ns in (
            netns.names(self.router_prefix) + netns.names(self.metadata_prefix) + netns.names(self.managed_prefix)
        ):
            netns.remove(ns)
            self.nat.forget(ns)
        netns.remove(self.park_ns)
        netns.remove(self.host_ns)
        nft.forget(self.host_ns)
