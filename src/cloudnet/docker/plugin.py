"""The driver's working set, shared by the IPAM, network and sandbox handlers."""

from __future__ import annotations

import asyncio
import ipaddress
from dataclasses import dataclass, field

from cloudnet.docker.cloudnet_api import CloudnetApi, Json, PluginError
from cloudnet.docker.state import State

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_OBJECTS = 4096  # pools, networks or endpoints one driver remembers: the state file stays small


@dataclass
class Plugin:
    api: CloudnetApi
    state: State
    host: str  # the cloudnet host (agent) the containers of this dockerd run on
    join_timeout: float = 25.0  # under dockerd's 30 s plugin call timeout
    # One change at a time: dockerd calls concurrently, and the state file is replaced whole.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def cidr(text: str) -> IpNetwork:
    try:
        return ipaddress.ip_network(text, strict=True)
    except ValueError:
        raise PluginError(f"invalid pool {text[:64]!r}: a network in CIDR notation (host bits clear)") from None


def address(text: str) -> IpAddress:
    """An address as dockerd gives it: plain, or with a prefix length ("10.0.0.5/24")."""
    try:
        return ipaddress.ip_address(text.split("/", 1)[0])
    except ValueError:
        raise PluginError(f"invalid address {text[:64]!r}") from None


def bounded(count: int, what: str) -> None:
    if count >= MAX_OBJECTS:
        raise PluginError(f"too many {what} ({MAX_OBJECTS}): remove some first")


async def free_port_with(plugin: Plugin, network_id: str, ip: IpAddress) -> Json | None:
    """The port of `network_id` holding `ip`, when it is free to use (not bound to a device); None when no port
    holds it. One bound to something else is a refusal."""
    found = await plugin.api.find("ports", [("network_id", network_id), ("fixed_ips", f"ip_address={ip}")])
    for port in found:
        if any(address(f["ip_address"]) == ip for f in port["fixed_ips"]):
            if port["device_id"]:
                raise PluginError(f"address {ip} is in use by port {port['id']}")
            return port
    return None
