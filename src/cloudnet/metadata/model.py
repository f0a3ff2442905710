"""What the metadata trees are rendered from: one instance's view, and the service-wide settings.

Plain frozen values, loaded once per instance (metadata/view.py) and shared by every request of its guest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

OPTIONAL = "optional"
REQUIRED = "required"


@dataclass(frozen=True)
class Subnet:
    id: str
    network_id: str
    cidr: str
    ip_version: int
    gateway_ip: str | None
    dns_nameservers: tuple[str, ...] = ()
    # (destination CIDR, next hop)
    host_routes: tuple[tuple[str, str], ...] = ()
    # The network's metadata port address here: the next hop to 169.254.169.254 (IPv4 subnets only).
    metadata_hop: str | None = None


@dataclass(frozen=True)
class Port:
    id: str
    network_id: str
    mac_address: str
    mtu: int
    vnic_type: str = "normal"
    # (address, subnet id), IPv4 first
    fixed_ips: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class InstanceView:
    id: str
    name: str
    hostname: str
    project_id: str
    user_data: bytes | None = None
    meta: dict[str, str] = field(default_factory=dict)
    # (key name, public key)
    ssh_keys: tuple[tuple[str, str], ...] = ()
    # in interface order: ports[0] is eth0
    ports: tuple[Port, ...] = ()
    subnets: dict[str, Subnet] = field(default_factory=dict)
    security_groups: tuple[str, ...] = ()
    # The listen address of a forward whose default target is this instance (EC2 public-ipv4).
    public_ipv4: str | None = None
    password: str | None = None
    metadata_tokens: str = OPTIONAL
    # The zone its host's agent reports (Nova answers the instance's); None (no host, or the default): the setting's.
    availability_zone: str | None = None

    @property
    def fixed_ipv4(self) -> str | None:
        for port in self.ports:
            for address, _subnet in port.fixed_ips:
                if ":" not in address:
                    return address
        return None


@dataclass(frozen=True)
class Settings:
    """Service-wide answers that are not per instance (nova.conf's equivalents)."""

    # Appended to hostnames as nova's [api] dhcp_domain does ("" for none).
    dhcp_domain: str = "novalocal"
    availability_zone: str = "nova"
    instance_type: str = "cloudnet"
    # StaticJSON vendor data (nova's vendordata_jsonfile_path): a JSON object.
    vendor_data: dict[str, Any] = field(default_factory=dict)
