"""The Linux firewall: security groups and port security of this host's instance ports, in the host namespace.

The tables and why they look as they do are in fw_render.py. Here: from the desired state to the kernel, one object
at a time and one transaction per change. Every object (a port, a group, a remote set) is parsed and rendered as a
step of its own (Steps.run with its key and fingerprint): one that fails keeps what it had in the kernel (or, new,
has nothing there, so its device passes nothing) and is reported, while the others converge. What was applied is
kept as one Part per object; a pass diffs the wanted parts against it and sends only the difference, as one atomic
transaction. A transaction the kernel refuses (it no longer holds what was applied: a table flushed by hand) is
followed by a rewrite of both tables whole, in one transaction; should that fail too, each part is checked alone
(a dry run) and the ones the kernel refuses are left out, so a pass can never fail on what is already there.
A full pass checks that the kernel still has what was applied (the port maps) and br_netfilter still calls it.

After a change that takes something away from a port, the port's connections are judged again (conntrack.py).
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import os
import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, TypeVar

from cloudnet.dataplane import security
from cloudnet.dataplane.linux import conntrack, fw_render, fw_script, names, netns, nft
from cloudnet.dataplane.linux.fw_render import Part
from cloudnet.dataplane.steps import StepFailed, Steps

log = logging.getLogger(__name__)
T = TypeVar("T")
BR_NETFILTER = ("net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables")
# Part keys ("port:<id>", "group:<id>", "remote:group:<id>", "zone:<bridge>") -> their objects' step keys.
STEP_KEYS = {"port": "firewall:", "metadata": "metadata-identity:", "group": "security-group:", "remote": "remote-",
             "zone": "firewall-zone:"}  # fmt: skip


class FirewallUnavailable(RuntimeError):
    pass


class Numbers:
    """Small numbers for objects (marks, zones): stable while an object lives, the lowest free one for a new one."""

    def __init__(self) -> None:
        self.of: dict[Hashable, int] = {}
        self._free: list[int] = []
        self._next = 1

    def seed(self, key: Hashable, number: int) -> None:
        """An object found with this number (in the kernel, after a restart)."""
        self.of[key] = number
        self._next = max(self._next, number + 1)

    def keep(self, keys: Iterable[Hashable]) -> None:
        """Number exactly `keys`: objects gone free their numbers (for new objects of this same pass)."""
        wanted = set(keys)
        for key in [k for k in self.of if k not in wanted]:
            heapq.heappush(self._free, self.of.pop(key))
        used = set(self.of.values())
        self._free = [n for n in self._free if n not in used]
        heapq.heapify(self._free)
        for key in sorted(wanted - self.of.keys(), key=str):
            if self._free:
                self.of[key] = heapq.heappop(self._free)
            else:
                self.of[key], self._next = self._next, self._next + 1


NOTHING = object()  # (no earlier value)


class _Kept(Exception):
    """An object's step failed: `value` is what was parsed for it before (NOTHING: it never was)."""

    def __init__(self, reason: str, value: Any) -> None:
        super().__init__(reason)
        self.reason, self.value = reason, value


def _ident(object_id: str) -> str:
    """An object's id as nft names take it (letters and digits)."""
    try:
        return uuid.UUID(object_id).hex
    except ValueError:
        return "x" + hashlib.sha256(object_id.encode()).hexdigest()[:40]


def _step_key(key: str) -> str:
    kind, _, ident = key.partition(":")
    return STEP_KEYS[kind] + ident


class NftFirewall:
    """security.Firewall for the Linux dataplane (nftables in the host namespace `namespace`)."""

    def __init__(self, namespace: str, include_pool: bool = False) -> None:
        self.ns = namespace
        self.include_pool = include_pool  # ready pool ports have devices (parked): they are filtered too
        self._parsed: dict[str, tuple[Any, Any]] = {}  # step key -> (fingerprint, parsed object)
        self._rendered: dict[str, tuple[Any, Part]] = {}  # part key -> (inputs, part)
        self._applied: dict[str, Part] | None = None  # what the kernel holds; None: unknown (rewrite whole)
        self._policy: security.HostPolicy | None = None  # the policy last applied (None: none since start)
        self._pending: set[str] = set()  # ports whose connections are still to be judged again
        self._numbers = {kind: Numbers() for kind in ("port", "group", "remote", "pair", "zone")}
        self._zones_read = False
        self._generation = -1  # the namespace's ruleset generation right after our last transaction
        self.drift: list[str] = []  # what the last pass found changed behind its back (and rewrote)
        self._keys: list[str] = ["firewall"]

    def enforced(self, port_id: str) -> bool:
        applied = self._applied or {}
        return self._policy is not None and port_id in self._policy.ports and f"port:{port_id}" in applied

    def step_keys(self) -> list[str]:
        return list(self._keys)

    def forget(self) -> None:
        self._applied, self._policy, self._zones_read = None, None, False
        self._numbers["zone"] = Numbers()

    # -- a pass -------------------------------------------------------------------------------

    def apply(self, state: dict[str, Any], steps: Steps, full: bool) -> dict[str, str]:
        candidates = security.candidate_ports(state, self.include_pool)
        try:
            return steps.run("firewall", lambda: self._apply(state, steps, full, candidates), state.get("revision"))
        except StepFailed as exc:
            self._applied = None  # whatever happened, the next attempt writes the tables whole
            return {pid: f"firewall: {exc.reason}" for pid in candidates}

    def _apply(self, state: dict[str, Any], steps: Steps, full: bool, candidates: dict[str, Any]) -> dict[str, str]:
        failures: dict[str, str] = {}
        self.drift = []
        policy = self._policy_of(state, steps, candidates, failures)
        if policy.ports and (full or self._applied is None):
            self._check_br_netfilter()
        if self._applied is None and not self._zones_read:
            self._read_zones()
        bad: dict[str, str] = {}
        desired = self._render(state, policy, bad)
        # Every object of the state keeps its failure (one that failed has no part), until it is gone from it.
        objects = {f"port:{p}" for p in candidates} | {f"group:{g}" for p in policy.ports.values() for g in p.groups}
        objects |= {f"remote:{r}" for g in policy.groups.values() for r in g.remotes()}
        self._keys = ["firewall", *sorted({_step_key(k) for k in desired.keys() | objects})]
        bad.update(self._recheck(desired, steps))
        bad.update(self._converge(self._without(desired, bad), steps, full))
        for key, reason in bad.items():
            self._blame(key, reason, policy, failures)
        self._sweep(policy)
        return failures

    def _parse(self, steps: Steps, key: str, fingerprint: Any, fn: Callable[[], T]) -> T:
        cached = self._parsed.get(key)
        if cached is not None and cached[0] == fingerprint:
            return cached[1]  # type: ignore[no-any-return]
        try:
            value = steps.run(key, fn, fingerprint)
        except StepFailed as exc:
            raise _Kept(exc.reason, NOTHING if cached is None else cached[1]) from None
        self._parsed[key] = (fingerprint, value)
        return value

    def _policy_of(self, state: dict[str, Any], steps: Steps, candidates: dict[str, Any], failures: dict[str, str]
                   ) -> security.HostPolicy:  # fmt: skip
        ports: dict[str, security.PortPolicy] = {}
        unfiltered: dict[str, str] = {}
        identities = self._identities(steps, candidates, failures)
        for pid, raw in candidates.items():
            try:
                parsed = self._parse(steps, f"firewall:{pid}", security.port_fingerprint(raw),
                                     lambda r=raw: security.parse_port(r))  # fmt: skip
            except _Kept as kept:
                failures[pid] = kept.reason
                if kept.value is NOTHING:
                    continue  # nothing to keep: not in the tables, its device passes nothing
                parsed = kept.value
            if parsed is None:
                unfiltered[pid] = raw["network_id"]
            else:
                ports[pid] = parsed
        groups: dict[str, security.Group] = {}
        raw_groups = state.get("security_groups") or {}
        for gid in sorted({g for p in ports.values() for g in p.groups}):
            raw = raw_groups.get(gid)
            if raw is None:  # not described: none of its rules can be enforced, so none is
                groups[gid] = security.Group(gid, True, ())
                continue
            try:
                groups[gid] = self._parse(steps, f"security-group:{gid}", security.group_fingerprint(raw),
                                          lambda r=raw: security.parse_group(r))  # fmt: skip
            except _Kept as kept:
                if kept.value is not NOTHING:
                    groups[gid] = kept.value
                for pid, port in ports.items():
                    if gid in port.groups:
                        failures.setdefault(pid, f"security group {gid}: {kept.reason}")
        remotes: dict[str, tuple[security.IPNetwork, ...]] = {}
        for name in sorted({r for g in groups.values() for r in g.remotes()}):
            cidrs = security.remote_cidrs(state, name) or []
            try:
                remotes[name] = self._parse(steps, f"remote-{name}", tuple(map(str, cidrs)),
                                            lambda c=cidrs: security.parse_remote(c))  # fmt: skip
            except _Kept as kept:
                remotes[name] = () if kept.value is NOTHING else kept.value
        return security.HostPolicy(ports, unfiltered, groups, remotes, identities)

    def _identities(self, steps: Steps, candidates: dict[str, Any], failures: dict[str, str]
                    ) -> dict[str, tuple[security.IPAddress, ...]]:  # fmt: skip
        """Every port's metadata identity; one that cannot be parsed keeps what it had (or has none: its guest
        reaches no metadata)."""
        out = {}
        for pid, raw in candidates.items():
            fingerprint = (raw.get("mac_address"), tuple(f.get("ip_address") for f in raw.get("fixed_ips", [])))
            try:
                out[pid] = self._parse(steps, f"metadata-identity:{pid}", fingerprint,
                                       lambda r=raw: security.metadata_identity(r))  # fmt: skip
            except _Kept as kept:
                failures[pid] = kept.reason
                if kept.value is not NOTHING:
                    out[pid] = kept.value
        return out

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
        numbers["zone"].keep({names.bridge(n) for n in nets})
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
            part(f"zone:{bridge}", zone, lambda b=bridge, z=zone: fw_render.zone_part(str(b), z))
        for pid, addresses in policy.identities.items():
            part(f"metadata:{pid}", addresses, lambda p=pid, a=addresses: fw_render.identity_part(names.tap(p), a))
        for pid in policy.unfiltered:
            part(f"port:{pid}", None, lambda p=pid: fw_render.unfiltered_part(names.tap(p)))
        for pid, port in policy.ports.items():
            stateful = security.port_stateful(port, policy.groups)
            gnums = tuple(numbers["group"].of.get(g, 0) for g in port.groups)
            inputs = (port, numbers["port"].of[pid], stateful, gnums)
            part(f"port:{pid}", inputs, lambda p=port, i=inputs: self._port_part(*i))
        for gid, group in policy.groups.items():
            refs = tuple(sorted(self._refs(group).items()))
            part(f"group:{gid}", (group, numbers["group"].of[gid], refs), lambda g=group: self._group_part(g))
        for name, members in policy.remotes.items():
            number = numbers["remote"].of[name]
            part(f"remote:{name}", (members, number), lambda m=members, n=number: fw_render.remote_part(n, m))
        self._rendered = {k: v for k, v in self._rendered.items() if k in desired}
        return desired

    @staticmethod
    def _port_part(port: security.PortPolicy, number: int, stateful: bool, groups: tuple[int, ...]) -> Part:
        return fw_render.port_part(port, names.tap(port.id), _ident(port.id), number, stateful, list(groups))

    def _refs(self, group: security.Group) -> dict[tuple[str, str, int], tuple[int, int]]:
        """The group's (remote set, direction, IP version) pairs: their remote set's and their own numbers."""
        remote, pair = self._numbers["remote"].of, self._numbers["pair"].of
        return {(r.remote, r.direction, r.version): (remote[r.remote], pair[(group.id, r.remote, r.direction,
                r.version)]) for r in group.rules if r.remote}  # fmt: skip

    def _group_part(self, group: security.Group) -> Part:
        return fw_render.group_part(group, _ident(group.id), self._numbers["group"].of[group.id], self._refs(group))

    # -- the kernel ---------------------------------------------------------------------------

    def _recheck(self, desired: dict[str, Part], steps: Steps) -> dict[str, str]:
        """Parts the kernel refused before, unchanged: checked alone (a dry run) once their backoff is over."""
        bad: dict[str, str] = {}
        if not steps.failures:
            return bad
        for key, part in desired.items():
            failure = steps.failed(_step_key(key))
            if failure is not None and failure.fingerprint == part:
                try:
                    steps.run(_step_key(key), lambda k=key, p=part: nft.check(self.ns, fw_script.whole({k: p})), part)
                except StepFailed as exc:
                    bad[key] = exc.reason
        return bad

    def _converge(self, target: dict[str, Part], steps: Steps, full: bool) -> dict[str, str]:
        """Make the kernel hold `target`; returns the parts it refused (left out: what they had stays)."""
        if self._applied is not None and full:
            self._verify()
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
        nft.check(self.ns, fw_script.whole({}))  # the tables alone (when they fail, so does the firewall)
        bad = {}
        for key, part in target.items():
            try:
                steps.run(_step_key(key), lambda k=key, p=part: nft.check(self.ns, fw_script.whole({k: p})), part)
            except StepFailed as failed:
                bad[key] = failed.reason
        if not bad:
            raise whole_error
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

    def _verify(self) -> None:
        """Does the kernel still hold the port maps as applied? If not, the tables are written whole. (Nothing
        committed in the namespace since our last transaction: nothing to look at.)"""
        if nft.generation(self.ns) == self._generation:
            return
        want = {e for p in (self._applied or {}).values() for e in p.elements if e[1] in ("ports", "unfiltered")}
        try:
            have = {("bridge", "ports", f'"{k}" : {v}') for k, v in fw_script.listed(self.ns, "map bridge", "ports")}
            have |= {("bridge", "unfiltered", f'"{k}"') for k in fw_script.listed(self.ns, "set bridge", "unfiltered")}
        except nft.NftError:
            have = set()
        if have != want:
            self.drift.append("nftables tables bridge/inet cloudnet not as applied: written whole")
            self._applied = None

    def _read_zones(self) -> None:
        """Conntrack zones given before a restart: kept, so that established connections stay established."""
        try:
            for bridge, zone in fw_script.listed(self.ns, "map inet", "zones"):
                self._numbers["zone"].seed(bridge, int(zone))
        except nft.NftError:
            pass  # no table yet
        self._zones_read = True

    def _check_br_netfilter(self) -> None:
        with netns.entered(self.ns):
            for key in BR_NETFILTER:
                try:
                    with open(f"/proc/sys/{key}") as f:
                        value = f.read().strip()
                except FileNotFoundError:
                    raise FirewallUnavailable("br_netfilter is not loaded (modprobe br_netfilter)") from None
                if value != "1":
                    fd = os.open(f"/proc/sys/{key}", os.O_WRONLY)
                    try:
                        os.write(fd, b"1")
                    finally:
                        os.close(fd)

    def _blame(self, key: str, reason: str, policy: security.HostPolicy, failures: dict[str, str]) -> None:
        kind, _, ident = key.partition(":")
        for pid, port in policy.ports.items():
            if (kind == "port" and pid == ident) or (kind == "group" and ident in port.groups):
                failures.setdefault(pid, reason if kind == "port" else f"security group {ident}: {reason}")
            elif kind == "zone" and names.bridge(port.network_id) == ident:
                failures.setdefault(pid, f"network {port.network_id}: {reason}")
        if (kind == "port" and ident in policy.unfiltered) or kind == "metadata":
            failures.setdefault(ident, reason)

    def _sweep(self, policy: security.HostPolicy) -> None:
        """Judge again the connections of ports that lost something (all of them after a start: who knows)."""
        self._pending |= set(policy.ports) if self._policy is None else security.losers(self._policy, policy)
        self._pending &= set(policy.ports)
        self._policy = policy
        if not self._pending:
            return
        zones = {p.network_id: self._numbers["zone"].of.get(names.bridge(p.network_id), 0)
                 for p in policy.ports.values()}  # fmt: skip
        try:
            with netns.entered(self.ns):
                conntrack.sweep(policy, self._pending, zones)
            self._pending.clear()
        except Exception as exc:  # retried on the next pass; the rules themselves are in place
            log.warning("judging connections again failed: %s", exc)
