"""A real VM on the Linux dataplane (issue 28): the tiny guest (Debian's kernel, a busybox initramfs:
tests/support/guests.py) booted by QEMU on a VM instance's taps with the arguments `cloudnet instance qemu-args`
prints (wire/qemu_args.py), in the host namespace its port's binding details name. Its IPv4 address by DHCP from
the network's dnsmasq, its IPv6 address by SLAAC from the router's advertisements (the port's EUI-64), its own uuid
from http://169.254.169.254 through the network's metadata proxy, and a container on the same network reached."""

from __future__ import annotations

import ipaddress
import json
import re
import time
from typing import Any

from cloudnet.wire import qemu_args
from tests.support.cloud import Cloud
from tests.support.guest_init import FETCH_BEGIN, FETCH_END, LEASE_RE, SHELL_MARKER
from tests.support.guest_metadata import agent_with_proxy
from tests.support.server import RunningServer
from tests.support.vm_fixtures import StartVM

META = "http://169.254.169.254/openstack/latest/meta_data.json"


def attach(cloud: Cloud, inst: dict[str, Any]) -> tuple[list[str], str]:
    """What `cloudnet instance qemu-args` prints for the instance (the pure builder behind it), and the namespace
    its taps are in."""
    ports = {n["port_id"]: cloud.api.get(f"/ports/{n['port_id']}").json()["port"] for n in inst["nets"]}
    ns = qemu_args.netns_of(ports)
    assert ns is not None
    return qemu_args.qemu_args(inst, ports), ns


def test_a_real_vm_gets_its_addresses_its_metadata_and_reaches_a_container(
    cloud: Cloud, server: RunningServer, vms: StartVM
) -> None:
    with agent_with_proxy(cloud, server):
        net, v4 = cloud.network("realvm", "10.83.0.0/24", mtu=1400)
        slaac = {"ipv6_ra_mode": "slaac", "ipv6_address_mode": "slaac"}
        v6 = cloud.create("subnets", "subnet", {"network_id": net["id"], "cidr": "fd83::/64", "ip_version": 6,
                                                **slaac})  # fmt: skip
        router = cloud.create("routers", "router", {"name": "realvm-r"})
        for sub in (v4, v6):
            r = cloud.api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]})
            assert r.status_code == 200, r.text
        box = cloud.instance("realbox", [{"network": net["id"]}])
        inst = cloud.create("instances", "instance", {"name": "realvm", "host": cloud.host, "kind": "vm",
                                                      "nets": [{"network": net["id"]}]})  # fmt: skip
        inst = cloud.wait_active(inst["id"])
        args, ns = attach(cloud, inst)
        fixed = {f["subnet_id"]: f["ip_address"] for f in inst["nets"][0]["fixed_ips"]}
        guest = vms("realvm", args, netns=ns, cmdline=f"cloudnet.fetch={META}")
        lease = guest.expect(LEASE_RE, 120)
        assert lease["ip"] == fixed[v4["id"]] and lease["prefix"] == "24"
        guest.expect(re.escape(FETCH_BEGIN), 30)
        fetched = guest.expect(rf"(?s)(.*?){re.escape(FETCH_END)} (\d+)", 30)
        assert fetched[2] == "0", fetched[1]
        assert json.loads(fetched[1].strip().splitlines()[-1])["uuid"] == inst["id"]
        guest.expect(SHELL_MARKER, 30)
        # SLAAC from the router's advertisement: the port's own address (its EUI-64), so port security passes it.
        eui64 = ipaddress.ip_address(fixed[v6["id"]])
        deadline = time.monotonic() + 30
        while str(eui64) not in guest.run("ip -6 addr show dev eth0"):
            assert time.monotonic() < deadline, guest.run("ip -6 addr; ip -6 route")
            guest.run("sleep 1")
        assert "default via fe80:" in guest.run("ip -6 route")
        assert " 0% packet loss" in guest.run(f"ping -c 2 -W 5 {box['nets'][0]['fixed_ips'][0]['ip_address']}")
