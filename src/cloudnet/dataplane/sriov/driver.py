"""SR-IOV direct ports on a Linux host, through netlink (pyroute2) — networking.md §3.3.

Plug a reserved VF into its instance:
  1. on the PF: `ip link set <pf> vf <i> mac <port mac> vlan <segmentation id or 0> spoofchk on` (IFLA_VFINFO_LIST
     with IFLA_VF_MAC, IFLA_VF_VLAN and IFLA_VF_SPOOFCHK; `vf_request` builds it, `PfNetlink` sends it). The spoof
     check follows port security (as Neutron's SR-IOV agent sets it): the NIC drops frames the VF sends from
     another MAC. It is all a VF gets: its traffic never crosses the host's bridges, so security groups (and IP
     anti-spoofing) cannot be enforced on it, which the port shows as `binding:vif_details.port_filter: false`;
  2. the VF's netdev (found under sysfs `virtfn<i>/net/`) gets an alias naming the VF, moves into the
     instance namespace and is renamed to eth<position>; MAC, MTU, state, addresses and routes as the
     Linux dataplane sets them for a veth port (kernel/addressing.py);
  3. the port is reported ACTIVE, vif_type hw_veb.
An instance with `handoff` (Docker's Join) has its netdev taken out of its namespace by the runtime: once it has
left, only the PF side is set; the netdev is the runtime's until it comes home (release).
Release: on the PF `vf <i> vlan 0 mac 00:00:00:00:00:00` (no duplicate MAC when the VF is reused), the
netdev gets its own name back and returns to the host namespace.

What is plugged where is written to <state_dir>/sriov/<pci slot>.json before anything moves, so an agent
restarted at any point finds its VFs: a VF whose reservation is gone from the desired state (its instance
was deleted meanwhile) is reset and handed back to the host namespace, which frees it on the next report.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.requests.link import LinkIPRouteFilter

from cloudnet.dataplane.base import DesiredState, PortReport
from cloudnet.dataplane.kernel import addressing, netns
from cloudnet.dataplane.kernel.ns_guard import InstanceNamespaces, NamespaceRefused
from cloudnet.dataplane.sriov import inventory as inv
from cloudnet.dataplane.steps import StepFailed, Steps

log = logging.getLogger(__name__)
VIF_TYPE = "hw_veb"
ZERO_MAC = "00:00:00:00:00:00"
ALIAS_PREFIX = "cloudnet-vf "

VfSetter = Callable[[dict[str, Any]], None]


def vf_request(pf_index: int, vf_index: int, mac: str, vlan: int, spoofchk: bool | None = None) -> dict[str, Any]:
    """The exact `IPRoute.link("set", **request)` that sets a VF's MAC and VLAN (and spoof check) on its PF."""
    vf: dict[str, Any] = {"vf": vf_index, "mac": mac, "vlan": vlan}
    if spoofchk is not None:
        vf["spoofchk"] = int(spoofchk)
    return {"index": pf_index, "vf": vf}


def vf_nla(request: dict[str, Any]) -> dict[str, Any]:
    """The IFLA_VFINFO_LIST attribute pyroute2 sends for `request` (IFLA_VF_INFO with IFLA_VF_VLAN, IFLA_VF_MAC)."""
    vf = request["vf"]
    return dict(LinkIPRouteFilter("set").set_vf({}, dict(vf)))


class PfNetlink:
    """Sends VF requests to the PF in the agent's namespace. Needs SR-IOV hardware (a veth PF refuses it)."""

    def __call__(self, request: dict[str, Any]) -> None:
        with netns.iproute(None) as root:
            root.link("set", index=request["index"], vf=dict(request["vf"]))


def _spoofchk(port: dict[str, Any]) -> bool:
    return bool(port.get("port_security_enabled", True))


def _alias(slot: str, netdev: str) -> str:
    return f"{ALIAS_PREFIX}{slot} {netdev}"


def _lookup(ipr: IPRoute, ifname: str) -> int | None:
    found = ipr.link_lookup(ifname=ifname)
    return found[0] if found else None


def _by_alias(ipr: IPRoute, alias: str) -> int | None:
    for msg in ipr.get_links():
        if msg.get_attr("IFLA_IFALIAS") == alias:
            return int(msg["index"])
    return None


class SriovDataplane:
    """Converges the host's direct ports to `state["sriov"]` (services/sriov.desired) and the instances: the port
    binder (dataplane.base.PortBinder) of vnic type `direct`, which a driver plugging the other ports composes."""

    vnic_type = "direct"

    def __init__(
        self,
        host: str,
        state_dir: Path,
        *,
        mappings: dict[str, list[str]] | None = None,
        exclude: dict[str, set[str]] | None = None,
        sysfs_root: Path = inv.DEFAULT_SYSFS_ROOT,
        set_vf: VfSetter | None = None,
        report: dict[str, Any] | None = None,
    ) -> None:
        self.host = host
        self.records_dir = Path(state_dir) / "sriov"
        self.mappings = dict(mappings or {})
        self.exclude = dict(exclude or {})
        self.sysfs_root = Path(sysfs_root)
        self.set_vf: VfSetter = set_vf or PfNetlink()
        # The agent's heartbeat report (the same dict): its "sriov" member is refreshed after changes.
        self.report = report
        self._applied: dict[str, tuple[Any, ...]] = {}
        self.steps = Steps()  # (when applied on its own; the Linux driver passes its own)

    # -- inventory ----------------------------------------------------------------------------

    def inventory(self) -> dict[str, Any]:
        return inv.inventory_report(inv.read_inventory(self.mappings, self.exclude, self.sysfs_root))

    def refresh_report(self) -> None:
        if self.report is not None:
            self.report["sriov"] = self.inventory()

    # -- records ------------------------------------------------------------------------------

    def records(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        if self.records_dir.is_dir():
            for path in sorted(self.records_dir.glob("*.json")):
                try:
                    rec = json.loads(path.read_text())
                    out[rec["pci_slot"]] = rec
                except (OSError, ValueError, KeyError):
                    log.warning("SR-IOV: unreadable record %s", path)
        return out

    def _write(self, rec: dict[str, Any]) -> None:
        self.records_dir.mkdir(parents=True, exist_ok=True)
        path = self.records_dir / f"{rec['pci_slot']}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(rec))
        os.replace(tmp, path)

    def _forget(self, slot: str) -> None:
        (self.records_dir / f"{slot}.json").unlink(missing_ok=True)

    # -- the whole state ----------------------------------------------------------------------

    def is_plugged(self, port_id: str) -> bool:
        """The port's VF was plugged into its instance by this driver (and not released since)."""
        return port_id in self._applied

    def step_keys(self, state: DesiredState) -> list[str]:
        """The step keys of this driver's objects (see apply)."""
        return [f"vf:{r['port_id']}" for r in state.get("sriov", [])] + [f"vf-release:{s}" for s in self.records()]

    def apply(
        self, state: DesiredState, steps: Steps | None = None, guard: InstanceNamespaces | None = None
    ) -> list[PortReport]:
        """Each VF plugged or released as a step of its own (a PF that refuses a VF's MAC or VLAN, as some NICs do,
        fails that port only); instance namespaces are opened through `guard`, checked, as the veth driver does.
        The Linux driver passes its own steps and pass view; alone, the driver keeps its own."""
        steps = steps or self.steps
        guard = guard or InstanceNamespaces(self.host, state["instances"])
        where: dict[str, tuple[dict[str, Any], int]] = {}
        for inst in state["instances"]:
            for position, pid in enumerate(inst["ports"]):
                where[pid] = (inst, position)
        wanted = {r["pci_slot"]: r for r in state.get("sriov", []) if r["port_id"] in where}
        changed = False
        records = self.records()
        for slot, rec in records.items():
            res = wanted.get(slot)
            inst_pos = where.get(rec["port_id"])
            same = (res is not None and res["port_id"] == rec["port_id"] and inst_pos is not None
                    and inst_pos[0]["netns"] == rec["netns"]
                    and rec["ifname"] == addressing.device_name(*inst_pos))  # fmt: skip
            if not same:
                with contextlib.suppress(StepFailed):
                    steps.run(f"vf-release:{slot}", lambda r=rec: self.release(r, guard))
                self._applied.pop(rec["port_id"], None)
                changed = True
        reports = []
        for slot, res in wanted.items():
            inst, position = where[res["port_id"]]
            port = state["ports"].get(res["port_id"])
            if port is None:
                continue
            network = state["networks"][port["network_id"]]
            details = {"vlan": str(res["vlan"]), "port_filter": False}  # groups cannot be enforced on a VF
            up = "ACTIVE" if port["admin_state_up"] else "DOWN"
            fingerprint = (
                slot, res["vlan"], _spoofchk(port), *addressing.fingerprint(inst, position, port, network, state)
            )  # fmt: skip
            if self._applied.get(res["port_id"]) == fingerprint and netns.exists(inst["netns"]):
                reports.append(PortReport(res["port_id"], up, VIF_TYPE, details))
                continue
            try:
                plugged = steps.run(f"vf:{res['port_id']}",
                                    lambda i=inst, p=position, o=port, n=network, r=res: self._plug_step(
                                        i, p, o, n, r, state, guard),
                                    fingerprint)  # fmt: skip
            except StepFailed as exc:
                reports.append(PortReport(res["port_id"], "ERROR", "binding_failed", {"reason": exc.reason}))
                continue
            if not plugged:  # no namespace (yet): the runtime may still make it, so no ERROR
                reports.append(PortReport(res["port_id"], "DOWN", "binding_failed", {"reason": "netns missing"}))
                continue
            changed = True
            self._applied[res["port_id"]] = fingerprint
            reports.append(PortReport(res["port_id"], up, VIF_TYPE, details))
        if changed:
            self.refresh_report()
        return reports

    def close(self) -> None:
        self._applied.clear()

    # -- plug ---------------------------------------------------------------------------------

    def _plug_step(
        self, inst: dict[str, Any], position: int, port: dict[str, Any], network: dict[str, Any], res: dict[str, Any],
        state: DesiredState, guard: InstanceNamespaces,
    ) -> bool:  # fmt: skip
        """Plug the VF; False (nothing changed) when the instance's namespace does not exist."""
        try:
            fd = guard.open(inst)
        except netns.NamespaceMissing:
            log.warning("instance %s: network namespace %s does not exist", inst["id"], inst["netns"])
            return False
        try:
            self.plug(inst, fd, position, port, network, res, state)
        finally:
            os.close(fd)
        return True

    def plug(
        self,
        inst: dict[str, Any],
        ns_fd: int,  # the instance's namespace, opened and checked (ns_guard)
        position: int,
        port: dict[str, Any],
        network: dict[str, Any],
        res: dict[str, Any],
        state: DesiredState,
    ) -> None:
        slot, ifname, ns = res["pci_slot"], addressing.device_name(inst, position), inst["netns"]
        rec = self.records().get(slot)
        was_plugged = rec is not None
        if rec is None:
            vf = inv.vf_by_slot(self.sysfs_root, res["pf"], int(res["vf_index"]))
            if vf is None or vf.pci_slot != slot:
                raise VfUnavailable(f"VF {res['pf']}/{res['vf_index']} ({slot}) not found in sysfs")
            if vf.netdev is None:
                raise VfUnavailable(f"VF {slot} has no netdev in the host namespace")
            rec = {"pci_slot": slot, "pf": res["pf"], "vf_index": int(res["vf_index"]), "netdev": vf.netdev,
                   "port_id": port["id"], "netns": ns, "ifname": ifname}  # fmt: skip
        with netns.iproute(None) as root:
            pf_index = _lookup(root, res["pf"])
            if pf_index is None:
                raise VfUnavailable(f"Invalid Device {res['pf']}: Device not found")
            try:
                self.set_vf(vf_request(pf_index, int(res["vf_index"]), port["mac_address"], int(res["vlan"]),
                                       _spoofchk(port)))  # fmt: skip
            except NetlinkError as exc:  # e.g. EOPNOTSUPP: a PF whose driver does not set VFs over netlink
                why = f"{os.strerror(exc.code)} (errno {exc.code})"
                raise VfUnavailable(
                    f"PF {res['pf']} refused the settings (MAC, VLAN, spoof check) of VF {res['vf_index']}: {why}"
                ) from None
            idx = _lookup(root, rec["netdev"])
            if idx is not None:  # still in the host namespace: move it
                self._write(rec)
                root.link("set", index=idx, state="down")
                root.link("set", index=idx, ifalias=_alias(slot, rec["netdev"]))
                root.link("set", index=idx, net_ns_fd=ns_fd)
        with netns.iproute(ns_fd) as guest:
            idx = _lookup(guest, rec["netdev"])
            if idx is not None:
                guest.link("set", index=idx, ifname=ifname)
            idx = _lookup(guest, ifname) or _by_alias(guest, _alias(slot, rec["netdev"]))
            if idx is None and inst.get("handoff") and was_plugged:
                return  # handed off (Docker's Join took it out): the PF side is all that is ours to set
            if idx is None:
                raise VfUnavailable(f"VF {slot} netdev {rec['netdev']} is neither on the host nor in {ns}")
            lo = guest.link_lookup(ifname="lo")
            if lo:
                guest.link("set", index=lo[0], state="up")
            state_up = "up" if port["admin_state_up"] else "down"
            guest.link("set", index=idx, address=port["mac_address"], mtu=network["mtu"], state=state_up)
            addressing.configure_addresses(guest, idx, port)
            addressing.configure_routes(guest, idx, port, state, default=position == 0)
        self._write(rec)

    # -- release ------------------------------------------------------------------------------

    def release(self, rec: dict[str, Any], guard: InstanceNamespaces) -> None:
        """Reset the VF on its PF and hand its netdev back to the host namespace under its own name (from the
        instance's namespace when that is still one to enter; else it comes home when that namespace goes)."""
        slot, alias = rec["pci_slot"], _alias(rec["pci_slot"], rec["netdev"])
        with netns.iproute(None) as root:
            pf_index = _lookup(root, rec["pf"])
            if pf_index is not None:
                try:
                    self.set_vf(vf_request(pf_index, int(rec["vf_index"]), ZERO_MAC, 0))
                except NetlinkError as exc:
                    log.error("SR-IOV: resetting VF %s on %s: %s", rec["vf_index"], rec["pf"], exc)
            idx = _lookup(root, rec["netdev"]) or _by_alias(root, alias)
        if idx is None:
            with contextlib.suppress(netns.NamespaceMissing, NamespaceRefused):
                self._bring_home(
                    guard.open({"id": f"(released VF {slot})", "netns": rec["netns"]}, claim=False), rec, alias
                )
        with netns.iproute(None) as root:
            idx = _lookup(root, rec["netdev"]) or _by_alias(root, alias)
            if idx is None:
                log.warning("SR-IOV: VF %s netdev %s not found; only the PF side was reset", slot, rec["netdev"])
            else:
                root.link("set", index=idx, state="down")
                if _lookup(root, rec["netdev"]) is None:  # came home under another name (namespace deleted)
                    root.link("set", index=idx, ifname=rec["netdev"])
                root.link("set", index=idx, ifalias="")
        self._forget(slot)

    @staticmethod
    def _bring_home(guest_fd: int, rec: dict[str, Any], alias: str) -> None:
        """Move the VF's netdev from the instance's namespace (`guest_fd`, closed here) back to the agent's."""
        try:
            with netns.iproute(guest_fd) as guest:
                gidx = _by_alias(guest, alias)
                if gidx is not None:
                    guest.link("set", index=gidx, state="down")
                    guest.link("set", index=gidx, ifname=rec["netdev"])  # its own name before it goes home
                    fd = netns.fd_of(netns.AGENT_NS)
                    try:
                        guest.link("set", index=gidx, net_ns_fd=fd)
                    finally:
                        os.close(fd)
        finally:
            os.close(guest_fd)


class VfUnavailable(RuntimeError):
    pass
