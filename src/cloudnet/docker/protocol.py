"""The requests dockerd sends (libnetwork docs/remote.md and docs/ipam.md), bounded before any work is done.

dockerd may add fields in later versions: unknown ones are ignored. Every string is bounded; option maps are
read only for the keys this driver knows.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["ValidationError"]

MAX_BODY = 64 * 1024  # dockerd's largest request (a network with a few pools and options) is well under this
DOCKER_ID = r"^[0-9a-zA-Z]{1,64}$"
# The -o/--opt of `docker network create` arrive under this key of CreateNetwork's Options.
GENERIC = "com.docker.network.generic"
GATEWAY_REQUEST = "com.docker.network.gateway"  # RequestAddress Options["RequestAddressType"] for the gateway
MAC_OPTION = "com.docker.network.endpoint.macaddress"
# This driver's own options.
OPT_NETWORK = "cloudnet.network"  # docker network create -o: an existing cloudnet network to use
OPT_SUBNET = "cloudnet.subnet"  # --ipam-opt: an existing cloudnet subnet as the pool
OPT_PORT = "cloudnet.port"  # endpoint driver option: a pre-created port (Zun's case, `direct` ports too)

DockerId = Annotated[str, Field(pattern=DOCKER_ID)]
Text = Annotated[str, Field(max_length=255)]
OptionMap = dict[Annotated[str, Field(max_length=255)], Any]


class Request(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class PoolRequest(Request):
    AddressSpace: Text = ""
    Pool: Text = ""
    SubPool: Text = ""
    Options: dict[Text, Text] | None = None
    V6: bool = False


class PoolRef(Request):
    PoolID: Text


class AddressRequest(Request):
    PoolID: Text
    Address: Text = ""
    Options: dict[Text, Text] | None = None


class IpamData(Request):
    AddressSpace: Text = ""
    Pool: Text
    Gateway: Text = ""
    AuxAddresses: dict[Text, Text] | None = None


class CreateNetwork(Request):
    NetworkID: DockerId
    Options: OptionMap | None = None
    IPv4Data: Annotated[list[IpamData], Field(max_length=16)] | None = None
    IPv6Data: Annotated[list[IpamData], Field(max_length=16)] | None = None


class NetworkRef(Request):
    NetworkID: DockerId


class EndpointInterface(Request):
    Address: Text = ""
    AddressIPv6: Text = ""
    MacAddress: Text = ""


class CreateEndpoint(Request):
    NetworkID: DockerId
    EndpointID: DockerId
    Options: OptionMap | None = None
    Interface: EndpointInterface | None = None


class EndpointRef(Request):
    NetworkID: DockerId
    EndpointID: DockerId


class Join(EndpointRef):
    SandboxKey: Annotated[str, Field(max_length=4096)] = ""
    Options: OptionMap | None = None


def option(options: dict[str, Any] | None, key: str) -> str | None:
    """A string option, given at the top level of an Options map or under the generic key (where dockerd puts
    `-o` of a network and, in some versions, an endpoint's driver options); None when absent or not a string."""
    options = options or {}
    generic = options.get(GENERIC)
    value = options.get(key, generic.get(key) if isinstance(generic, dict) else None)
    return value if isinstance(value, str) and 0 < len(value) <= 255 else None
