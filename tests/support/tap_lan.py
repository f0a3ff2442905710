"""A LAN for VMs with no cloudnet in it: a namespace of the caller's own with a bridge, tap devices on it, and a
dnsmasq answering DHCP from static leases only (the machinery's own proof, and bench/vm_boot.py's network).

The taps live in the LAN's namespace (as cloudnet's live in its host namespace): QEMU opens a tap by name in its
own namespace, so VMs attached here are started with `netns=lan.netns` (tests/support/qemu.py).
"""

from __future__ import annotations

import contextlib
import ipaddress
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cloudnet.dataplane.kernel import netns as kernel_netns

BRIDGE = "br0"


def _ip(ns: str, *args: str) -> None:
    subprocess.run(["ip", "-n", ns, *args], check=True, capture_output=True, text=True)


def nic_args(tap: str, mac: str, netdev: str = "n0") -> list[str]:
    """QEMU arguments attaching a virtio NIC to an existing tap (what `cloudnet instance qemu-args` prints)."""
    return ["-netdev", f"tap,id={netdev},ifname={tap},script=no,downscript=no",
            "-device", f"virtio-net-pci,netdev={netdev},mac={mac}"]  # fmt: skip


@dataclass
class TapLan:
    netns: str
    cidr: ipaddress.IPv4Network
    taps: list[str] = field(default_factory=list)

    @property
    def gateway(self) -> str:
        """The bridge's own address (the first of the subnet): what a guest pings."""
        return str(self.cidr.network_address + 1)

    def address(self, index: int) -> str:
        return str(self.cidr.network_address + index)

    def tap(self) -> str:
        """A new tap device on the bridge, up (carrier comes when a VMM opens it)."""
        name = f"tap{len(self.taps)}"
        _ip(self.netns, "tuntap", "add", "dev", name, "mode", "tap")
        _ip(self.netns, "link", "set", name, "master", BRIDGE, "up")
        self.taps.append(name)
        return name


@contextlib.contextmanager
def tap_lan(cidr: str = "10.87.0.0/24") -> Iterator[TapLan]:
    """A namespace (unique name) with bridge `br0` holding the subnet's first address; removed with its taps."""
    name = f"cnt-lan-{uuid.uuid4().hex[:8]}"
    lan = TapLan(name, ipaddress.IPv4Network(cidr))
    kernel_netns.create(name)
    try:
        _ip(name, "link", "add", BRIDGE, "type", "bridge")
        _ip(name, "addr", "add", f"{lan.gateway}/{lan.cidr.prefixlen}", "dev", BRIDGE)
        _ip(name, "link", "set", BRIDGE, "up")
        yield lan
    finally:
        kernel_netns.remove(name)


@contextlib.contextmanager
def dhcp_server(lan: TapLan, leases: Mapping[str, str], workdir: Path, timeout: float = 10) -> Iterator[Path]:
    """dnsmasq on the LAN's bridge answering only `leases` (MAC -> address); yields its log file once it listens
    for DHCP, and is killed by pid at the end."""
    log = workdir / f"dnsmasq-{lan.netns}.log"
    command = ["ip", "netns", "exec", lan.netns, "dnsmasq", "--no-daemon", "--conf-file=/dev/null", "--no-hosts",
               "--no-resolv", "--port=0", f"--interface={BRIDGE}", "--bind-interfaces", "--except-interface=lo",
               f"--dhcp-range={lan.cidr.network_address},static,{lan.cidr.netmask},1h",
               f"--dhcp-leasefile={workdir / f'leases-{lan.netns}'}", "--log-dhcp", "--log-facility=-",
               *(f"--dhcp-host={mac},{ip}" for mac, ip in leases.items())]  # fmt: skip
    with open(log, "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not _listens_dhcp(lan.netns):  # readiness: its DHCP socket is bound
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dnsmasq did not start: {log.read_text()[-2000:]}")
            time.sleep(0.02)
        yield log
    finally:
        proc.kill()
        proc.wait()


def _listens_dhcp(ns: str) -> bool:
    done = subprocess.run(["ip", "netns", "exec", ns, "ss", "-Hlun", "sport = :67"], capture_output=True, text=True)
    return bool(done.stdout.strip())
