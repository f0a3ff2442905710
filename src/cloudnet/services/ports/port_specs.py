"""What a request may say about a port: the create and update bodies, their checks, and the attributes no
request may set."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from cloudnet.errors import BadRequest
from cloudnet.services.ports import port_policy
from cloudnet.services.security.security_groups import GroupIds
from cloudnet.services.validation import Body, Tags, check_ip, check_mac

ROUTER_INTERFACE = port_policy.ROUTER_INTERFACE
ROUTER_GATEWAY = port_policy.ROUTER_GATEWAY
ROUTER_OWNERS = (ROUTER_INTERFACE, ROUTER_GATEWAY)
METADATA_OWNER = "network:distributed"  # (a network's metadata port: services/ports/metadata_ports.py)
VNIC_TYPES = ("normal", "direct")


class FixedIp(Body):
    subnet_id: str | None = None
    ip_address: str | None = None

    _ip = field_validator("ip_address")(lambda v: None if v is None else check_ip(v))

    @model_validator(mode="after")
    def _one(self) -> FixedIp:
        if self.subnet_id is None and self.ip_address is None:
            raise ValueError("a fixed IP needs a subnet_id, an ip_address or both")
        return self


def _mac(value: str | None) -> str | None:
    return None if value is None else check_mac(value)


class PortCreate(Body):
    network_id: str
    name: str = Field("", max_length=255)
    description: str = Field("", max_length=255)
    project_id: str | None = Field(None, max_length=255)
    tenant_id: str | None = Field(None, max_length=255)
    admin_state_up: bool = True
    mac_address: str | None = None
    fixed_ips: list[FixedIp] | None = None
    device_id: str = Field("", max_length=255)
    device_owner: str = Field("", max_length=255)
    security_groups: GroupIds | None = None
    # None: the network's (port_security.for_new_port).
    port_security_enabled: bool | None = None
    allowed_address_pairs: Any = None  # checked by address_pairs.parse, with Neutron's errors
    vnic_type: Literal["normal", "direct"] = Field("normal", alias="binding:vnic_type")
    host_id: str = Field("", alias="binding:host_id", max_length=255)
    profile: dict[str, Any] | None = Field(None, alias="binding:profile")
    qos_policy_id: str | None = Field(None, max_length=36)
    tags: Tags

    _mac = field_validator("mac_address")(_mac)


class PortUpdate(Body):
    name: str | None = Field(None, max_length=255)
    description: str | None = Field(None, max_length=255)
    admin_state_up: bool | None = None
    mac_address: str | None = None
    fixed_ips: list[FixedIp] | None = None
    device_id: str | None = Field(None, max_length=255)
    device_owner: str | None = Field(None, max_length=255)
    security_groups: GroupIds | None = None
    port_security_enabled: bool | None = None
    allowed_address_pairs: Any = None
    vnic_type: Literal["normal", "direct"] | None = Field(None, alias="binding:vnic_type")
    host_id: str | None = Field(None, alias="binding:host_id", max_length=255)
    profile: dict[str, Any] | None = Field(None, alias="binding:profile")
    qos_policy_id: str | None = Field(None, max_length=36)

    _mac = field_validator("mac_address")(_mac)


READ_ONLY = ("id", "status", "binding:vif_type", "binding:vif_details", "created_at", "updated_at", "revision_number")


def reject_read_only(body: Any, method: str) -> None:
    if isinstance(body, dict):
        for key in READ_ONLY:
            if key in body:
                raise BadRequest(f"Attribute '{key}' not allowed in {method}")
