"""The desired state as the firewall's security.HostPolicy, one object at a time.

Every object (a port, its metadata identity, a group, a remote set) is parsed as a step of its own, under the key
its part of the tables goes by too ("firewall:<port>", "metadata-identity:<port>", "security-group:<id>",
"remote-group:<id>"), and only when its fingerprint changed. One that fails keeps what was parsed for it before (or,
never parsed, is left out: its device passes nothing) and its ports are reported, while the others are read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from cloudnet.dataplane import security
from cloudnet.dataplane.steps import StepFailed, Steps

T = TypeVar("T")
NOTHING = object()  # (no earlier value)


class _Kept(Exception):
    """An object's step failed: `value` is what was parsed for it before (NOTHING: it never was)."""

    def __init__(self, reason: str, value: Any) -> None:
        super().__init__(reason)
        self.reason, self.value = reason, value


class PolicyReader:
    """Reads HostPolicies from desired states, keeping what it parsed for the next one."""

    def __init__(self) -> None:
        self._parsed: dict[str, tuple[Any, Any]] = {}  # step key -> (fingerprint, parsed object)

    def keep_only(self, keys: Iterable[str]) -> None:
        """Forget what was parsed for objects other than `keys` (gone from the state)."""
        alive = set(keys)
        self._parsed = {k: v for k, v in self._parsed.items() if k in alive}

    def parse(self, steps: Steps, key: str, fingerprint: Any, fn: Callable[[], T]) -> T:
        cached = self._parsed.get(key)
        if cached is not None and cached[0] == fingerprint:
            return cached[1]  # type: ignore[no-any-return]
        try:
            value = steps.run(key, fn, fingerprint)
        except StepFailed as exc:
            raise _Kept(exc.reason, NOTHING if cached is None else cached[1]) from None
        self._parsed[key] = (fingerprint, value)
        return value

    def read(self, state: dict[str, Any], steps: Steps, candidates: dict[str, Any], failures: dict[str, str]
                   ) -> security.HostPolicy:  # fmt: skip
        ports: dict[str, security.PortPolicy] = {}
        unfiltered: dict[str, str] = {}
        identities = self.identities(steps, candidates, failures)
        for pid, raw in candidates.items():
            try:
                parsed = self.parse(steps, f"firewall:{pid}", security.port_fingerprint(raw),
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
                groups[gid] = self.parse(steps, f"security-group:{gid}", security.group_fingerprint(raw),
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
                remotes[name] = self.parse(steps, f"remote-{name}", tuple(map(str, cidrs)),
                                            lambda c=cidrs: security.parse_remote(c))  # fmt: skip
            except _Kept as kept:
                remotes[name] = () if kept.value is NOTHING else kept.value
        return security.HostPolicy(ports, unfiltered, groups, remotes, identities)

    def identities(self, steps: Steps, candidates: dict[str, Any], failures: dict[str, str]
                    ) -> dict[str, tuple[security.IPAddress, ...]]:  # fmt: skip
        """Every port's metadata identity; one that cannot be parsed keeps what it had (or has none: its guest
        reaches no metadata)."""
        out = {}
        for pid, raw in candidates.items():
            fingerprint = (raw.get("mac_address"), tuple(f.get("ip_address") for f in raw.get("fixed_ips", [])))
            try:
                out[pid] = self.parse(steps, f"metadata-identity:{pid}", fingerprint,
                                       lambda r=raw: security.metadata_identity(r))  # fmt: skip
            except _Kept as kept:
                failures[pid] = kept.reason
                if kept.value is not NOTHING:
                    out[pid] = kept.value
        return out
