"""A VM NIC's hybrid plug, as os-vif's `ovs_hybrid_plug` makes it (Nova's names, 14 characters each):

    VMM -- tap<port> --[qbr<port>: a Linux bridge of its own]-- qvb<port> ==veth== qvo<port> -- br-int

The tap is not a port of br-int: frames a guest sends cross the bridge's forward hook, where the guard (guard.py)
drops what no VM may send (RAs, redirects, DHCP server answers) whatever OVN's version lets through; qvo is the
port of br-int that carries the logical port (vm_ports.py), a veth as a container's is (read by a userspace
ovs-vswitchd through AF_PACKET). qvb does not offload checksums: a guest's partial checksums (virtio's offload)
are completed by the kernel as frames leave the bridge, which the userspace datapath would not do.

Every device is cloudnet's by its alias (kernel/tuntap.mark, the same mark as the tap's): a device of one of these
names without this host's mark for this port is somebody else's, and the whole NIC is refused (NotOurs) before
anything is touched. The kernel takes no alias when it makes a bridge or a veth, so they are made under a name of
cloudnet's (the `cnh` prefixes), marked, then renamed: a device with a Nova name is never unmarked. Everything is
made down, with IPv6 off (no link-local address of the host's own talking to the guest or the network), joined,
and set up last; the bridge and the veth first (qvo on br-int next), the tap last, as os-vif and the VMM's tap come
in that order; applying again changes nothing but what differs (the MTU, a lost bridge membership, a down link).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from cloudnet.dataplane.kernel import netns, tuntap
from cloudnet.dataplane.ovn import names, tapdev, veth
from cloudnet.wire.guest_net import vm_device

TEMP_BRIDGE, TEMP_BRIDGE_LEG, TEMP_SWITCH_LEG = "cnhb-", "cnhv-", "cnho-"
KINDS = {"tap": "tun", "bridge": "bridge", "bridge_leg": "veth", "switch_leg": "veth"}


@dataclass(frozen=True)
class Nic:
    """The devices of one VM NIC."""

    tap: str
    bridge: str
    bridge_leg: str
    switch_leg: str  # the port of br-int

    def all(self) -> tuple[str, str, str, str]:
        return self.tap, self.bridge, self.bridge_leg, self.switch_leg


def nic(port_id: str) -> Nic:
    return Nic(vm_device(port_id), names.nova(names.VM_BRIDGE, port_id), names.nova(names.VM_BRIDGE_LEG, port_id),
               names.nova(names.VM_SWITCH_LEG, port_id))  # fmt: skip


def _temp(prefix: str, port_id: str) -> str:
    return (prefix + port_id.replace("-", ""))[: names.IFNAMSIZ]


@dataclass(frozen=True)
class Link:
    index: int
    alias: str
    kind: str  # IFLA_INFO_KIND ("" for none)
    master: int  # 0: none
    mtu: int
    up: bool


IFF_UP = 0x1


def _links(ipr: IPRoute, names_: tuple[str, ...]) -> dict[str, Link]:
    """The devices of these names that exist, each read by its name (one request each: not a dump of them all)."""
    found: dict[str, Link] = {}
    for name in names_:
        try:
            msg = ipr.link("get", ifname=name)[0]
        except NetlinkError as exc:
            if exc.code == tapdev.ENODEV:
                continue
            raise
        info = msg.get_attr("IFLA_LINKINFO")
        kind = str(info.get_attr("IFLA_INFO_KIND") or "") if info is not None else ""
        found[name] = Link(
            int(msg["index"]), str(msg.get_attr("IFLA_IFALIAS") or ""), kind, int(msg.get_attr("IFLA_MASTER") or 0),
            int(msg.get_attr("IFLA_MTU") or 0), bool(msg["flags"] & IFF_UP))  # fmt: skip
    return found


def refuse_foreign(links: dict[str, Link], devices: Nic, alias: str) -> None:
    """NotOurs when any device of the NIC's names is not one this host marked for this port (of the kind made)."""
    for role, name in zip(KINDS, devices.all(), strict=True):
        found = links.get(name)
        if found is not None and (found.alias != alias or found.kind != KINDS[role]):
            what = "a tap" if found.kind == "tun" else f"a {found.kind or 'device'}"
            raise tapdev.NotOurs(f"{what} named {name} that cloudnet did not make is in the way (left alone)")


def ensure(ns: str, host: str, port_id: str, mac: str, mtu: int, owner: tapdev.Owner,
           before_tap: Callable[[], None] | None = None) -> bool:  # fmt: skip
    """The NIC's devices in namespace `ns`, joined and up, with this MTU (guard.ensure first: the tap's frames are
    filtered from the moment it joins its bridge). True when something was made.

    The bridge and the veth first, up, then `before_tap` (the driver puts qvo on br-int there, so ovn-controller
    binds the port while the tap is made), the tap last: as os-vif plugs them before the VMM's tap exists, so that
    a new tap has only its enslave and its link up left once it appears (what a VMM waits for)."""
    devices, alias = nic(port_id), tuntap.mark(host, port_id)
    temps = (_temp(TEMP_BRIDGE, port_id), _temp(TEMP_BRIDGE_LEG, port_id), _temp(TEMP_SWITCH_LEG, port_id))
    with netns.iproute(ns) as ipr:
        links = _links(ipr, devices.all() + temps)
        refuse_foreign(links, devices, alias)
        made = devices.bridge not in links or devices.bridge_leg not in links or devices.switch_leg not in links
        if devices.bridge not in links:
            _bridge(ipr, links, temps[0], devices.bridge, alias, mtu)
        if devices.bridge_leg not in links or devices.switch_leg not in links:
            _pair(ns, ipr, links, port_id, devices, alias, mtu)
        legs = (devices.bridge, devices.bridge_leg, devices.switch_leg)
        got = _joined(ns, ipr, legs, links, made, mtu, devices.bridge_leg)
        if before_tap is not None:
            before_tap()
        tap_made = tapdev.ensure(ns, devices.tap, host, port_id, mac, mtu, owner)
        _joined(ns, ipr, (devices.tap,), links, tap_made, mtu, devices.tap, got[devices.bridge].index)
    return made or tap_made


def _joined(ns: str, ipr: IPRoute, names_: tuple[str, ...], links: dict[str, Link], made: bool, mtu: int,
            join: str, bridge: int | None = None) -> dict[str, Link]:  # fmt: skip
    """These devices (`links`: as read before any was made) with IPv6 off when just made, `join` on the bridge (the
    first of `names_` unless `bridge` is its index), then all up with this MTU, in that order."""
    if made:
        links = _links(ipr, names_)
        with netns.entered(ns):
            for name in names_:
                with contextlib.suppress(FileNotFoundError):  # (IPv6 off in the kernel: nothing to turn off)
                    netns.write_sysctl(None, f"net/ipv6/conf/{name}/disable_ipv6", "1")
    got = {name: links[name] for name in names_ if name in links}
    for name in names_:
        if name not in got:
            raise tapdev.NotOurs(f"{name} went away while it was plugged")
    master = got[names_[0]].index if bridge is None else bridge
    if got[join].master != master:
        ipr.link("set", index=got[join].index, master=master)
    for name in names_:
        if got[name].mtu != mtu or not got[name].up:
            ipr.link("set", index=got[name].index, mtu=mtu, state="up")
    return got


def _index(ipr: IPRoute, name: str) -> int:
    found = _links(ipr, (name,)).get(name)
    if found is None:
        raise tapdev.NotOurs(f"{name} went away while it was plugged")
    return found.index


def _bridge(ipr: IPRoute, links: dict[str, Link], temp: str, name: str, alias: str, mtu: int) -> None:
    """The NIC's bridge: no STP, no forwarding delay, no multicast snooping (one guest, one uplink: flood all)."""
    if temp in links:
        veth.delete(ipr, temp)  # (an interrupted make's, unmarked)
    ipr.link("add", ifname=temp, kind="bridge", mtu=mtu, br_stp_state=0, br_forward_delay=0, br_mcast_snooping=0)
    index = _index(ipr, temp)
    ipr.link("set", index=index, ifalias=alias)
    ipr.link("set", index=index, ifname=name)


def _pair(ns: str, ipr: IPRoute, links: dict[str, Link], port_id: str, devices: Nic, alias: str, mtu: int) -> None:
    """The veth between the bridge and br-int (a half left by an interrupted make is replaced)."""
    temps = _temp(TEMP_BRIDGE_LEG, port_id), _temp(TEMP_SWITCH_LEG, port_id)
    for name in (*temps, devices.bridge_leg, devices.switch_leg):
        if name in links:
            veth.delete(ipr, name)  # (ours: refuse_foreign checked the Nova names, the temporary ones are cloudnet's)
    ipr.link("add", ifname=temps[0], kind="veth", mtu=mtu, peer={"ifname": temps[1], "mtu": mtu})
    indexes = [_index(ipr, temp) for temp in temps]
    for index in indexes:
        ipr.link("set", index=index, ifalias=alias)
    veth.tx_checksum_off(ns, temps[0])
    for index, name in zip(indexes, (devices.bridge_leg, devices.switch_leg), strict=True):
        ipr.link("set", index=index, ifname=name)
