"""`cloudnet instance qemu-args` against a live server: the instance and its ports as the API shows them to the
caller (no agent here: the host's report is made by hand, as its agent would send it)."""

from __future__ import annotations

import shlex
from typing import Any

import httpx
import pytest

from cloudnet.wire.guest_net import vm_device
from tests.support.api import create
from tests.support.cli import Cli
from tests.support.server import RunningServer

HOST = "qemu-host-1"


@pytest.fixture
def cli(server: RunningServer, tokens: dict[str, Any]) -> Cli:
    return Cli(server.url)


@pytest.fixture
def vm(users: dict[str, httpx.Client]) -> dict[str, Any]:
    """Alice's VM with one NIC, its port reported plugged by its host (a tap, vif_details as the agent fills them)."""
    admin, alice = users["admin"], users["alice"]
    assert admin.put(f"/hosts/{HOST}", json={"host": {"agent_version": "test"}}).status_code == 200
    net = create(alice, "networks", "network", name="qnet", mtu=1400)
    create(alice, "subnets", "subnet", network_id=net["id"], cidr="10.83.0.0/24")
    inst = create(alice, "instances", "instance", name="qvm", kind="vm", host=HOST, nets=[{"network": net["id"]}])
    nic = inst["nets"][0]
    details = {"port_filter": True, "bridge_name": "cnb-x", "datapath_type": "system", "connectivity": "l2",
               "mtu": 1400, "mac_address": nic["mac_address"], "device": vm_device(nic["port_id"]),
               "netns": "cloudnet-host-q"}  # fmt: skip
    report = {"ports": [{"id": nic["port_id"], "status": "ACTIVE", "binding:vif_type": "tap",
                         "binding:vif_details": details}]}  # fmt: skip
    assert admin.put(f"/hosts/{HOST}/ports", json=report).status_code == 200
    return inst


def test_the_owner_gets_the_arguments_of_its_vm(cli: Cli, vm: dict[str, Any]) -> None:
    nic = vm["nets"][0]
    out = cli.ok("--token", "alice-token", "instance", "qemu-args", "qvm", "--config-drive", "/images/qvm.iso",
                 "--qemu-version", "7.2").stdout  # fmt: skip
    args = shlex.split(out)
    assert args[:4] == ["-netdev", f"tap,id=net0,ifname={nic['device']},script=no,downscript=no", "-device",
                        f"virtio-net-pci,netdev=net0,mac={nic['mac_address']},host_mtu=1400"]  # fmt: skip
    assert f"type=1,manufacturer=OpenStack Foundation,product=OpenStack Nova,uuid={vm['id']},serial={vm['id']}" in args
    assert args[-2:] == ["-drive", "file=/images/qvm.iso,format=raw,if=virtio,readonly=on"]
    lines = cli.ok("--token", "alice-token", "instance", "qemu-args", vm["id"], "--lines", "--command").stdout
    assert lines.splitlines()[:5] == ["ip", "netns", "exec", "cloudnet-host-q", "qemu-system-x86_64"]
    smartos = shlex.split(cli.ok("--token", "alice-token", "instance", "qemu-args", "qvm", "--smartos",
                                 "--state-dir", "/srv/cn", "--qemu-version", "7.2").stdout)  # fmt: skip
    assert any("product=SmartDC HVM" in a for a in smartos)
    assert f"socket,id=cnmd,path=/srv/cn/vmserial/{vm['id']}/ttyb,reconnect=1" in smartos


def test_another_project_gets_no_arguments(cli: Cli, vm: dict[str, Any]) -> None:
    by_id = cli.fail("--token", "bob-token", "instance", "qemu-args", vm["id"])
    by_name = cli.fail("--token", "bob-token", "instance", "qemu-args", "qvm")
    assert "No instance found" in by_id and "No instance found" in by_name


def test_a_container_or_an_unplugged_vm_is_refused(
    cli: Cli, users: dict[str, httpx.Client], vm: dict[str, Any]
) -> None:
    alice = users["alice"]
    net_id = vm["nets"][0]["network_id"]
    create(alice, "instances", "instance", name="box", host=HOST, nets=[{"network": net_id}])
    assert "is not a vm" in cli.fail("--token", "alice-token", "instance", "qemu-args", "box")
    create(alice, "instances", "instance", name="fresh", kind="vm", host=HOST, nets=[{"network": net_id}])
    assert "is not plugged" in cli.fail("--token", "alice-token", "instance", "qemu-args", "fresh")


@pytest.mark.parametrize("option", [("--vm-user", "no-such-user-cn"), ("--vm-group", "no-such-group-cn")])
def test_an_unknown_vm_owner_is_refused_before_the_agent_starts(cli: Cli, option: tuple[str, str]) -> None:
    line = cli.fail("agent", "--host", "qemu-host-2", "--metadata-url", "off", *option)
    assert "--vm-user/--vm-group" in line and option[1] in line
