"""wire/qemu_args.py: the QEMU arguments of a VM instance, from its API shape (the CLI's and the tests' source)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cloudnet.wire import qemu_args as q
from cloudnet.wire.mdata_paths import serial_socket
from cloudnet.wire.mdata_serial import serial_qemu_args

VM = "1f32f072-4d00-4f00-8f00-000000000001"


def port(pid: str, mac: str, **details: Any) -> dict[str, Any]:
    return {"id": pid, "mac_address": mac, "binding:vif_type": "tap", "binding:vif_details": details}


def instance(*port_ids: str) -> dict[str, Any]:
    return {"id": VM, "nets": [{"port_id": p, "device": ("tap" + p)[:14]} for p in port_ids]}


def test_a_nic_per_port_in_order_with_its_mac_and_mtu_and_the_openstack_identity() -> None:
    ports = {"aaaaaaaa-1111": port("aaaaaaaa-1111", "fa:16:3e:00:00:01", device="tapaaaaaaaa-11", mtu=1400),
             "bbbbbbbb-2222": port("bbbbbbbb-2222", "fa:16:3e:00:00:02", mtu=1500)}  # fmt: skip
    args = q.qemu_args(instance("aaaaaaaa-1111", "bbbbbbbb-2222"), ports)
    assert args == [
        "-netdev", "tap,id=net0,ifname=tapaaaaaaaa-11,script=no,downscript=no",
        "-device", "virtio-net-pci,netdev=net0,mac=fa:16:3e:00:00:01,host_mtu=1400",
        "-netdev", "tap,id=net1,ifname=tapbbbbbbbb-22,script=no,downscript=no",  # (the NIC's device: Nova's name)
        "-device", "virtio-net-pci,netdev=net1,mac=fa:16:3e:00:00:02,host_mtu=1500",
        "-uuid", VM,
        "-smbios", f"type=1,manufacturer=OpenStack Foundation,product=OpenStack Nova,uuid={VM},serial={VM}",
    ]  # fmt: skip


def test_a_userspace_datapath_turns_the_offloads_off() -> None:
    ports = {"p": port("p", "fa:16:3e:00:00:03", device="tapp", mtu=1442, datapath_type="netdev")}
    device = q.qemu_args(instance("p"), ports)[3]
    assert device.startswith("virtio-net-pci,netdev=net0,mac=fa:16:3e:00:00:03,host_mtu=1442,")
    assert "csum=off" in device and "guest_csum=off" in device and "host_tso4=off" in device
    system = {"p": port("p", "fa:16:3e:00:00:03", device="tapp", datapath_type="system")}
    assert "csum" not in q.qemu_args(instance("p"), system)[3]


def test_smartos_identity_serial_port_and_config_drive() -> None:
    ports = {"p": port("p", "fa:16:3e:00:00:04")}
    serial = serial_qemu_args(serial_socket(Path("/var/lib/cloudnet"), VM), (7, 2))
    args = q.qemu_args(instance("p"), ports, config_drive="/images/a,b.iso", serial=serial, smartos=True)
    assert f"type=1,manufacturer=Joyent,product=SmartDC HVM,uuid={VM},serial={VM}" in args
    assert args[-6:] == [
        "-chardev", f"socket,id=cnmd,path=/var/lib/cloudnet/vmserial/{VM}/ttyb,reconnect=1",
        "-device", "isa-serial,chardev=cnmd,index=1",
        "-drive", "file=/images/a,,b.iso,format=raw,if=virtio,readonly=on",  # (a comma doubled: QEMU's escape)
    ]  # fmt: skip


def test_a_hostile_device_name_cannot_add_options() -> None:
    ports = {"p": port("p", "fa:16:3e:00:00:05", device="tapx,script=/tmp/evil")}
    assert q.qemu_args(instance("p"), ports)[1] == "tap,id=net0,ifname=tapx,,script=/tmp/evil,script=no,downscript=no"


@pytest.mark.parametrize("vif_type", ["unbound", "binding_failed"])
def test_a_port_not_plugged_is_refused_with_its_reason(vif_type: str) -> None:
    bad = {"id": "p", "mac_address": "fa:16:3e:00:00:06", "binding:vif_type": vif_type,
           "binding:vif_details": {"reason": "device tapp exists"} if vif_type == "binding_failed" else {}}  # fmt: skip
    with pytest.raises(q.NotAttachable, match="port p is not plugged"):
        q.qemu_args(instance("p"), {"p": bad})


def test_the_netns_of_the_taps() -> None:
    ports = {"a": port("a", "m", netns="cloudnet-host-h-abc"), "b": port("b", "m", netns="cloudnet-host-h-abc")}
    assert q.netns_of(ports) == "cloudnet-host-h-abc"
    assert q.netns_of({"a": port("a", "m")}) is None
