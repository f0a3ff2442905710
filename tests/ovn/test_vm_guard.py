"""What a VM may send its neighbours on the OVN dataplane (issue 28; root), on the rig of test_vm_taps.py: a
neighbour's broadcast and multicast reach a VM's tap (OVN 25.03 left new ports out of their flood groups:
northbound/staging.py), and what no guest may send -- DHCP/DHCPv6 server answers, router advertisements, redirects,
VLAN-tagged frames -- reaches no neighbour, nor even leaves the VM's bridge (the guard of the hybrid plug:
dataplane/ovn/guard.py), whatever OVN's version lets through."""

from __future__ import annotations

import socket
import struct
from typing import Any

import httpx

from cloudnet.dataplane.ovn import hybrid
from tests.ovn import tapio
from tests.ovn import vm_site as r
from tests.ovn.restart_rig import Rig
from tests.support import frames

BLOCKED = 1.0  # how long a frame that must not arrive is waited for (one that must is polled for)


def _pair(vm_api: httpx.Client, vm_rig: Rig, vm_net: Any, names_: tuple[str, str]) -> tuple[Any, Any, Any, Any]:
    """Two VMs on the network: (rogue's port, victim's port, rogue's tap end, victim's tap end)."""
    a, b = (r.launch(vm_api, vm_rig, name, [{"network": vm_net["id"]}]) for name in names_)
    assert vm_rig.chassis.netns is not None
    ends = [tapio.TapEnd(vm_rig.chassis.netns, vm["nets"][0]["device"]) for vm in (a, b)]
    return r.port_of(vm_api, a["nets"][0]["port_id"]), r.port_of(vm_api, b["nets"][0]["port_id"]), ends[0], ends[1]


def test_a_vm_running_a_dhcp_server_reaches_no_neighbour(vm_rig: Rig, vm_api: httpx.Client, vm_net: Any) -> None:
    """Its server's answers do not even leave its bridge (the guard, guard.py), and OVN drops them too for a port
    with port security (NB: 67 -> 68, 547 -> 546 at 1003)."""
    pa, pb, rogue, victim = _pair(vm_api, vm_rig, vm_net, ("vm-rogue", "vm-victim"))
    assert vm_rig.chassis.netns is not None
    uplink = tapio.Sniffer(vm_rig.chassis.netns, hybrid.nic(pa["id"]).switch_leg)
    try:

        def v4(sport: int, dport: int, marker: bytes) -> bytes:  # (unicast, as a server offers to a client's MAC)
            udp = frames.ipv4_udp(r.v4(pa), r.v4(pb), sport, dport, marker)
            return frames.ethernet(pb["mac_address"], pa["mac_address"], 0x0800, udp)

        def v6(sport: int, dport: int, marker: bytes) -> bytes:  # (to its global address: its group lets it in)
            udp = frames.ipv6_udp(r.v6(pa), r.v6(pb), sport, dport, marker)
            return frames.ethernet(pb["mac_address"], pa["mac_address"], 0x86DD, udp)

        def seen(marker: bytes, within: float) -> bool:
            return victim.wait_for(lambda f: marker in f, within) is not None

        # What it sends honestly reaches the neighbour (polled: flows settle); its server's answers do not.
        r.until(lambda: (rogue.send(v4(4000, 4001, b"hello4")), seen(b"hello4", 0.5))[1], "an IPv4 datagram")
        r.until(lambda: (rogue.send(v6(4000, 4001, b"hello6")), seen(b"hello6", 0.5))[1], "an IPv6 datagram")
        assert uplink.wait_for(lambda f: b"hello6" in f, BLOCKED) is not None  # (the sniffer sees what leaves)
        # A broadcast offer (as a server answers a client with no address yet) and a unicast one.
        offer = frames.ipv4_udp(r.v4(pa), "255.255.255.255", 67, 68, b"rogue-offer-bcast")
        rogue.send(frames.ethernet(frames.BROADCAST, pa["mac_address"], 0x0800, offer))
        rogue.send(v4(67, 68, b"rogue-offer"))
        rogue.send(v6(547, 546, b"rogue-advertise"))
        assert not seen(b"rogue-", BLOCKED)
        assert uplink.wait_for(lambda f: b"rogue-" in f, 0.1) is None, "a server answer left the VM's bridge"
    finally:
        uplink.close()
        rogue.close()
        victim.close()


def _to_all(pa: dict[str, Any], marker: bytes) -> list[bytes]:
    """What a guest sends to all its neighbours: an IPv4 broadcast and an IPv6 multicast to ff02::1 (from its
    own addresses, which the neighbours' group lets in)."""
    mac = pa["mac_address"]
    v4 = frames.ethernet(frames.BROADCAST, mac, 0x0800, frames.ipv4_udp(r.v4(pa), "255.255.255.255", 4000, 4001,
                                                                        marker + b"-4"))  # fmt: skip
    v6 = frames.ethernet("33:33:00:00:00:01", mac, 0x86DD, frames.ipv6_udp(r.v6(pa), "ff02::1", 4000, 4001,
                                                                           marker + b"-6"))  # fmt: skip
    return [v4, v6]


def _reaches(sender: tapio.TapEnd, receiver: tapio.TapEnd, frame: bytes, marker: bytes, what: str) -> None:
    r.until(lambda: (sender.send(frame), receiver.wait_for(lambda f: marker in f, 0.5))[1], what)


def test_a_neighbours_broadcast_and_multicast_reach_a_vm(vm_rig: Rig, vm_api: httpx.Client, vm_net: Any) -> None:
    """(OVN 25.03 left a port out of its switch's flood groups when it was added with its ACLs: northbound/staging.py;
    the second VM of a network then got no broadcast, multicast, nor OVN's periodic RAs)"""
    pa, pb, sender, receiver = _pair(vm_api, vm_rig, vm_net, ("vm-bcast", "vm-bcast-peer"))
    try:
        v4, v6 = _to_all(pa, b"to-all")
        _reaches(sender, receiver, v4, b"to-all-4", "an IPv4 broadcast")
        _reaches(sender, receiver, v6, b"to-all-6", "an IPv6 multicast to ff02::1")
        _reaches(receiver, sender, _to_all(pb, b"back")[0], b"back-4", "a broadcast the other way")
    finally:
        sender.close()
        receiver.close()


def test_a_vm_sending_router_advertisements_reaches_no_neighbour(
    vm_rig: Rig, vm_api: httpx.Client, vm_net: Any
) -> None:
    """OVN lets a guest's RA through (23.03: ls_in_acl 65532 `nd || nd_ra || ...` -> next, above any ACL; port
    security looks at no RA, on 25.03 neither: both delivered it to the neighbour's tap): the guard on the VM's
    bridge drops it, and its redirects (guard.py)."""
    pa, pb, rogue, victim = _pair(vm_api, vm_rig, vm_net, ("vm-ra", "vm-ra-victim"))
    assert vm_rig.chassis.netns is not None
    uplink = tapio.Sniffer(vm_rig.chassis.netns, hybrid.nic(pa["id"]).switch_leg)
    try:
        mac = pa["mac_address"]
        # Its multicast to all nodes arrives (polled: flows settle), so the RA that does not is dropped, not lost.
        _reaches(rogue, victim, _to_all(pa, b"honest")[1], b"honest-6", "an IPv6 multicast to ff02::1")
        assert uplink.wait_for(lambda f: b"honest-6" in f, BLOCKED) is not None  # (the sniffer sees what leaves)
        ra = frames.ipv6_icmp(tapio.link_local(mac), "ff02::1", frames.router_advert(mac, b"rogue-ra"))
        rogue.send(frames.ethernet("33:33:00:00:00:01", mac, 0x86DD, ra))
        redirect = struct.pack("!BBHI16s16s", 137, 0, 0, 0, socket.inet_pton(socket.AF_INET6, "fd00:81::1"),
                               socket.inet_pton(socket.AF_INET6, r.v6(pb))) + b"rogue-redirect"  # fmt: skip
        rogue.send(frames.ethernet(pb["mac_address"], mac, 0x86DD,
                                   frames.ipv6_icmp(tapio.link_local(mac), r.v6(pb), redirect)))  # fmt: skip
        # A VLAN tag does not carry it past the guard.
        tagged = frames.ethernet("33:33:00:00:00:01", mac, 0x86DD, ra.replace(b"rogue-ra", b"rogue-vlan"), vlan=5)
        rogue.send(tagged)
        assert victim.wait_for(lambda f: b"rogue-" in f, BLOCKED) is None
        assert uplink.wait_for(lambda f: b"rogue-" in f, 0.1) is None, "an RA left the VM's bridge"
    finally:
        uplink.close()
        rogue.close()
        victim.close()
