"""A cloudnet VM instance for the Debian guest (debian_guest.py) and the QEMU arguments that hand it its metadata
without a network: the instance's NIC wired to nothing, its config drive from the API. Shared by
tests/integration/test_vm_debian.py and bench/debian_boot.py.
"""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path
from typing import Any

import httpx

from cloudnet.wire import qemu_args
from tests.support.api import create, network_on_host
from tests.support.guest_results import WRITES

Json = dict[str, Any]


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


def make_vm(api: httpx.Client, host: str | None = None, network_id: str | None = None) -> Json:
    """A VM instance as a user makes one (on a host and network of its own unless given): hostname, an ssh key and
    user-data of its own (returned with it as `key` and `token`: what the guest must show)."""
    suffix = uuid.uuid4().hex[:8]
    if host is None or network_id is None:
        host = f"vmd-{suffix}"
        network_id = network_on_host(api, host, f"vmd-net-{suffix}", "10.93.0.0/24")["id"]
    token = uuid.uuid4().hex
    key = ssh_key()
    instance = create(api, "instances", "instance", name=f"deb-{suffix}", hostname=f"deb-{suffix}", kind="vm",
                      host=host, user_data=user_data(token), ssh_keys=[{"name": "test", "key": key}],
                      nets=[{"network": network_id}])  # fmt: skip
    return {**instance, "token": token, "key": key}


def tap_attachment(api: httpx.Client, instance: Json) -> tuple[list[str], str]:
    """What `cloudnet instance qemu-args` prints for an ACTIVE instance (its taps, SMBIOS "OpenStack Nova"), and
    the namespace its taps are in (QEMU runs there)."""
    ports = {n["port_id"]: api.get(f"/ports/{n['port_id']}").json()["port"] for n in instance["nets"]}
    netns = qemu_args.netns_of(ports)
    assert netns is not None, ports
    return qemu_args.qemu_args(instance, ports), netns


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
