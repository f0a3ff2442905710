"""The QEMU arguments that attach a VM instance (`cloudnet instance qemu-args`): its NICs, the SMBIOS identity
cloud-init looks for, and, when asked, its config drive and SmartOS metadata serial port. Pure: from the instance and
its ports as the API shows them.

Each NIC is the tap the host's dataplane made (`binding:vif_details.device`, in the namespace `vif_details.netns`
when the dataplane says: the VMM runs there, e.g. `ip netns exec <netns> qemu-system-x86_64 ...`), opened by name
with no script, and a virtio NIC with the port's MAC and the network's MTU (`host_mtu`). On a userspace datapath
(`datapath_type` "netdev": OVS's, with a kernel tap) the NIC's checksum and segmentation offloads are off: that
datapath neither completes partial checksums nor segments, so an offloaded guest's TCP would be lost.

cloud-init's OpenStack datasource on x86 insists on SMBIOS product "OpenStack Nova" (or "OpenStack Compute";
cloudinit/sources/DataSourceOpenStack.py detect_openstack), its SmartOS one on a product starting "SmartDC"
(DataSourceSmartOS.py get_smartos_environ); the system UUID and serial are the instance's id, as Nova sets them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cloudnet.wire.guest_net import vm_device

OPENSTACK = ("OpenStack Foundation", "OpenStack Nova")
SMARTOS = ("Joyent", "SmartDC HVM")
# Off on a userspace datapath: every offload a virtio NIC negotiates that leaves a checksum or a segmentation to
# the other side.
NO_OFFLOADS = ("csum=off", "guest_csum=off", "gso=off", "host_tso4=off", "host_tso6=off", "host_ecn=off",
               "host_ufo=off", "guest_tso4=off", "guest_tso6=off", "guest_ecn=off", "guest_ufo=off")  # fmt: skip


class NotAttachable(ValueError):
    """A NIC a VMM cannot attach (yet): its port is not bound to a device."""


def escape(value: str) -> str:
    """A value inside a QEMU option list: a comma is doubled (QEMU's only escape)."""
    return value.replace(",", ",,")


def nic_args(position: int, nic: Mapping[str, Any], port: Mapping[str, Any]) -> list[str]:
    """`-netdev tap` + `-device virtio-net-pci` of the instance's NIC at `position` (its port as the API shows it)."""
    details = port.get("binding:vif_details") or {}
    if port.get("binding:vif_type") in (None, "unbound", "binding_failed"):
        reason = details.get("reason") or port.get("binding:vif_type") or "unbound"
        raise NotAttachable(f"port {port.get('id')} is not plugged: {reason}")
    device = str(details.get("device") or nic.get("device") or vm_device(str(port["id"])))
    ident = f"net{position}"
    nic_options = [f"virtio-net-pci,netdev={ident},mac={port['mac_address']}"]
    if details.get("mtu"):
        nic_options.append(f"host_mtu={int(details['mtu'])}")
    if details.get("datapath_type") == "netdev":
        nic_options += NO_OFFLOADS
    return ["-netdev", f"tap,id={ident},ifname={escape(device)},script=no,downscript=no",
            "-device", ",".join(nic_options)]  # fmt: skip


def smbios_args(instance_id: str, smartos: bool = False) -> list[str]:
    manufacturer, product = SMARTOS if smartos else OPENSTACK
    identity = f"type=1,manufacturer={manufacturer},product={product},uuid={instance_id},serial={instance_id}"
    return ["-uuid", instance_id, "-smbios", identity]


def config_drive_args(path: str) -> list[str]:
    """The config drive (ISO 9660, label config-2), read-only: cloud-init's ConfigDrive finds it by its label."""
    return ["-drive", f"file={escape(path)},format=raw,if=virtio,readonly=on"]


def qemu_args(
    instance: Mapping[str, Any],
    ports: Mapping[str, Mapping[str, Any]],
    *,
    config_drive: str | None = None,
    serial: Sequence[str] = (),
    smartos: bool = False,
) -> list[str]:
    """Every argument that attaches `instance` (its nets in order, `ports` by id), with the SmartOS identity and
    the `serial` arguments when `smartos`, and a config drive at `config_drive`."""
    args: list[str] = []
    for position, nic in enumerate(instance.get("nets") or []):
        args += nic_args(position, nic, ports[nic["port_id"]])
    args += smbios_args(str(instance["id"]), smartos)
    if smartos:
        args += list(serial)
    if config_drive is not None:
        args += config_drive_args(config_drive)
    return args


def netns_of(ports: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The namespace the VM's taps are in, when its dataplane says (one for all of them: one host's)."""
    found = {(p.get("binding:vif_details") or {}).get("netns") for p in ports.values()} - {None, ""}
    return str(found.pop()) if len(found) == 1 else None
