"""A host of the Linux dataplane driven by desired-state documents built in the test (the security-group contract's
shape), with real namespaces, veths and traffic: instances on a dual-stack network with a metadata namespace."""

from __future__ import annotations

import subprocess
import uuid
from dataclasses import dataclass, field
from typing import Any

from cloudnet.dataplane.base import PortReport
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux import names
from cloudnet.dataplane.linux.driver import LinuxDataplane

Rule = dict[str, Any]


def rule(direction: str, ethertype: str = "IPv4", protocol: int | None = None, lo: int | None = None,
         hi: int | None = None, prefix: str | None = None, group: str | None = None) -> Rule:  # fmt: skip
    """A rule as the control plane hands it over (protocol normalised to its number)."""
    return {"id": str(uuid.uuid4()), "direction": direction, "ethertype": ethertype, "protocol": protocol,
            "port_range_min": lo, "port_range_max": hi if hi is not None or protocol in (1, 58) else lo,
            "remote_ip_prefix": prefix, "remote_group_id": group, "remote_address_group_id": None}  # fmt: skip


@dataclass
class Net:
    id: str
    v4: str  # the /24 prefix, e.g. "10.81.0."
    v6: str  # the /64 prefix, e.g. "fd00:81::"
    subnets: tuple[str, str] = field(default_factory=lambda: (str(uuid.uuid4()), str(uuid.uuid4())))


@dataclass
class Port:
    id: str
    net: Net
    mac: str
    ip: str
    ip6: str
    ns: str
    instance: str
    groups: list[str] = field(default_factory=list)
    security: bool = True
    pairs: list[dict[str, str]] = field(default_factory=list)

    @property
    def tap(self) -> str:
        return names.tap(self.id)

    def as_state(self) -> dict[str, Any]:
        return {"id": self.id, "network_id": self.net.id, "mac_address": self.mac, "admin_state_up": True,
                "binding:vnic_type": "normal", "device_owner": "compute:test",
                "fixed_ips": [{"subnet_id": self.net.subnets[0], "ip_address": self.ip, "prefixlen": 24},
                              {"subnet_id": self.net.subnets[1], "ip_address": self.ip6, "prefixlen": 64}],
                "port_security_enabled": self.security, "security_groups": sorted(self.groups) if self.security else [],
                "allowed_address_pairs": self.pairs}  # fmt: skip


class Rig:
    def __init__(self, park: bool = False) -> None:
        self.suffix = uuid.uuid4().hex[:6]
        self.host = f"sg-{self.suffix}"
        self.dp = LinuxDataplane(self.host, park=park)
        self.nets: list[Net] = []
        self.ports: dict[str, Port] = {}
        self.pool: dict[str, Port] = {}
        self.groups: dict[str, dict[str, Any]] = {}
        self.remote: dict[str, list[str]] = {}
        self.namespaces: list[str] = []
        self.revision = 0

    @property
    def host_ns(self) -> str:
        return names.host_ns(self.host)

    def network(self, n: int) -> Net:
        net = Net(str(uuid.uuid4()), f"10.{n}.0.", f"fd00:{n}::")
        self.nets.append(net)
        return net

    def port(self, net: Net, label: str, host_part: int, groups: list[str] | None = None) -> Port:
        ns = f"cntest-{label}-{self.suffix}"
        netns.ensure(ns)
        self.namespaces.append(ns)
        mac = f"fa:16:3e:{host_part:02x}:{len(self.nets):02x}:{len(self.ports):02x}"
        p = Port(str(uuid.uuid4()), net, mac, f"{net.v4}{host_part}", f"{net.v6}{host_part:x}", ns, str(uuid.uuid4()),
                 list(groups or []))  # fmt: skip
        self.ports[p.id] = p
        return p

    def group(self, name: str, *rules: Rule, stateful: bool = True) -> str:
        self.groups[name] = {"id": name, "stateful": stateful, "rules": list(rules)}
        return name

    def members(self, group: str, *ports: Port) -> None:
        self.remote[group] = sorted(f"{p.ip}/32" for p in ports) + sorted(f"{p.ip6}/128" for p in ports)

    def state(self) -> dict[str, Any]:
        self.revision += 1
        networks = {}
        subnets = {}
        for net in self.nets:
            meta_ip = {"subnet_id": net.subnets[0], "ip_address": f"{net.v4}2", "prefixlen": 24}
            # ACTIVE, as the server holds it once realised: the driver then has nothing to report for it.
            meta = {"id": str(uuid.uuid5(uuid.NAMESPACE_URL, net.id)), "network_id": net.id,
                    "mac_address": f"fa:16:3e:ee:00:{self.nets.index(net):02x}", "admin_state_up": True,
                    "fixed_ips": [meta_ip], "status": "ACTIVE"}  # fmt: skip
            networks[net.id] = {"id": net.id, "name": "n", "mtu": 1500, "admin_state_up": True,
                                "router_external": False, "network_type": "vxlan", "physical_network": None,
                                "segmentation_id": None, "metadata_port": meta}  # fmt: skip
            for sid, cidr, v in ((net.subnets[0], f"{net.v4}0/24", 4), (net.subnets[1], f"{net.v6}/64", 6)):
                subnets[sid] = {"id": sid, "network_id": net.id, "cidr": cidr, "ip_version": v, "gateway_ip": None,
                                "host_routes": [], "dns_nameservers": []}  # fmt: skip
        wanted = {g for p in [*self.ports.values(), *self.pool.values()] if p.security for g in p.groups}
        named = {r["remote_group_id"] for g in wanted if g in self.groups for r in self.groups[g]["rules"]}
        return {
            "revision": self.revision, "host": self.host,
            "instances": [{"id": p.instance, "name": p.instance, "netns": p.ns, "ports": [p.id]}
                          for p in self.ports.values()],
            "ports": {p.id: p.as_state() for p in self.ports.values()},
            "pool_ports": {p.id: p.as_state() for p in self.pool.values()},
            "networks": networks, "subnets": subnets, "routers": [], "sriov": [],
            "security_groups": {g: self.groups[g] for g in wanted if g in self.groups},
            "remote_groups": {g: self.remote.get(g, []) for g in named if g},
        }  # fmt: skip

    def apply(self, full: bool = False, check: bool = False) -> dict[str, PortReport]:
        return {r.port_id: r for r in self.dp.apply(self.state(), full=full, check=check)}

    def converge(self, full: bool = False, check: bool = False) -> dict[str, PortReport]:
        reports = self.apply(full, check)
        while self.dp.unfinished():  # as the agent does: the passes that park pool devices after the instances'
            reports.update(self.apply())
        bad = {k: r for k, r in reports.items() if r.status != "ACTIVE"}
        assert not bad, bad
        return reports

    def nft(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ip", "netns", "exec", self.host_ns, "nft", *args], capture_output=True, text=True)

    def close(self) -> None:
        self.dp.teardown()
        for ns in self.namespaces:
            netns.remove(ns)
