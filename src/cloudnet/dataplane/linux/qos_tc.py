"""Bandwidth limits on a port's host device with tc (pyroute2), in Neutron's directions (the instance's view):

  ingress (to the instance)   a tbf qdisc at the root of the host device: what the host sends to the instance
                              leaves through it, shaped.
  egress (from the instance)  what the instance sends arrives as the host device's ingress, where nothing can queue:
                              an `ingress` qdisc redirects it (u32 match-all, mirred) to an ifb device of the port's
                              own (cnf-<port>), whose root tbf shapes it before the ifb hands it back to the host
                              device's receive path (bridge, firewall) as if it had just arrived. (Shaping, not
                              policing: the kernels cloudnet runs on need not have tc's police action, and a shaped
                              TCP stream keeps its rate where a policed one saws.) The redirect is one filter on an
                              ingress qdisc it shares: a trunk parent's VLAN classifier (vlan_bpf.py) runs first and
                              sends its subports' tagged frames on (the ifb's hand-back skips the device's filters),
                              so only the parent's own traffic is shaped here, as Neutron applies a parent's policy.

Each function reads the kernel first and changes only what differs: applying the same limit twice changes nothing.
"""

from __future__ import annotations

from typing import Any

from pyroute2 import IPRoute, protocols
from pyroute2.netlink.exceptions import NetlinkError

from cloudnet import vlan_bpf
from cloudnet.dataplane.linux.links import ENODEV

ROOT, TBF_HANDLE, INGRESS_HANDLE = 0xFFFFFFFF, 0x10000, 0xFFFF0000
LATENCY = "50ms"  # the longest a packet waits in a tbf queue (Neutron's tc_lib: 50 ms)
BURST_SHARE = 0.8  # Neutron's default burst when a rule gives none: 80 % of the rate's bits in a second
MIN_BURST = 15000  # bytes: ten full frames, so that a small limit still passes whole packets
MAX_RATE = 2**32 - 1  # bytes/s: tbf's 32-bit rate (34 Gbit/s); a larger limit is this one
ENOENT, EINVAL, EEXIST = 2, 22, 17
REDIRECT_PRIO = vlan_bpf.PRIO + 0x10  # after a trunk parent's VLAN classifier on the same ingress qdisc
MATCH_ALL = ["0x0/0x0+0"]


def rate_and_burst(limit: dict[str, Any]) -> tuple[int, int]:
    """(rate in bytes/s, burst in bytes) of a rule's {"max_kbps", "max_burst_kbps"} (kbit = 1000 bits)."""
    kbps = int(limit["max_kbps"])
    burst_kbit = int(limit.get("max_burst_kbps") or 0) or kbps * BURST_SHARE
    return min(kbps * 125, MAX_RATE), max(int(burst_kbit * 125), MIN_BURST)


def _root_tbf(ipr: IPRoute, index: int) -> dict[str, Any] | None:
    for q in ipr.get_qdiscs(index=index):
        if q["parent"] == ROOT and q.get_attr("TCA_KIND") == "tbf":
            parms = q.get_nested("TCA_OPTIONS", "TCA_TBF_PARMS")
            return dict(parms) if parms else {}
    return None


def set_shaping(ipr: IPRoute, index: int, limit: dict[str, Any] | None) -> bool:
    """The root tbf of device `index` at `limit` (None: no tbf, the device's default qdisc). Whether it changed."""
    current = _root_tbf(ipr, index)
    if limit is None:
        if current is None:
            return False
        shape(ipr, index, None)
        return True
    rate, burst = rate_and_burst(limit)
    # (the kernel answers the burst as a time: the rate, and the queue's limit that the burst is part of, tell)
    if current is not None and current.get("rate") == rate and current.get("limit") == _limit(rate, burst):
        return False
    shape(ipr, index, limit)
    return True


def shape(ipr: IPRoute, index: int, limit: dict[str, Any] | None) -> None:
    """Write the root tbf of device `index` for `limit` (None: remove it) without reading first."""
    if limit is None:
        _ignore_gone(lambda: ipr.tc("del", index=index, handle=TBF_HANDLE, parent=ROOT))
        return
    rate, burst = rate_and_burst(limit)
    ipr.tc("replace", "tbf", index, TBF_HANDLE, rate=f"{rate * 8}bit", burst=burst, latency=LATENCY)


def _limit(rate: int, burst: int) -> int:
    # as pyroute2 computes it (tc's too): the bytes the queue holds, rate * latency (50 ms in µs) + burst
    return int(rate * 50000.0 / 1000000 + burst)


def redirect_target(ipr: IPRoute, index: int) -> int | None:
    """The device the ingress filter of `index` redirects to (None: no such filter)."""
    try:
        filters = ipr.get_filters(index=index, parent=INGRESS_HANDLE)
    except NetlinkError as exc:
        if exc.code in (ENOENT, EINVAL):
            return None
        raise
    for f in filters:
        if (f["info"] >> 16) != REDIRECT_PRIO:
            continue  # (another's filter on the shared qdisc: a trunk's VLAN classifier)
        parms = f.get_nested("TCA_OPTIONS", "TCA_U32_ACT", "TCA_ACT_PRIO_1", "TCA_ACT_OPTIONS", "TCA_MIRRED_PARMS")
        if parms:
            return int(parms["ifindex"])
    return None


def set_redirect(ipr: IPRoute, index: int, ifb_index: int | None) -> bool:
    """Device `index`'s arriving traffic redirected to device `ifb_index` (None: not redirected). Whether it
    changed."""
    current = redirect_target(ipr, index)
    if current == ifb_index:
        return False
    if current is not None:
        unredirect(ipr, index)
    if ifb_index is not None:
        redirect(ipr, index, ifb_index)
    return True


def unredirect(ipr: IPRoute, index: int) -> None:
    """No redirect filter on device `index`'s ingress; the qdisc goes too unless it holds another's filter (a
    trunk's classifier)."""
    try:
        # (pyroute2's u32 wants the filter's match to delete it; the priority alone picks ours, as `tc` does)
        ipr.tc("del-filter", "u32", index, parent=INGRESS_HANDLE, prio=REDIRECT_PRIO, protocol=protocols.ETH_P_ALL,
               target=0x10001, keys=MATCH_ALL)  # fmt: skip
        if not any(f["info"] for f in ipr.get_filters(index=index, parent=INGRESS_HANDLE)):
            ipr.tc("del", "ingress", index, INGRESS_HANDLE)
    except NetlinkError as exc:
        if exc.code not in (ENOENT, EINVAL, ENODEV):  # (no such filter, no ingress qdisc, no device)
            raise


def redirect(ipr: IPRoute, index: int, ifb_index: int) -> None:
    """A filter on device `index`'s ingress qdisc (made when missing) redirecting what it receives to device
    `ifb_index`."""
    try:
        ipr.tc("add", "ingress", index, INGRESS_HANDLE)
    except NetlinkError as exc:
        if exc.code != EEXIST:
            raise
    ipr.tc("add-filter", "u32", index, parent=INGRESS_HANDLE, prio=REDIRECT_PRIO, protocol=protocols.ETH_P_ALL,
           target=0x10001, keys=MATCH_ALL,
           action={"kind": "mirred", "direction": "egress", "action": "redirect", "ifindex": ifb_index})  # fmt: skip
    return True


def ensure_ifb(ipr: IPRoute, name: str) -> int:
    """The ifb device `name`, up; its index."""
    found = ipr.link_lookup(ifname=name)
    if not found:
        ipr.link("add", ifname=name, kind="ifb")
        found = ipr.link_lookup(ifname=name)
    ipr.link("set", index=found[0], state="up")
    return int(found[0])


def remove_device(ipr: IPRoute, name: str) -> bool:
    found = ipr.link_lookup(ifname=name)
    if not found:
        return False
    _ignore_gone(lambda: ipr.link("del", index=found[0]))
    return True


def _ignore_gone(fn: Any) -> None:
    try:
        fn()
    except NetlinkError as exc:
        if exc.code not in (ENOENT, ENODEV, EINVAL):
            raise
