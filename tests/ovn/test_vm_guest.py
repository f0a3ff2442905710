"""A real guest on an OVN VM tap (issue 28; root): the tiny guest (Debian's kernel, busybox) boots under QEMU with its
virtio NIC on the tap cloudnet made, opened by name in the namespace the port's `binding:vif_details` names, gets
its IPv4 address by OVN's DHCP and its IPv6 address from OVN's RA (SLAAC), and reads its own uuid at
169.254.169.254 through the chassis' metadata localport -- with the NIC's checksum offload off, as the details'
`datapath_type: netdev` asks. With the offload on, TCP works too: the userspace datapath completes no partial
checksums (a tap on br-int itself got the lease but no TCP answer), but the hybrid plug's qvb offloads none, so the
kernel completes them as the guest's frames leave its bridge (with qvb offloading them, TCP times out again)."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.ovn import vm_site as r
from tests.ovn.restart_rig import Rig
from tests.support.guest_init import LEASE_RE, SHELL_MARKER
from tests.support.qemu import VM
from tests.support.tap_lan import nic_args
from tests.support.vm_fixtures import StartVM

BOOT = 120  # seconds: ~6 s under TCG on an idle machine; the suite's other workers load both cores
NO_OFFLOAD = ",csum=off,guest_csum=off"
METADATA = "http://169.254.169.254/openstack/latest/meta_data.json"
# seconds: the guest's router solicitations are answered at once, but one sent before its port was bound is lost,
# and then the address waits for OVN's next periodic RA (desired_routers.RA_INTERVALS: 30-100 s apart).
SLAAC = 120


def _boot(
    vms: StartVM, vm_api: httpx.Client, vm_rig: Rig, vm_net: Any, label: str, offload: bool
) -> tuple[VM, Any, Any]:
    """A VM instance and the tiny guest on its tap, as its port's binding details say to attach it."""
    inst = r.launch(vm_api, vm_rig, label, [{"network": vm_net["id"]}])
    port = r.port_of(vm_api, inst["nets"][0]["port_id"])
    details = port["binding:vif_details"]
    args = nic_args(details["device"], port["mac_address"])
    if not offload:
        assert details["datapath_type"] == "netdev"  # (the rig's chassis: the userspace datapath)
        args[-1] += NO_OFFLOAD
    vm = vms(label, args, netns=details.get("netns"))
    lease = vm.expect(LEASE_RE, BOOT)
    assert (lease["dev"], lease["ip"], lease["prefix"]) == ("eth0", r.v4(port), "24")
    vm.expect(SHELL_MARKER, BOOT)
    return vm, inst, port


def _fetch(vm: VM, seconds: int) -> tuple[int, str]:
    """An HTTP GET of the metadata from the guest (busybox nc; its wget is not what is under test)."""
    request = "GET /openstack/latest/meta_data.json HTTP/1.0\\r\\nHost: 169.254.169.254\\r\\n\\r\\n"
    return vm.console.run_status(f"printf '{request}' | nc -w {seconds} 169.254.169.254 80", timeout=seconds + 30)


def test_the_tiny_guest_gets_its_addresses_from_ovn_and_reads_its_metadata(
    vms: StartVM, vm_rig: Rig, vm_api: httpx.Client, vm_net: Any
) -> None:
    vm, inst, port = _boot(vms, vm_api, vm_rig, vm_net, "ovn-guest", offload=False)
    status, answer = _fetch(vm, 10)
    assert status == 0 and "200 OK" in answer, answer
    body = json.loads(answer[answer.index("{") : answer.rindex("}") + 1])
    assert body["uuid"] == inst["id"] and body["name"] == "ovn-guest"
    # SLAAC from the router's RA (the subnet's ipv6_ra_mode slaac): the address the port was given.
    r.until(lambda: r.v6(port) in vm.run("ip -6 addr show dev eth0 scope global"), "the guest's SLAAC address", SLAAC)


def test_with_checksum_offload_on_the_guests_tcp_is_answered_too(
    vms: StartVM, vm_rig: Rig, vm_api: httpx.Client, vm_net: Any
) -> None:
    vm, inst, _port = _boot(vms, vm_api, vm_rig, vm_net, "ovn-offload", offload=True)
    status, answer = _fetch(vm, 10)
    assert status == 0 and "200 OK" in answer and inst["id"] in answer, answer
