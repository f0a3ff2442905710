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
