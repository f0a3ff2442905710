"""Device names and OVS external_ids of the OVN driver: derived from resource ids, at most 15 characters.

Only ids that are plain tokens are plugged (what cloudnet generates): an id is data in OVSDB (never parsed), but it
also becomes an OVN logical port name that flows match on, and the server's NB writer refuses others likewise.
"""

from __future__ import annotations

import re

IFNAMSIZ = 15
TAP = "cno-"  # host end of an instance port's veth, a port of br-int
METADATA_LEG = "cnl-"  # host end of a metadata namespace's veth (the network's localport)
METADATA_IFACE = "md0"  # its end inside the metadata namespace
# A VM NIC's hybrid plug (vm_ports.py), named as Nova names them (prefix + the port id's first 11 characters): the
# tap on a Linux bridge of its own, linked to br-int by a veth pair (bridge end, br-int end).
VM_BRIDGE, VM_BRIDGE_LEG, VM_SWITCH_LEG = "qbr", "qvb", "qvo"
VM_TAP_GROUP = 0x636E6F74  # "cnot": the device group of the OVN driver's VM taps, which its guard matches (guard.py)
PLAIN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
# external_ids of the OVS Interfaces this driver made: whose (the agent's host) and for what.
HOST_ID = "cloudnet:host"
IFACE_ID = "iface-id"
# The networks whose metadata this chassis serves, in its Chassis_Private (or Chassis) external_ids.
METADATA_NETWORKS = "cloudnet:metadata-networks"


def is_plain(resource_id: str) -> bool:
    return PLAIN_ID.fullmatch(resource_id) is not None


def _short(resource_id: str, prefix: str) -> str:
    return prefix + resource_id.replace("-", "")[: IFNAMSIZ - len(prefix)]


def tap(port_id: str) -> str:
    return _short(port_id, TAP)


def metadata_leg(port_id: str) -> str:
    return _short(port_id, METADATA_LEG)


def nova(prefix: str, port_id: str) -> str:
    """Nova's device name for a port: the prefix and the port id's first characters, 14 in all."""
    return (prefix + port_id)[:14]
