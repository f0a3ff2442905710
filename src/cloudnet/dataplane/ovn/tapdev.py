"""Persistent tap devices for VM NICs: made with the tun driver's ioctls (as `ip tuntap add` and Nova's
create_tap_dev do), owned by a configured user and group so that an unprivileged VMM may open them, and marked as
cloudnet's by their alias (kernel/tuntap.mark, as the Linux driver's) and put in the VM tap group (names.VM_TAP_GROUP,
which the guard matches: guard.py), both while the tap is down and before it is made persistent, so a crash in
between leaves nothing (a non-persistent tap goes with the descriptor that made it), and a device without the mark
is never taken, reused or removed, whatever its name.

The device is made without multiqueue and without a vnet header: a VMM attaches with the flags it wants (the
vnet header is chosen per attach; multiqueue must match, and QEMU asks for it only with `queues=`).
The kernel end's MAC is the guest's with its first byte fe (as libvirt does), so that it is never the guest's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from cloudnet.dataplane.kernel import netns, tuntap
from cloudnet.dataplane.ovn import names

TUN_TYPE_TAP = 2
ENODEV = 19


@dataclass(frozen=True)
class Owner:
    """Who may open the taps without CAP_NET_ADMIN (AgentConfig.vm_owner). A tap with neither owner nor group is
    anyone's who can open /dev/net/tun (0666 on Debian): so root owns them unless a user is configured (-1: no
    group)."""

    uid: int = 0
    gid: int = -1


@dataclass(frozen=True)
class Tap:
    index: int
    alias: str
    is_tap: bool  # a tun-driver device in tap mode
    uid: int
    gid: int


class NotOurs(Exception):
    """A device of that name exists that cloudnet did not make: it is left alone."""


def host_mac(mac: str) -> str:
    return "fe" + mac.lower()[2:]


def _tap(link: Any) -> Tap:
    info = link.get_attr("IFLA_LINKINFO")
    data = info.get_attr("IFLA_INFO_DATA") if info is not None and info.get_attr("IFLA_INFO_KIND") == "tun" else None
    uid = data.get_attr("IFLA_TUN_OWNER") if data is not None else None
    gid = data.get_attr("IFLA_TUN_GROUP") if data is not None else None
    return Tap(index=int(link["index"]), alias=str(link.get_attr("IFLA_IFALIAS") or ""),
               is_tap=data is not None and data.get_attr("IFLA_TUN_TYPE") == TUN_TYPE_TAP,
               uid=-1 if uid is None else int(uid), gid=-1 if gid is None else int(gid))  # fmt: skip


def find(ipr: IPRoute, name: str) -> Tap | None:
    found = ipr.link_lookup(ifname=name)
    if not found:
        return None
    try:
        return _tap(ipr.get_links(found[0])[0])
    except NetlinkError as exc:
        if exc.code == ENODEV:
            return None
        raise


def ensure(ns: str, name: str, host: str, port_id: str, mac: str, mtu: int, owner: Owner) -> bool:
    """The tap `name` in namespace `ns`, marked for (host, port), in the VM tap group (the guard's), with this MTU;
    made down when missing (True then; hybrid.py sets it up once it is filtered). NotOurs when a device of that name
    is not one this host marked for this port."""
    with netns.iproute(ns) as ipr:
        found = find(ipr, name)
        if found is not None:
            if not (found.is_tap and found.alias == tuntap.mark(host, port_id)):
                what = "a tap" if found.is_tap else "a device"
                raise NotOurs(f"{what} named {name} that cloudnet did not make is in the way (left alone)")
            ipr.link("set", index=found.index, mtu=mtu, group=names.VM_TAP_GROUP)
            return False
        _create(ns, ipr, name, tuntap.mark(host, port_id), host_mac(mac), mtu, owner)
        return True


def _create(ns: str, ipr: IPRoute, name: str, alias: str, mac: str, mtu: int, owner: Owner) -> None:
    def mark_it() -> None:  # (marked before it persists: an unmarked tap of ours never outlives the make)
        (index,) = ipr.link_lookup(ifname=name)
        ipr.link("set", index=index, ifalias=alias, address=mac, mtu=mtu, group=names.VM_TAP_GROUP)

    tuntap.make_persistent(name, owner.uid, owner.gid, ns=ns, exclusive=False, before_persist=mark_it)


def delete(ipr: IPRoute, name: str, host: str) -> None:
    """Remove the tap if it carries this host's mark (a VMM holding it does not hold this up: its descriptor is
    detached and reads EOF/errors from then on)."""
    found = find(ipr, name)
    if found is None or not tuntap.is_marked(found.alias, host):
        return
    try:
        ipr.link("del", index=found.index)
    except NetlinkError as exc:
        if exc.code != ENODEV:
            raise
