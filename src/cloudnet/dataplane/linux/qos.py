"""QoS of the instance ports on the Linux driver, from the desired state's `qos` (services/qos/qos_state.py): each
plugged port's bandwidth limits with tc on its host device (qos_tc.py), one step per port, and DSCP marking in
nftables, one table for the host (`bridge cloudnet-qos`: what an instance sends is marked as it enters the bridge,
before the firewall, by a verdict map from its host device to a chain per DSCP value).

An incremental pass touches a port only when its wanted values or its device changed since they were applied; a
full pass reads the kernel for every port again. What a port no longer wants is taken away: its tbf, its redirect,
its ifb device (and the collector removes the ifb of a port gone: names.IFB)."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from cloudnet.dataplane.base import DesiredState
from cloudnet.dataplane.linux import names, nft, qos_tc
from cloudnet.dataplane.linux.passes import Pass, fingerprint_of
from cloudnet.dataplane.steps import StepFailed

TABLE = "cloudnet-qos"
DSCP_STEP = "qos:dscp"


def dscp_table(marks: dict[str, int]) -> str:
    """The body of `bridge cloudnet-qos` marking what each device (name -> DSCP value) receives from its instance."""
    chains = "".join(
        f"  chain dscp{v} {{\n    meta protocol ip ip dscp set {v}\n    meta protocol ip6 ip6 dscp set {v}\n  }}\n"
        for v in sorted(set(marks.values()))
    )
    elements = ", ".join(f'"{dev}" : jump dscp{v}' for dev, v in sorted(marks.items()))
    ports = "  map ports {\n    type ifname : verdict;\n" + (f"    elements = {{ {elements} }}\n" if elements else "")
    hook = "    type filter hook prerouting priority -250; policy accept;\n    iifname vmap @ports\n"
    return f"{chains}{ports}  }}\n  chain prerouting {{\n{hook}  }}"


class PortQos:
    """The QoS job of the Linux driver (after the ports: it needs their devices)."""

    def __init__(self, host_ns: str) -> None:
        self.host_ns = host_ns
        # port id -> (fingerprint of its wanted limits, its device's index, the limits) as last applied
        self.applied: dict[str, tuple[str, int, dict[str, Any]]] = {}
        # port id -> the index of its device when it was known to carry no limit of ours (a full pass's dump, or
        # limits taken off): its first limit is written without reading the kernel first (a dump of every qdisc
        # of the host, ~12 ms with 150 of them).
        self.clean: dict[str, int] = {}
        self.marks: dict[str, int] | None = None  # the DSCP table as last written (None: unknown)

    def forget(self) -> None:
        self.applied.clear()
        self.clean.clear()
        self.marks = None

    def step_keys(self, state: DesiredState) -> list[str]:
        return [DSCP_STEP, *(f"qos:{pid}" for pid in state.get("qos", {}))]

    def apply(self, run: Pass, plugged: Iterable[str]) -> None:
        """Converge the ports of `plugged` (their devices are there) to the desired state's QoS."""
        wanted: dict[str, dict[str, Any]] = run.state.get("qos", {})
        vm_devices = names.vm_port_devices(run.state)
        devices = {pid: names.port_device(pid, vm_devices) for pid in plugged}
        # Only ports that want QoS or had it are looked at (a host's other ports cost nothing); a full pass also
        # finds those whose device carries a qdisc of ours that nothing here applied (before a restart).
        candidates = (set(wanted) | set(self.applied)) & set(devices)
        # The ifb of every port that limits what it sends is kept, plugged in this pass or not: the collector
        # would take it from under a port this pass does not look at.
        run.wanted.update(names.ifb(pid) for pid, v in wanted.items() if (v.get("bandwidth_limit") or {}).get("egress"))
        for pid, device in devices.items():
            if device in run.links.made:  # (made by this pass: no limit on it yet)
                self.clean[pid] = run.links[device]["index"]
        if run.full:
            shaped = self._shaped(run, devices)
            self.clean = {pid: msg["index"] for pid in set(devices) - shaped - set(wanted) - set(self.applied)
                          if (msg := run.links.get(devices[pid])) is not None}  # fmt: skip
            candidates |= shaped
        for pid in sorted(candidates):
            want = wanted.get(pid, {}).get("bandwidth_limit") or {}
            ifb, fingerprint, before = names.ifb(pid), fingerprint_of(want), self.applied.get(pid)
            if not run.full and before is not None and before[0] == fingerprint:
                # unchanged, unless this pass made its device again (the ports job read or made what it touched)
                remade = run.links.cached(devices[pid])
                if remade is None or remade["index"] == before[1]:
                    continue
            msg = run.links.get(devices[pid])
            if msg is None:
                self.applied.pop(pid, None)  # no device (yet): its limits come with it
                continue
            index = msg["index"]
            # What the last pass applied on this very device is trusted by an incremental pass: only the difference
            # is written (a rate changed: one tc message). A full pass reads the kernel and repairs.
            known = before[2] if before is not None and before[1] == index and not run.full else None
            if known is None and not run.full and self.clean.get(pid) == index:
                known = {}  # (nothing to read: known to carry no limit)
            work = functools.partial(self._limits, run, index, ifb, want, known)
            try:
                run.steps.run(f"qos:{pid}", work, fingerprint=fingerprint)
            except StepFailed:
                self.applied.pop(pid, None)
                self.clean.pop(pid, None)
                continue
            if want:
                self.applied[pid] = (fingerprint, index, want)
                self.clean.pop(pid, None)
            else:
                self.applied.pop(pid, None)  # (nothing left of it: no longer looked at)
                self.clean[pid] = index
        for gone in set(self.applied) - set(devices):
            del self.applied[gone]
        for gone in set(self.clean) - set(devices):
            del self.clean[gone]
        marks = {devices[pid]: int(v["dscp_mark"]) for pid, v in wanted.items()
                 if pid in devices and v.get("dscp_mark") is not None}  # fmt: skip
        if run.full or marks != self.marks:
            try:
                run.steps.run(DSCP_STEP, lambda: self._marks(marks, run.full), fingerprint=fingerprint_of(marks))
            except StepFailed:
                self.marks = None

    @staticmethod
    def _shaped(run: Pass, devices: dict[str, str]) -> set[str]:
        """The ports whose host device has a root tbf or an ingress qdisc (one dump of the host's qdiscs)."""
        by_index = {}
        for pid, device in devices.items():
            msg = run.links.get(device)
            if msg is not None:
                by_index[msg["index"]] = pid
        return {by_index[q["index"]] for q in run.host.get_qdiscs()
                if q["index"] in by_index and q.get_attr("TCA_KIND") in ("tbf", "ingress")}  # fmt: skip

    def _limits(self, run: Pass, index: int, ifb: str, want: dict[str, Any], known: dict[str, Any] | None) -> None:
        """The port's limits as `want` says; `known`: what the last pass left on this device (None: read it)."""
        if known is not None:
            self._difference(run, index, ifb, want, known)
            return
        qos_tc.set_shaping(run.host, index, want.get("ingress"))
        if want.get("egress"):
            ifb_index = qos_tc.ensure_ifb(run.host, ifb)
            qos_tc.set_shaping(run.host, ifb_index, want["egress"])
            qos_tc.set_redirect(run.host, index, ifb_index)
        else:
            qos_tc.set_redirect(run.host, index, None)
            qos_tc.remove_device(run.host, ifb)

    @staticmethod
    def _difference(run: Pass, index: int, ifb: str, want: dict[str, Any], known: dict[str, Any]) -> None:
        if want.get("ingress") != known.get("ingress"):
            qos_tc.shape(run.host, index, want.get("ingress"))
        if want.get("egress") == known.get("egress"):
            return
        if not want.get("egress"):
            qos_tc.unredirect(run.host, index)
            qos_tc.remove_device(run.host, ifb)
            return
        if known.get("egress"):  # (the ifb and its redirect are there: the new rate only)
            found = run.links.get(ifb)  # (one netlink get: a lookup by name may dump every link)
            qos_tc.shape(run.host, found["index"] if found else qos_tc.ensure_ifb(run.host, ifb), want["egress"])
            return
        ifb_index = qos_tc.ensure_ifb(run.host, ifb)
        qos_tc.shape(run.host, ifb_index, want["egress"])
        qos_tc.redirect(run.host, index, ifb_index)

    def _marks(self, marks: dict[str, int], full: bool) -> None:
        """The DSCP table as `marks` says; a full pass reads it first and writes only when it differs (a commit
        makes the firewall compare its own tables: firewall._verify)."""
        if full or self.marks is None:
            self.marks = self._current()
        if marks == self.marks:
            return
        if marks:
            nft.replace_table(self.host_ns, "bridge", TABLE, dscp_table(marks))
        else:
            nft.delete_table(self.host_ns, "bridge", TABLE)
        self.marks = dict(marks)

    def _current(self) -> dict[str, int] | None:
        """The marks the kernel's table holds ({} without the table; None: not as this module writes it)."""
        listed = nft.listing(self.host_ns, f"list table bridge {TABLE}")
        if listed is None:
            return {}
        found: dict[str, int] = {}
        chains: dict[str, int] = {}
        for item in listed.get("nftables", []):
            if "map" in item and item["map"].get("name") == "ports":
                for dev, verdict in item["map"].get("elem", []):
                    found[dev] = verdict.get("jump", {}).get("target", "")
            if "rule" in item and item["rule"]["chain"].startswith("dscp"):
                chains[item["rule"]["chain"]] = chains.get(item["rule"]["chain"], 0) + 1
        try:
            out = {dev: int(str(target)[len("dscp") :]) for dev, target in found.items()}
        except ValueError:
            return None
        # each value's chain sets both families' field (else it is rewritten whole)
        return out if all(chains.get(f"dscp{v}") == 2 for v in out.values()) else None
