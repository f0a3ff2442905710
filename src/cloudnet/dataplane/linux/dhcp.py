"""DHCP on the Linux driver, as Neutron's DHCP agent does it: one dnsmasq per network with a DHCP-enabled subnet
(IPv4, or IPv6 in a DHCPv6 address mode), in the network's metadata namespace, answering on the metadata port's
interface with the metadata port's addresses (Neutron OVN's `network:distributed` port is its networks' DHCP server
address too: no `network:dhcp` port).

Static leases only, for this host's ports (containers' and VMs' alike): a new port's in a file of its own that
dnsmasq reads as it appears; any other change rewrites the hosts file (all of them) and the options file
atomically and sends SIGHUP (dnsmasq rereads both); only a changed command line (subnets, MTU) restarts it.
The processes are kept running by dnsmasq.py (adopted by a restarted agent, restarted by a watcher when they die).
A network whose dnsmasq cannot start fails alone (its step, `dhcp:<id>`)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from cloudnet.dataplane.base import DesiredState
from cloudnet.dataplane.linux import dhcp_conf, names
from cloudnet.dataplane.linux.dhcp_conf import Files
from cloudnet.dataplane.linux.dnsmasq import Dnsmasqs
from cloudnet.dataplane.linux.passes import Pass, fingerprint_of, needed_networks
from cloudnet.dataplane.steps import StepFailed

RUN_ROOT = Path("/run/cloudnet/dhcp")


class DhcpServers:
    """The DHCP job of the Linux driver: one step per network with a DHCP-served subnet."""

    def __init__(self, host: str, root: Path | None = None) -> None:
        self.host = host
        self.root = (root or RUN_ROOT) / names.host_ns(host)
        self.servers = Dnsmasqs(self.root, "network")
        self._applied: dict[str, str] = {}  # network id -> the fingerprint of what its last step applied
        self._rendered: dict[str, dict[tuple[Any, ...], str]] = {}  # network id -> its ports' lease lines

    def apply(self, run: Pass) -> None:
        served, ports = dhcp_conf.dhcp_subnets(run.state), dhcp_conf.ports_by_network(run.state)
        wanted = set()
        for net_id in run.networks:
            if net_id not in served:
                continue
            wanted.add(net_id)
            if net_id in run.broken:
                continue  # (its bridge failed: what it had stays)
            config = self._wanted(run.state, net_id, served[net_id], ports.get(net_id, []))
            fingerprint = fingerprint_of(config)
            if not run.full and self._applied.get(net_id) == fingerprint:
                continue  # (unchanged since it was applied; a server that died is the watcher's)
            with contextlib.suppress(StepFailed):
                run.steps.run(f"dhcp:{net_id}", lambda n=net_id, c=config: self._apply_network(n, c, run.full),
                              fingerprint)  # fmt: skip
                self._applied[net_id] = fingerprint
        self.servers.keep_only(wanted, run.full)
        self._applied = {k: v for k, v in self._applied.items() if k in wanted}
        self._rendered = {k: v for k, v in self._rendered.items() if k in wanted}

    def step_keys(self, state: DesiredState) -> list[str]:
        served = dhcp_conf.dhcp_subnets(state)
        return [f"dhcp:{n}" for n in needed_networks(state) if n in served]

    def forget(self) -> None:
        self._applied.clear()  # (what runs is read back from the pid files and /proc)

    def close(self) -> None:
        self.servers.close()

    def teardown(self) -> None:
        """Stop every server of this host and remove their files."""
        self.servers.teardown()

    def _wanted(self, state: DesiredState, net_id: str, subnets: list[dict[str, Any]], ports: list[dict[str, Any]]
                ) -> tuple[list[str], dict[str, str], str]:  # fmt: skip
        """The network's dnsmasq command line, hosts directory's files and options file."""
        network = state["networks"][net_id]
        iface = names.metadata_iface(network["metadata_port"]["id"])
        cmd = dhcp_conf.command(Files(self.servers.directory(net_id)), iface, network["mtu"], subnets)
        hosts = dhcp_conf.hosts_files(ports, dhcp_conf.leased(subnets), self._rendered.setdefault(net_id, {}))
        opts = dhcp_conf.opts_lines(state, net_id, subnets)
        return cmd, hosts, "".join(f"{line}\n" for line in opts)

    def _apply_network(self, net_id: str, config: tuple[list[str], dict[str, str], str], full: bool) -> None:
        cmd, hosts, opts = config
        files = Files(self.servers.directory(net_id))
        self.servers.ensure(net_id, names.metadata_ns(self.host, net_id), cmd, {files.opts.name: opts}, full,
                            leases=(files.hosts, files.new_hosts, hosts))  # fmt: skip
