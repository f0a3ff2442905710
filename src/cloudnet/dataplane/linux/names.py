"""Kernel object names: derived from resource ids, at most 15 characters, recognisably cloudnet's.

Every link cloudnet creates starts with one of PREFIXES, so the agent can find its own leftovers and
never touches anybody else's devices. Namespaces carry the `cloudnet-` prefix.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

# Where the metadata proxy listens is the driver interface's (every driver makes the same namespace reachable).
from cloudnet.dataplane.base import METADATA_NS_PREFIX, metadata_ns, metadata_ns_prefix  # noqa: F401

# The namespaces cloudnet provides and reserves are named in a module shared with the control plane.
from cloudnet.namespaces import (  # noqa: F401
    MANAGED_NS_PREFIX,
    RESERVED_NS_PREFIX,
    is_managed_ns,
    managed_ns_prefix,
    new_managed_ns,
)
from cloudnet.wire.guest_net import vm_device

IFNAMSIZ = 15
BRIDGE = "cnb-"  # a network's bridge, in the host namespace
TAP = "cnt-"  # host end of an instance port's veth
TAP_PEER = "cni-"  # instance end parked by earlier versions (still collected when found)
RETIRED = "cnr-"  # host end of a parked pair made way for a fresh one (pool.py: retire), gone with its namespace
ROUTER_LEG = "cnq-"  # host end of a router interface's veth
GATEWAY_LEG = "cng-"  # host end of a router gateway's veth
METADATA_LEG = "cnm-"  # host end of a metadata namespace's veth
METADATA_IFACE = "md-"  # metadata namespace end
VM_TAP_NEW = "cnv-"  # a VM's tap being made (vm_ports.py): renamed to Nova's name (guest_net.vm_device) when ready
TRUNK_END = "cns-"  # inner end of a trunk subport's veth (its cnt- end is on the subport's bridge): trunk_vlans.py
ROUTER_IFACE = "qr-"  # router end of an interface leg (inside the router namespace)
ROUTER_GW = "qg-"  # router end of the gateway leg
IFB = "cnf-"  # an instance port's ifb device: what the instance sends is shaped there (qos_tc.py)
PREFIXES = (BRIDGE, TAP, TAP_PEER, RETIRED, ROUTER_LEG, GATEWAY_LEG, METADATA_LEG, METADATA_IFACE, VM_TAP_NEW,
            TRUNK_END, IFB)  # fmt: skip
# A VM's tap is named as Nova names it ("tap" + port id), a name anybody may use: cloudnet's carry a mark instead
# (kernel/tuntap.mark, their alias), and the device group VM_TAP_GROUP, which the bridge filter matches (fw_render.py:
# a VM tap it does not know passes nothing, as a cnt- device).
VM_TAP_GROUP = 0x636E7674  # "cnvt"
HOST_NS_PREFIX = "cloudnet-host-"
ROUTER_NS_PREFIX = "cloudnet-router-"
PARK_NS_PREFIX = "cloudnet-park-"  # (the shared holding namespace of earlier versions: removed when found)


def _short(resource_id: str, prefix: str) -> str:
    return prefix + resource_id.replace("-", "")[: IFNAMSIZ - len(prefix)]


def bridge(network_id: str) -> str:
    return _short(network_id, BRIDGE)


def tap(port_id: str) -> str:
    return _short(port_id, TAP)


def trunk_end(port_id: str) -> str:
    return _short(port_id, TRUNK_END)


def ifb(port_id: str) -> str:
    return _short(port_id, IFB)


def retired() -> str:
    """A name of its own for a retired host end (random: one of the same port may not be gone yet)."""
    return RETIRED + secrets.token_hex(8)[: IFNAMSIZ - len(RETIRED)]


def router_leg(port_id: str) -> str:
    return _short(port_id, ROUTER_LEG)


def gateway_leg(port_id: str) -> str:
    return _short(port_id, GATEWAY_LEG)


def metadata_leg(port_id: str) -> str:
    return _short(port_id, METADATA_LEG)


def metadata_iface(port_id: str) -> str:
    return _short(port_id, METADATA_IFACE)


def router_iface(port_id: str) -> str:
    return _short(port_id, ROUTER_IFACE)


def router_gw(port_id: str) -> str:
    return _short(port_id, ROUTER_GW)


def host_ns(host: str) -> str:
    # Host names may be long or contain characters a file name should not: keep it short and safe.
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in host)[:40]
    digest = hashlib.sha1(host.encode()).hexdigest()[:6]
    return f"{HOST_NS_PREFIX}{safe}-{digest}"


def router_ns_prefix(host: str) -> str:
    # Per host, so that two agents on one machine (tests, a lab) never collect each other's routers.
    return f"{ROUTER_NS_PREFIX}{hashlib.sha1(host.encode()).hexdigest()[:6]}-"


def router_ns(host: str, router_id: str) -> str:
    return router_ns_prefix(host) + router_id


def park_ns(host: str) -> str:
    """The shared holding namespace earlier versions parked pool devices in (now one namespace per device)."""
    return f"{PARK_NS_PREFIX}{hashlib.sha1(host.encode()).hexdigest()[:6]}"


def is_ours(ifname: str) -> bool:
    return ifname.startswith(PREFIXES)


def vm_tap_new(port_id: str) -> str:
    return _short(port_id, VM_TAP_NEW)


def vm_port_devices(state: dict[str, Any]) -> dict[str, str]:
    """The host devices of the desired state's VM NICs: port id -> its tap (Nova's name)."""
    return {pid: vm_device(pid) for inst in state["instances"] if inst.get("kind") == "vm" for pid in inst["ports"]}


def port_device(port_id: str, vm_devices: dict[str, str]) -> str:
    """The host device of an instance port: a VM's tap, or the host end of a container's veth."""
    return vm_devices.get(port_id) or tap(port_id)
