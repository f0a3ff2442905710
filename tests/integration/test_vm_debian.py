"""The Debian 12 guest with cloud-init (issue 28), booted under QEMU from cloudnet's own metadata.

Each boot is ~90 s of a full core under plain emulation, so each test boots once and checks everything cloud-init
reports and applied from that one boot (`boot`), and the config drive and SmartOS checks share one VM (cloud-init
runs a second time in it: guest_results.THEN). The config-drive and SmartOS VM has the `nic` fixture: the
instance's NIC with its port's MAC wired to nothing (no DHCP, no route to 169.254.169.254: only the drive or the
serial port can answer); the OpenStack boot is on the instance's cloudnet tap (`cloudnet instance qemu-args`) with
the host's agent and metadata proxy running.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import httpx
import pytest

from cloudnet.agent.client import ApiClient
from cloudnet.agent.metadata.mdata_service import MdataService
from cloudnet.wire import qemu_args
from cloudnet.wire.mdata_serial import serial_qemu_args
from tests.support.cloud import Cloud
from tests.support.debian_guest import MEMORY_MB, DebianGuest, debian_guest
from tests.support.debian_vm import config_drive, make_vm, tap_attachment, unwired_nic
from tests.support.guest_metadata import agent_with_proxy
from tests.support.guest_results import THEN, WRITES, cloud_init_results
from tests.support.mdata_raw import mdata_services
from tests.support.qemu import Accelerator, qemu_version, running_vm, unique_name
from tests.support.server import RunningServer
from tests.support.vm_fixtures import ACCEL_PROPERTY

Json = dict[str, Any]


@pytest.fixture(scope="module")
def debian() -> DebianGuest:
    """Built once per machine (cached outside the checkout; a first run builds it: minutes)."""
    return debian_guest()


@pytest.fixture
def vm(api: httpx.Client) -> Json:
    return make_vm(api)


@pytest.fixture
def nic(vm: Json) -> list[str]:
    """QEMU arguments of the VM's network: one NIC with the port's MAC (the network configuration the metadata
    gives names it), wired to nothing."""
    return unwired_nic(vm)


@pytest.fixture
def serial_metadata(server: RunningServer, vm: Json) -> Iterator[MdataService]:
    """The host agent's SmartOS metadata service for the VM (its serial socket: what QEMU's COM2 connects to)."""
    state = Path(tempfile.mkdtemp(prefix="vmd-", dir="/tmp"))  # short: sun_path holds 107 bytes
    os.chmod(state, 0o755)
    client = ApiClient(server.url, vm["host"], "admin")
    try:
        with mdata_services(state, client, client.desired_state, check_interval=0.1) as start:
            yield start()
    finally:
        client.close()
        shutil.rmtree(state, ignore_errors=True)


class Boot(Protocol):
    def __call__(
        self, label: str, args: list[str], netns: str | None = None, then: str | None = None
    ) -> list[Json]: ...


@pytest.fixture
def boot(debian: DebianGuest, accelerator: Accelerator, tmp_path: Path, record_property: Any) -> Boot:
    """`boot(label, args, netns, then)`: one boot of the Debian guest with `args` beside its own, until cloud-init's
    results are printed (returned: one, or two with `then`, a datasource cloud-init runs with once more in the same
    VM: guest_results.THEN); the VM is killed as the call returns, its console left in tmp_path."""
    record_property(ACCEL_PROPERTY, str(accelerator))

    def run(label: str, args: list[str], netns: str | None = None, then: str | None = None) -> list[Json]:
        cmdline = f"{THEN}{then}" if then else ""
        with running_vm(debian, accelerator, unique_name(label), args, netns=netns, memory_mb=MEMORY_MB,
                        log=tmp_path / f"console-{label}.log", cmdline=cmdline) as guest:  # fmt: skip
            return [cloud_init_results(guest) for _ in range(2 if then else 1)]

    return run


def check_applied(results: Json, instance: Json, datasource: str) -> None:
    """cloud-init finished without errors from `datasource` and applied what cloudnet holds for the instance."""
    result = json.loads(results["result"])["v1"]
    assert result["datasource"].startswith(f"DataSource{datasource} "), (result, results["warnings"])
    assert result["errors"] == [], (result, results["warnings"])
    assert "status: done" in results["status"]["out"], results["status"]
    assert results["instance_id"].strip() == instance["id"]
    assert results["hostname"] == instance["hostname"]
    keys = results["authorized_keys"]
    assert instance["key"] in keys.get("/home/debian/.ssh/authorized_keys", ""), keys
    assert results["written"] == {f"{WRITES}/written": instance["token"], f"{WRITES}/ran": instance["token"] + "\n"}


def test_config_drive_without_a_network_route_then_smartos_over_the_second_serial_port(
    api: httpx.Client, boot: Boot, vm: Json, nic: list[str], serial_metadata: MdataService, tmp_path: Path
) -> None:
    """One VM, two datasources: its NIC wired to nothing (no DHCP, no route to 169.254.169.254), a config drive
    attached and, as RFD 69's KVM case, SMBIOS "SmartDC HVM" with the metadata on /dev/ttyS1 only. The boot's
    cloud-init picks the drive (ConfigDrive is listed first); then cloud-init runs again in that VM with SmartOS
    alone and its own client reads the serial port."""
    serial = serial_qemu_args(serial_metadata.serial_path(vm["id"]), qemu_version())
    smbios = qemu_args.smbios_args(vm["id"], smartos=True)
    drive, smartos = boot("debian-cd", [*nic, *config_drive(api, vm, tmp_path), *serial, *smbios], then="SmartOS")
    check_applied(drive, vm, "ConfigDrive")
    assert drive["cloud_id"] == "configdrive", drive["cloud_id"]
    check_applied(smartos, vm, "SmartOS")
    assert smartos["cloud_id"] == "joyent", smartos["cloud_id"]


def test_openstack_datasource_over_a_cloudnet_tap(cloud: Cloud, server: RunningServer, boot: Boot) -> None:
    """Nova's way: the VM on its instance's tap (`cloudnet instance qemu-args`: the NIC and SMBIOS "OpenStack
    Nova"), its address by DHCP from the network's dnsmasq, its metadata from 169.254.169.254 through the agent's
    proxy; no drive."""
    with agent_with_proxy(cloud, server):
        net, v4 = cloud.network("debvm", "10.84.0.0/24")
        router = cloud.create("routers", "router", {"name": "debvm-r"})
        r = cloud.api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": v4["id"]})
        assert r.status_code == 200, r.text
        made = make_vm(cloud.api, cloud.host, net["id"])
        vm = {**cloud.wait_active(made["id"]), "token": made["token"], "key": made["key"]}
        args, netns = tap_attachment(cloud.api, vm)
        (results,) = boot("debian-os", args, netns)
    check_applied(results, vm, "OpenStackLocal")  # (its local variant: DHCP of its own before the network is up)
    assert results["cloud_id"] == "openstack", results["cloud_id"]
