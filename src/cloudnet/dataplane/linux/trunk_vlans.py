"""Trunk subports on the Linux driver: each subport a device of its own on its network's bridge, fed by the parent's.

    instance netns:  eth0 (the parent port; the guest's VLAN interfaces on it, e.g. eth0.101 for a subport)
                       |  veth (or a VM's tap)
    host netns:      cnt-<parent> on cnb-<parent's network>        (tc ingress: untag, cloudnet/vlan_bpf.py)
                       :  VLAN 101, untagged, redirected
                     cns-<subport> --veth-- cnt-<subport> on cnb-<subport's network>
                       (tc ingress: tag 101, redirected out of cnt-<parent>)

Why this and not VLAN devices or the bridge's VLAN filtering: both are kernel options a host may not have (the one
these tests run on has neither), while tc's eBPF classifiers with their VLAN helpers are in every kernel that runs
containers (vlan_bpf.py). The subport's device is named as any port's host end (names.tap): the firewall filters
it as the subport (its MAC, addresses, groups: fw_render.py keys them by device name), collection knows it by its
prefix, and the parent's bridge stays as it is. A frame tagged with a VLAN that is no subport's (or 802.1ad) is
dropped on the parent's device; the bridge filter drops every tagged frame an instance sends in any case
(fw_render.py: as OVN drops tagged frames from a VIF unless the switch passes VLANs through).

One step per trunk (`trunk:<parent>`), after the instance ports: the parent must be plugged (its device there);
its subports are reported ACTIVE once their devices and both classifiers are in place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyroute2 import IPRoute

from cloudnet import vlan_bpf
from cloudnet.dataplane import security
from cloudnet.dataplane.base import DesiredState, PortReport, failed
from cloudnet.dataplane.linux import names
from cloudnet.dataplane.linux.bridges import Bridges
from cloudnet.dataplane.linux.links import Links, delete
from cloudnet.dataplane.linux.passes import Pass, broken_reason, plugged_report
from cloudnet.dataplane.steps import StepFailed
from cloudnet.dataplane.trunks import Sub, trunks_of

IFF_UP = 0x1


class TrunkVlans:
    """The subports of the host's trunks (a part of the ports job: dataplane.base.Ports' subports)."""

    def __init__(self, bridges: Bridges, firewall: security.Firewall) -> None:
        self.bridges = bridges
        self.firewall = firewall
        self.applied: dict[str, tuple[Any, ...]] = {}  # parent port id -> what its step last made
        self.devices: dict[str, str] = {}  # parent port id -> its host device, while it carries subports

    def step_keys(self, state: DesiredState) -> list[str]:
        return [f"trunk:{parent['id']}" for parent, _subs in trunks_of(state)]

    def forget(self) -> None:
        self.applied.clear()

    def apply(self, run: Pass, plugged: Callable[[str], bool]) -> list[PortReport]:
        reports: list[PortReport] = []
        vm_devices = names.vm_port_devices(run.state)
        trunks = trunks_of(run.state)
        for parent, subs in trunks:
            run.wanted.update(n for sub, _vid in subs for n in (names.tap(sub["id"]), names.trunk_end(sub["id"])))
            if not plugged(parent["id"]):
                continue  # (no device to ride on yet: the subports stay as they are, DOWN)
            device = names.port_device(parent["id"], vm_devices)
            self.devices[parent["id"]] = device
            reports += self._trunk(run, parent, device, subs)
        # A parent whose trunk went (its device still plugged): its classifier goes too.
        for pid in set(self.devices) - {p["id"] for p, _s in trunks}:
            device = self.devices.pop(pid)
            self.applied.pop(pid, None)
            if device in run.links:
                try:
                    run.steps.run(f"untrunk:{pid}", lambda d=device: vlan_bpf.detach(run.host, run.links[d]["index"]))
                except StepFailed:
                    self.devices[pid] = device  # tried again next pass
        return reports

    def _trunk(self, run: Pass, parent: dict[str, Any], device: str, subs: list[Sub]) -> list[PortReport]:
        broken = {sub["id"]: why for sub, _vid in subs if (why := broken_reason(sub, run.broken))}
        ok = [(sub, vid) for sub, vid in subs if sub["id"] not in broken]
        reports = [failed(pid, why) for pid, why in broken.items()]
        lower = run.links.get(device)
        if lower is None:
            return reports + [failed(sub["id"], f"parent port's device {device} is missing") for sub, _v in ok]
        networks = run.state["networks"]
        want = (lower["index"], *((sub["id"], vid, sub["network_id"], networks[sub["network_id"]]["mtu"],
                                   sub["admin_state_up"]) for sub, vid in ok))  # fmt: skip
        current = self.applied.get(parent["id"]) == want and all(names.tap(s["id"]) in run.links for s, _v in ok)
        if not (current and not run.full):
            try:
                run.steps.run(f"trunk:{parent['id']}", lambda: self._ensure(run.host, run.links, lower, ok, networks),
                              want)  # fmt: skip
            except StepFailed as exc:
                self.applied.pop(parent["id"], None)
                return reports + [failed(sub["id"], exc.reason) for sub, _vid in ok]
            self.applied[parent["id"]] = want
        return reports + [plugged_report(sub, f"{device}.{vid}", self.firewall.enforced(sub["id"]),
                                         parent_port=parent["id"], segmentation_id=vid) for sub, vid in ok]  # fmt: skip

    def _ensure(self, host: IPRoute, links: Links, lower: Any, subs: list[Sub], networks: dict[str, Any]) -> None:
        """Each subport's veth (cnt- on its network's bridge at its MTU, never above the parent's; cns- tagging
        towards the parent), then the parent's classifier naming every subport's cns- end."""
        ends: list[tuple[int, int]] = []
        for sub, vid in subs:
            mtu = min(networks[sub["network_id"]]["mtu"], lower.get_attr("IFLA_MTU"))
            end = self._veth(host, links, sub, mtu)
            vlan_bpf.ensure(host, end, vlan_bpf.tag_program(vid, lower["index"]), "tag")
            ends.append((vid, end))
        vlan_bpf.ensure(host, lower["index"], vlan_bpf.untag_program(ends), "untag")

    def _veth(self, host: IPRoute, links: Links, sub: dict[str, Any], mtu: int) -> int:
        """The subport's pair, as wanted: its cns- end's index."""
        outer, inner = names.tap(sub["id"]), names.trunk_end(sub["id"])
        bridge = self.bridges.index(host, sub["network_id"])
        state = "up" if sub["admin_state_up"] else "down"
        msg, end = links.get(outer), links.get(inner)
        if msg is None or end is None or msg.get_attr("IFLA_LINK") != end["index"]:
            for name in (outer, inner):  # a half, or another kind of device by that name: made anew
                if (found := links.get(name)) is not None:
                    delete(host, found["index"])
                    links.discard(name)
            host.link("add", ifname=outer, kind="veth", peer={"ifname": inner, "mtu": mtu}, mtu=mtu)
            links.refresh(outer)
            links.refresh(inner)
            msg, end = links[outer], links[inner]
        if (msg.get_attr("IFLA_MASTER"), msg.get_attr("IFLA_MTU"), bool(msg["flags"] & IFF_UP)) != (
            bridge, mtu, state == "up"):  # fmt: skip
            host.link("set", index=msg["index"], master=bridge, mtu=mtu, state=state)
            links.refresh(outer)
        if (end.get_attr("IFLA_MTU"), bool(end["flags"] & IFF_UP)) != (mtu, True):
            host.link("set", index=end["index"], mtu=mtu, state="up")
            links.refresh(inner)
        return int(end["index"])
