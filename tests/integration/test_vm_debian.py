"""The Debian 12 guest with cloud-init (issue 28), booted under QEMU from cloudnet's own metadata.

Each boot is ~90 s of a full core under plain emulation, so each test boots once and checks everything cloud-init
reports and applied from that one boot. The guest's network is a fixture (`nics`): for the config-drive boot, the
instance's NIC with its port's MAC, wired to nothing (no metadata route: only the drive can answer).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudnet.agent.client import ApiClient
from cloudnet.agent.metadata.mdata_service import MdataService
from cloudnet.wire.mdata_serial import serial_qemu_args
from tests.support.api import create, network_on_host
from tests.support.debian_guest import MEMORY_MB, DebianGuest, debian_guest
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


def ssh_key() -> str:
    """A well-formed ed25519 public key of this run's own (cloud-init parses the keys it installs)."""
    name = b"ssh-ed25519"
    blob = len(name).to_bytes(4, "big") + name + (32).to_bytes(4, "big") + os.urandom(32)
    return f"ssh-ed25519 {base64.b64encode(blob).decode()} cloudnet-test"


def user_data(token: str) -> str:
    """Cloud-config whose effects the guest reports: a file written (write_files, init stage) and a command run
    (runcmd, final stage), both holding this test's own token."""
    return (f"#cloud-config\nwrite_files:\n  - path: {WRITES}/written\n    content: '{token}'\n"
            f"runcmd:\n  - [sh, -c, 'echo {token} > {WRITES}/ran']\n")  # fmt: skip


@pytest.fixture
def vm(api: httpx.Client) -> Json:
    """A VM instance as a user makes one: hostname, an ssh key and user-data of the test's own."""
    suffix = uuid.uuid4().hex[:8]
    host = f"vmd-{suffix}"
    net = network_on_host(api, host, f"vmd-net-{suffix}", "10.93.0.0/24")
    token = uuid.uuid4().hex
    key = ssh_key()
    instance = create(api, "instances", "instance", name=f"deb-{suffix}", hostname=f"deb-{suffix}", kind="vm",
                      host=host, user_data=user_data(token), ssh_keys=[{"name": "test", "key": key}],
                      nets=[{"network": net["id"]}])  # fmt: skip
    return {**instance, "token": token, "key": key}


def unwired_nic(instance: Json) -> list[str]:
    """The instance's NIC (its port's MAC, so the network configuration cloudnet gives names a real device),
    connected to no backend: no DHCP, no route to 169.254.169.254."""
    return ["-device", f"virtio-net-pci,mac={instance['nets'][0]['mac_address']}"]


def config_drive(api: httpx.Client, instance: Json, where: Path) -> list[str]:
    """The instance's config drive from the API, attached as Nova's libvirt driver attaches it (a disk)."""
    r = api.get(f"/instances/{instance['id']}/config-drive")
    assert r.status_code == 200, r.text
    iso = where / "config-2.iso"
    iso.write_bytes(r.content)
    return ["-drive", f"file={iso},if=virtio,format=raw,readonly=on"]


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
    api: httpx.Client, debian: DebianGuest, accelerator: Accelerator, vm: Json, tmp_path: Path,
    record_property: Any,
) -> None:  # fmt: skip
    record_property(ACCEL_PROPERTY, str(accelerator))
    args = [*unwired_nic(vm), *config_drive(api, vm, tmp_path)]
    with running_vm(debian, accelerator, unique_name("debian-cd"), args, memory_mb=MEMORY_MB,
                    log=tmp_path / "console.log") as guest:  # fmt: skip
        results = cloud_init_results(guest)
    check_applied(results, vm, "ConfigDrive")
    assert results["cloud_id"]["out"].strip() == "configdrive", results["cloud_id"]


def test_smartos_datasource_over_the_second_serial_port(
    debian: DebianGuest, accelerator: Accelerator, vm: Json, serial_metadata: MdataService, tmp_path: Path,
    record_property: Any,
) -> None:  # fmt: skip
    """RFD 69's KVM case with cloud-init's own client: SMBIOS "SmartDC HVM", metadata on /dev/ttyS1 only."""
    record_property(ACCEL_PROPERTY, str(accelerator))
    serial = serial_qemu_args(serial_metadata.serial_path(vm["id"]), qemu_version())
    args = [*unwired_nic(vm), *serial, "-smbios", "type=1,product=SmartDC HVM"]
    with running_vm(debian, accelerator, unique_name("debian-sdc"), args, memory_mb=MEMORY_MB,
                    log=tmp_path / "console.log") as guest:  # fmt: skip
        results = cloud_init_results(guest)
    check_applied(results, vm, "SmartOS")


# TODO(issue 28, after the vmlinux branch lands): the OpenStack datasource over a cloudnet VM tap. With the
# `cloud` fixture's agent running and the instance ACTIVE, boot with `cloudnet instance qemu-args NAME` (its
# -netdev tap/-device virtio-net-pci and SMBIOS "OpenStack Nova") instead of unwired_nic + config_drive, then
# check_applied(results, vm, "OpenStack").
