"""The Debian 12 guest with cloud-init (issue 28), booted under QEMU from cloudnet's own metadata.

Each boot is ~90 s of a full core under plain emulation, so each test boots once and checks everything cloud-init
reports and applied from that one boot. The guest's network is the `nic` fixture: today the instance's NIC with
its port's MAC wired to nothing (no DHCP, no route to 169.254.169.254: only the drive or the serial port can answer);
a cloudnet VM tap (`cloudnet instance qemu-args`) is what the OpenStack-datasource boot needs (TODO at the end).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudnet.agent.client import ApiClient
from cloudnet.agent.metadata.mdata_service import MdataService
from cloudnet.wire.mdata_serial import serial_qemu_args
from tests.support.debian_guest import MEMORY_MB, DebianGuest, debian_guest
from tests.support.debian_vm import config_drive, make_vm, unwired_nic
from tests.support.guest_results import WRITES, cloud_init_results
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


def test_config_drive_without_a_network_route(
    api: httpx.Client, debian: DebianGuest, accelerator: Accelerator, vm: Json, nic: list[str], tmp_path: Path,
    record_property: Any,
) -> None:  # fmt: skip
    record_property(ACCEL_PROPERTY, str(accelerator))
    args = [*nic, *config_drive(api, vm, tmp_path)]
    with running_vm(debian, accelerator, unique_name("debian-cd"), args, memory_mb=MEMORY_MB,
                    log=tmp_path / "console.log") as guest:  # fmt: skip
        results = cloud_init_results(guest)
    check_applied(results, vm, "ConfigDrive")
    assert results["cloud_id"] == "configdrive", results["cloud_id"]


def test_smartos_datasource_over_the_second_serial_port(
    debian: DebianGuest, accelerator: Accelerator, vm: Json, nic: list[str], serial_metadata: MdataService,
    tmp_path: Path, record_property: Any,
) -> None:  # fmt: skip
    """RFD 69's KVM case with cloud-init's own client: SMBIOS "SmartDC HVM", metadata on /dev/ttyS1 only."""
    record_property(ACCEL_PROPERTY, str(accelerator))
    serial = serial_qemu_args(serial_metadata.serial_path(vm["id"]), qemu_version())
    args = [*nic, *serial, "-smbios", "type=1,product=SmartDC HVM"]
    with running_vm(debian, accelerator, unique_name("debian-sdc"), args, memory_mb=MEMORY_MB,
                    log=tmp_path / "console.log") as guest:  # fmt: skip
        results = cloud_init_results(guest)
    check_applied(results, vm, "SmartOS")
    assert results["cloud_id"] == "joyent", results["cloud_id"]


# TODO(issue 28, after the vmlinux branch lands): the OpenStack datasource over a cloudnet VM tap. With the
# `cloud` fixture's agent running and the instance ACTIVE, boot with `cloudnet instance qemu-args NAME` (its
# -netdev tap/-device virtio-net-pci and SMBIOS "OpenStack Nova") instead of unwired_nic + config_drive, then
# check_applied(results, vm, "OpenStack").
