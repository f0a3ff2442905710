"""The Linux firewall: security groups and port security of this host's instance ports, in the host namespace.

The tables and why they look as they do are in fw_render.py. Here: from the desired state to the kernel, one object
at a time and one transaction per change. Every object (a port, a group, a remote set) is parsed and rendered as a
step of its own (Steps.run with its key and fingerprint; its part of the tables goes by the same key): one that
fails keeps what it had in the kernel (or, new, has nothing there, so its device passes nothing) and is reported,
while the others converge. What was applied is kept as one Part per object; a pass diffs the wanted parts against
it and sends only the difference, as one atomic transaction. A transaction the kernel refuses (it no longer holds
what was applied: a table flushed by hand) is followed by a rewrite of both tables whole, in one transaction; should
that fail too, the parts the kernel refuses are found (fw_check.refused) and left out, so a pass can never fail on
what is already there. A full pass checks that br_netfilter still calls the tables and, when something was committed
in the namespace since (or a check asks), that the kernel holds them as applied: declarations, rules and elements
(fw_check); differences are reported and the tables written whole.

All of that is the step "firewall", whose fingerprint is a hash of its inputs (an event about anything else does not
retry it before its backoff). After it, each conntrack zone with work is a step of its own ("conntrack-zone:<n>"),
whose failure leaves the filters, in place by then, as they are: the connections of ports that lost something, or
are new (an address or zone of theirs may have been another's), are judged again, and a gone network's zone is
emptied before its number is given to another network (conntrack.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from cloudnet import metrics
from cloudnet.dataplane import security
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux import conntrack, fw_check, fw_render, fw_script, names, nft
from cloudnet.dataplane.linux.fw_numbers import Numbers
from cloudnet.dataplane.linux.fw_policy import PolicyReader
from cloudnet.dataplane.linux.fw_render import Part
from cloudnet.dataplane.linux.nft_state import TableState
from cloudnet.dataplane.steps import StepFailed, Steps

log = logging.getLogger(__name__)
BR_NETFILTER = ("net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables")
ZONE_STEP = "conntrack-zone:"  # + the zone number: judging the zone's connections again
# Of the step limit: a zone's judging stops (failed, tried again later) in time to cut what it found (conntrack.py
# takes up to 1 s more) before its step would time out, which would end the pass.
ZONE_BUDGET = 0.7


class FirewallUnavailable(RuntimeError):
    pass


def _ident(object_id: str) -> str:
    """An object's id as nft names take it (letters and digits)."""
    try:
        return uuid.UUID(object_id).hex
    except ValueError:
        return "x" + hashlib.sha256(object_id.encode()).hexdigest()[:40]


def _inputs(state: dict[str, Any], candidates: dict[str, Any]) -> int:
    """A hash of what the firewall's pass depends on (its step's fingerprint): what of each port and group the
    policy is made of, the remote groups' members, the networks."""
    groups = state.get("security_groups") or {}
    return hash((tuple((pid, security.port_fingerprint(p)) for pid, p in candidates.items()),
                 tuple(security.group_fingerprint(g) for g in groups.values()),
                 tuple((g, tuple(map(str, m))) for g, m in (state.get("remote_groups") or {}).items()),
                 tuple(state["networks"]), tuple(sorted(names.vm_port_devices(state)))))  # fmt: skip


def _refuse(reason: str | None) -> None:
    if reason is not None:
        raise nft.NftError(reason)


class NftFirewall:
    """security.Firewall for the Linux dataplane (nftables in the host namespace `namespace`). Its steps run on the
    step worker, which lives in that namespace."""

    def __init__(self, namespace: str, include_pool: bool = False) -> None:
        self.ns = namespace
        self.include_pool = include_pool  # ready pool ports have devices (parked): they are filtered too
        self._reader = PolicyReader()
        self._rendered: dict[str, tuple[Any, Part]] = {}  # step key -> (inputs, its part)
        self._applied: dict[str, Part] | None = None  # what the kernel holds; None: unknown (rewrite whole)
        self._expected: tuple[dict[str, Part], dict[str, TableState]] | None = None  # (_applied, as nft lists it)
        self._policy: security.HostPolicy | None = None  # the policy last applied (None: none since start)
        self._pending: set[str] = set()  # ports whose connections are still to be judged again
        self._freed: set[int] = set()  # zones of gone networks, to be emptied (held until then)
        self._numbers = {kind: Numbers() for kind in ("port", "group", "remote", "pair", "zone")}
        self._zones_read = False
        self._generation = -1  # the namespace's ruleset generation right after our last transaction
        self.drift: list[str] = []  # what the last pass found changed behind its back (and rewrote)
        self._keys: list[str] = ["firewall"]
        self._zones_due: list[tuple[int, frozenset[str] | None]] = []  # (zone, its ports to judge; None: empty it)

    def enforced(self, port_id: str) -> bool:
        applied = self._applied or {}
        return self._policy is not None and port_id in self._policy.ports and f"firewall:{port_id}" in applied

    def step_keys(self) -> list[str]:
        return [*self._keys, *(f"{ZONE_STEP}{zone}" for zone, _ports in self._zones_due)]

    def forget(self) -> None:
        self._applied, self._policy, self._zones_read, self._expected = None, None, False, None
        self._numbers["zone"] = Numbers()
        self._freed.clear()  # (a new namespace has no connections; every port of the next pass is judged again)

    # -- a pass -------------------------------------------------------------------------------

    def apply(self, state: dict[str, Any], steps: Steps, full: bool, check: bool = False) -> dict[str, str]:
        candidates = security.candidate_ports(state, self.include_pool)
        try:
            failures = steps.run("firewall", lambda: self._apply(state, steps, full, check, candidates),
                                 _inputs(state, candidates))  # fmt: skip
        except StepFailed as exc:
            self._applied = None  # whatever happened, the next attempt writes the tables whole
            return {pid: f"firewall: {exc.reason}" for pid in candidates}
        metrics.FIREWALL_ELEMENTS.set(sum(len(part.elements) for part in (self._applied or {}).values()))
        budget = steps.timeout * ZONE_BUDGET
        for zone, ports in self._zones_due:
            with contextlib.suppress(StepFailed):  # (reported, and tried again; the filters are in place)
                steps.run(f"{ZONE_STEP}{zone}", lambda z=zone, p=ports: self._judge(z, p, budget), ports)
        return failures

    def _apply(self, state: dict[str, Any], steps: Steps, full: bool, check: bool, candidates: dict[str, Any]
               ) -> dict[str, str]:  # fmt: skip
        failures: dict[str, str] = {}
        self.drift = []
        policy = self._reader.read(state, steps, candidates, failures)
        if policy.ports and (full or self._applied is None):
            self._check_br_netfilter()
        if self._applied is None and not self._zones_read:
            self._read_zones()
        bad: dict[str, str] = {}
        desired = self._render(state, policy, bad)
        # Every object of the state keeps its failure (one that failed has no part), until it is gone from it.
        objects = {f"{kind}:{p}" for p in candidates for kind in ("firewall", "metadata-identity")}
        objects |= {f"security-group:{g}" for p in policy.ports.values() for g in p.groups}
        objects |= {f"remote-{r}" for g in policy.groups.values() for r in g.remotes()}
        self._keys = ["firewall", *sorted(desired.keys() | objects)]
        self._reader.keep_only(objects)
        bad.update(self._recheck(desired, steps))
        bad.update(self._converge(self._without(desired, bad), steps, full, check))
        for key, reason in bad.items():
            self._blame(key, reason, policy, failures)
        self._judge_later(policy)
        return failures

    def _render(self, state: dict[str, Any], policy: security.HostPolicy, bad: dict[str, str]) -> dict[str, Part]:
        """Every object's part (re-rendered only when its inputs changed); one that cannot be rendered keeps what
        it had and goes into `bad`."""
        numbers = self._numbers
        numbers["port"].keep(policy.ports)
        numbers["group"].keep(policy.groups)
        numbers["remote"].keep(policy.remotes)
        numbers["pair"].keep({(gid, r.remote, r.direction, r.version)
                              for gid, g in policy.groups.items() for r in g.rules if r.remote})  # fmt: skip
        nets = set(state["networks"]) | {p.network_id for p in policy.ports.values()} | set(policy.unfiltered.values())
        vms = names.vm_port_devices(state)  # (a VM's NIC is its tap, a container's the host end of its veth)
        self._freed |= numbers["zone"].keep({names.bridge(n) for n in nets}, hold=True)  # (emptied before reuse)
        desired: dict[str, Part] = {}

        def part(key: str, inputs: Any, make: Callable[[], Part]) -> None:
            cached = self._rendered.get(key)
            if cached is not None and cached[0] == inputs:
                desired[key] = cached[1]
                return
            try:
                desired[key] = make()
            except Exception as exc:  # (a bug, or data the parsers let through): this object only
                log.exception("firewall: %s cannot be rendered", key)
                bad[key] = f"cannot be rendered: {exc}"
                if self._applied is not None and key in self._applied:
                    desired[key] = self._applied[key]
                return
            self._rendered[key] = (inputs, desired[key])

        for bridge, zone in numbers["zone"].of.items():
            part(f"firewall-zone:{bridge}", zone, lambda b=bridge, z=zone: fw_render.zone_part(str(b), z))
        for pid, addresses in policy.identities.items():
            dev = names.port_device(pid, vms)
            part(f"metadata-identity:{pid}", (addresses, dev),
                 lambda d=dev, a=addresses: fw_render.identity_part(d, a))  # fmt: skip
        for pid in policy.unfiltered:
            dev = names.port_device(pid, vms)
            part(f"firewall:{pid}", dev, lambda d=dev: fw_render.unfiltered_part(d))
        for pid, port in policy.ports.items():
            stateful = security.port_stateful(port, policy.groups)
            gnums = tuple(numbers["group"].of.get(g, 0) for g in port.groups)
            inputs = (port, numbers["port"].of[pid], stateful, gnums, names.port_device(pid, vms))
            part(f"firewall:{pid}", inputs, lambda i=inputs: self._port_part(*i))
        for gid, group in policy.groups.items():
            refs = tuple(sorted(self._refs(group).items()))
            part(f"security-group:{gid}", (group, numbers["group"].of[gid], refs), lambda g=group: self._group_part(g))
        for name, members in policy.remotes.items():
            number = numbers["remote"].of[name]
            part(f"remote-{name}", (members, number), lambda m=members, n=number: fw_render.remote_part(n, m))
        self._rendered = {k: v for k, v in self._rendered.items() if k in desired}
        return desired

    @staticmethod
    def _port_part(port: security.PortPolicy, number: int, stateful: bool, groups: tuple[int, ...], device: str
                   ) -> Part:  # fmt: skip
        return fw_render.port_part(port, device, _ident(port.id), number, stateful, list(groups))

    def _refs(self, group: security.Group) -> dict[tuple[str, str, int], tuple[int, int]]:
        """The group's (remote set, direction, IP version) pairs: their remote set's and their own numbers."""
        remote, pair = self._numbers["remote"].of, self._numbers["pair"].of
        return {(r.remote, r.direction, r.version): (remote[r.remote], pair[(group.id, r.remote, r.direction,
                r.version)]) for r in group.rules if r.remote}  # fmt: skip

    def _group_part(self, group: security.Group) -> Part:
        return fw_render.group_part(group, _ident(group.id), self._numbers["group"].of[group.id], self._refs(group))

    # -- the kernel ---------------------------------------------------------------------------

    def _recheck(self, desired: dict[str, Part], steps: Steps) -> dict[str, str]:
        """Parts the kernel refused before, unchanged: checked again (fw_check.refused) once their backoff is over."""
        held = {k: p for k, p in desired.items() if (f := steps.failed(k)) is not None and f.fingerprint == p}
        due = {k: p for k, p in held.items() if steps.clock() >= steps.failures[k].retry_at}
        return self._record(steps, held, fw_check.refused(due) if due else {})

    @staticmethod
    def _record(steps: Steps, parts: dict[str, Part], refused: dict[str, str]) -> dict[str, str]:
        """Each part's check as its object's step (refused: failed, with the kernel's reason; else it recovers);
        returns the parts that failed (or still back off)."""
        bad = {}
        for key, part in parts.items():
            try:
                steps.run(key, lambda r=refused.get(key): _refuse(r), part)
            except StepFailed as exc:
                bad[key] = exc.reason
        return bad

    def _converge(self, target: dict[str, Part], steps: Steps, full: bool, check: bool) -> dict[str, str]:
        """Make the kernel hold `target`; returns the parts it refused (left out: what they had stays)."""
        if self._applied is not None and full:
            self._verify(check)
        if self._applied is not None:
            script = fw_script.diff(self._applied, target)
            if not script:
                return {}
            try:
                self._commit(script, target)
                return {}
            except nft.NftError as exc:
                log.warning("firewall change refused (%s); writing the tables whole", exc)
        try:
            self._commit(fw_script.whole(target), target)
            return {}
        except nft.NftError as exc:
            whole_error = exc
        refused = fw_check.refused(target)  # (raises when the tables alone are refused: so is the firewall)
        if not refused:
            raise whole_error
        bad = self._record(steps, {k: target[k] for k in refused}, refused)
        kept_parts = self._without(target, bad)
        self._commit(fw_script.whole(kept_parts), kept_parts)
        return bad

    def _without(self, parts: dict[str, Part], bad: Mapping[str, str]) -> dict[str, Part]:
        """`parts` but for the `bad` ones, which keep what they had in the kernel (if anything)."""
        if not bad:
            return parts
        out = {k: p for k, p in parts.items() if k not in bad}
        out.update({k: self._applied[k] for k in bad if self._applied is not None and k in self._applied})
        return out

    def _commit(self, script: str, parts: dict[str, Part]) -> None:
        _before, self._generation = nft.commit(self.ns, script)
        self._applied = parts

    def _verify(self, check: bool) -> None:
        """Does the kernel still hold both tables as applied? If not, what differs is reported and they are written
        whole. Nothing committed in the namespace since our last transaction (its generation) proves that nothing
        changed: only a check looks anyway."""
        generation = nft.generation(self.ns)
        if generation == self._generation and not check:
            return
        applied = self._applied or {}
        try:
            if self._expected is None or self._expected[0] is not applied:
                self._expected = (applied, fw_check.expected(applied))
            found = fw_check.differences(self.ns, self._expected[1])
        except (nft.NftError, OSError) as exc:  # (cannot compare: written whole, to be sure)
            log.warning("firewall tables not compared (%s): written whole", exc)
            self._applied = None
            return
        if found:
            self.drift += found
            self._applied = None
        else:
            self._generation = generation  # (someone committed something else: as good as ours)

    def _read_zones(self) -> None:
        """Conntrack zones given before a restart: kept, so that established connections stay established."""
        try:
            for bridge, zone in fw_script.listed(self.ns, "map inet", "zones"):
                self._numbers["zone"].seed(bridge, int(zone))
        except nft.NftError:
            pass  # no table yet
        self._zones_read = True

    @staticmethod
    def _check_br_netfilter() -> None:
        for key in BR_NETFILTER:  # (the worker's namespace: the host namespace)
            try:
                with open(f"/proc/sys/{key}") as f:
                    value = f.read().strip()
            except FileNotFoundError:
                raise FirewallUnavailable("br_netfilter is not loaded (modprobe br_netfilter)") from None
            if value != "1":
                netns.write_sysctl(None, key, "1")

    def _blame(self, key: str, reason: str, policy: security.HostPolicy, failures: dict[str, str]) -> None:
        kind, _, ident = key.partition(":")
        for pid, port in policy.ports.items():
            if kind == "security-group" and ident in port.groups:
                failures.setdefault(pid, f"security group {ident}: {reason}")
            elif kind == "firewall-zone" and names.bridge(port.network_id) == ident:
                failures.setdefault(pid, f"network {port.network_id}: {reason}")
        if kind in ("firewall", "metadata-identity"):
            failures.setdefault(ident, reason)

    # -- connections ----------------------------------------------------------------------------

    def _judge_later(self, policy: security.HostPolicy) -> None:
        """Note whose connections to judge again: ports that lost something, and new ones (all of them after a
        start: who knows), by zone; and the zones to empty."""
        self._pending |= set(policy.ports) if self._policy is None else security.losers(self._policy, policy)
        self._pending &= set(policy.ports)
        self._policy = policy
        by_zone: dict[int, set[str]] = {}
        for pid in self._pending:
            by_zone.setdefault(self._numbers["zone"].of[names.bridge(policy.ports[pid].network_id)], set()).add(pid)
        self._zones_due = [(z, None) for z in sorted(self._freed)]
        self._zones_due += [(z, frozenset(ports)) for z, ports in sorted(by_zone.items())]

    def _judge(self, zone: int, ports: frozenset[str] | None, budget: float) -> None:
        """A step: the zone's connections judged again (ports None: all of them cut, and the zone given again)."""
        assert self._policy is not None
        conntrack.sweep(self._policy, ports, zone, time.monotonic() + budget)
        if ports is None:
            self._freed.discard(zone)
            self._numbers["zone"].release(zone)
        else:
            self._pending -= ports
