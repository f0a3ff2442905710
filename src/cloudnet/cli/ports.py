"""`cloudnet port ...`."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated

import typer

from cloudnet.cli.client import NETWORK, PORT, SECURITY_GROUP, SUBNET, Client
from cloudnet.cli.common import client_of, delete_each, require_changes, resolve_fixed_ips, set_if
from cloudnet.cli.errors import CliError
from cloudnet.cli.output import Column, ColumnsOption, Format, FormatOption, print_list, print_show, up_down
from cloudnet.cli.parsing import parse_allowed_address, parse_assignments, parse_fixed_ip

app = typer.Typer(help="Manage ports.", no_args_is_help=True)

COLUMNS = [
    Column("ID", "id"),
    Column("Name", "name"),
    Column("MAC Address", "mac_address"),
    Column("Fixed IP Addresses", "fixed_ips"),
    Column("Status", "status"),
]
LONG_COLUMNS = [
    *COLUMNS,
    Column("Network", "network_id"),
    Column("Device ID", "device_id"),
    Column("Device Owner", "device_owner"),
    Column("Host", "binding:host_id"),
    Column("VNIC Type", "binding:vnic_type"),
    Column("Security Groups", "security_groups"),
    Column("Port Security", "port_security_enabled"),
    Column("Allowed Address Pairs", "allowed_address_pairs"),
    Column("State", lambda p: up_down(p.get("admin_state_up"))),
    Column("Tags", "tags"),
]


class VnicType(StrEnum):
    normal = "normal"
    direct = "direct"


PortArg = Annotated[str, typer.Argument(metavar="PORT", help="Port name or id.")]
FixedIpOption = Annotated[
    list[str] | None,
    typer.Option(metavar="subnet=SUBNET,ip-address=IP", help="Fixed IP; either key may be left out (repeatable)."),
]
SecurityGroupOption = Annotated[
    list[str] | None, typer.Option(metavar="SG", help="Security group name or id (repeatable).")
]
NoSecurityGroupOption = Annotated[
    bool, typer.Option("--no-security-group", help="No security groups (set: clear before adding).")
]
PortSecurityOption = Annotated[
    bool | None,
    typer.Option(
        "--enable-port-security/--disable-port-security",
        help="Port security: anti-spoofing and security groups (default: the network's).",
    ),
]
AllowedAddressOption = Annotated[
    list[str] | None,
    typer.Option(
        metavar="ip-address=IP|CIDR[,mac-address=MAC]",
        help="Allowed address pair: another address the port may send from (repeatable).",
    ),
]
DeviceIdOption = Annotated[str | None, typer.Option(help="Id of the device (e.g. instance) using the port.")]
DeviceOwnerOption = Annotated[str | None, typer.Option(help="Owner of the device, e.g. compute:nova.")]
HostOption = Annotated[str | None, typer.Option(help="Host the port is bound to (binding:host_id).")]
VnicOption = Annotated[VnicType | None, typer.Option(help="binding:vnic_type.")]


@app.command("create")
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Name of the new port.")],
    network: Annotated[str, typer.Option(help="Network name or id.")],
    fixed_ip: FixedIpOption = None,
    mac_address: Annotated[str | None, typer.Option(help="MAC address (default: generated).")] = None,
    device_id: DeviceIdOption = None,
    device_owner: DeviceOwnerOption = None,
    vnic_type: VnicOption = None,
    host: HostOption = None,
    binding_profile: Annotated[
        list[str] | None, typer.Option(metavar="KEY=VALUE", help="binding:profile entry (repeatable).")
    ] = None,
    security_group: SecurityGroupOption = None,
    no_security_group: NoSecurityGroupOption = False,
    port_security: PortSecurityOption = None,
    allowed_address: AllowedAddressOption = None,
    disable: Annotated[bool, typer.Option("--disable", help="Create administratively down.")] = False,
    description: Annotated[str | None, typer.Option(help="Description.")] = None,
    tag: Annotated[list[str] | None, typer.Option(help="Tag (repeatable).")] = None,
    fmt: FormatOption = Format.table,
    columns: ColumnsOption = None,
) -> None:
    """Create a port."""
    if security_group and no_security_group:
        raise CliError("--security-group and --no-security-group cannot be used together")
    profile = parse_assignments(binding_profile or [], option="--binding-profile")
    client = client_of(ctx)
    network_id = client.find_id(NETWORK, network)
    body: dict[str, object] = {"name": name, "network_id": network_id}
    if fixed_ip:
        body["fixed_ips"] = resolve_fixed_ips(client, network_id, fixed_ip)
    set_if(body, "mac_address", mac_address)
    set_if(body, "device_id", device_id)
    set_if(body, "device_owner", device_owner)
    set_if(body, "binding:vnic_type", vnic_type.value if vnic_type else None)
    set_if(body, "binding:host_id", host)
    set_if(body, "binding:profile", profile or None)
    if security_group or no_security_group:
        body["security_groups"] = _security_group_ids(client, security_group or [])
    set_if(body, "port_security_enabled", port_security)
    if allowed_address:
        body["allowed_address_pairs"] = [parse_allowed_address(text) for text in allowed_address]
    set_if(body, "admin_state_up", False if disable else None)
    set_if(body, "description", description)
    set_if(body, "tags", tag or None)
    print_show(client.create(PORT, body), fmt, columns)


@app.command("list")
def list_ports(
    ctx: typer.Context,
    network: Annotated[str | None, typer.Option(help="Only ports on this network (name or id).")] = None,
    device_id: DeviceIdOption = None,
    device_owner: DeviceOwnerOption = None,
    host: HostOption = None,
    fixed_ip: Annotated[
        list[str] | None,
        typer.Option(metavar="ip-address=IP|subnet=SUBNET", help="Only ports with this fixed IP (repeatable)."),
    ] = None,
    long: Annotated[bool, typer.Option("--long", help="More columns.")] = False,
    fmt: FormatOption = Format.table,
    columns: ColumnsOption = None,
) -> None:
    """List ports."""
    client = client_of(ctx)
    params: list[tuple[str, str]] = []
    if network is not None:
        params.append(("network_id", client.find_id(NETWORK, network)))
    for key, value in (("device_id", device_id), ("device_owner", device_owner), ("binding:host_id", host)):
        if value is not None:
            params.append((key, value))
    for spec in fixed_ip or []:
        pairs = parse_fixed_ip(spec)
        if pairs.get("subnet"):
            params.append(("fixed_ips", f"subnet_id={client.find_id(SUBNET, pairs['subnet'])}"))
        if pairs.get("ip-address"):
            params.append(("fixed_ips", f"ip_address={pairs['ip-address']}"))
    print_list(client.list_all(PORT, params), LONG_COLUMNS if long else COLUMNS, fmt, columns)


@app.command("show")
def show(ctx: typer.Context, port: PortArg, fmt: FormatOption = Format.table, columns: ColumnsOption = None) -> None:
    """Show one port."""
    print_show(client_of(ctx).find(PORT, port), fmt, columns)


@app.command("set")
def set_port(
    ctx: typer.Context,
    port: PortArg,
    name: Annotated[str | None, typer.Option(help="New name.")] = None,
    fixed_ip: FixedIpOption = None,
    no_fixed_ip: Annotated[
        bool, typer.Option("--no-fixed-ip", help="Clear fixed IPs (before adding any given).")
    ] = False,
    device_id: DeviceIdOption = None,
    device_owner: DeviceOwnerOption = None,
    host: HostOption = None,
    vnic_type: VnicOption = None,
    security_group: SecurityGroupOption = None,
    no_security_group: NoSecurityGroupOption = False,
    port_security: PortSecurityOption = None,
    allowed_address: AllowedAddressOption = None,
    no_allowed_address: Annotated[
        bool, typer.Option("--no-allowed-address", help="Clear allowed address pairs (before adding any given).")
    ] = False,
    enable: Annotated[bool | None, typer.Option("--enable/--disable", help="Administrative state.")] = None,
    description: Annotated[str | None, typer.Option(help="New description.")] = None,
) -> None:
    """Change a port. Fixed IPs, security groups and allowed address pairs given are added to the existing ones."""
    client = client_of(ctx)
    current = client.find(PORT, port)
    body: dict[str, object] = {}
    set_if(body, "name", name)
    if fixed_ip or no_fixed_ip:
        existing = [] if no_fixed_ip else list(current.get("fixed_ips") or [])
        body["fixed_ips"] = existing + resolve_fixed_ips(client, str(current["network_id"]), fixed_ip or [])
    set_if(body, "device_id", device_id)
    set_if(body, "device_owner", device_owner)
    set_if(body, "binding:host_id", host)
    set_if(body, "binding:vnic_type", vnic_type.value if vnic_type else None)
    if security_group or no_security_group:
        existing = [] if no_security_group else list(current.get("security_groups") or [])
        added = _security_group_ids(client, security_group or [])
        body["security_groups"] = existing + [sg for sg in added if sg not in existing]
    set_if(body, "port_security_enabled", port_security)
    if allowed_address or no_allowed_address:
        pairs = [] if no_allowed_address else list(current.get("allowed_address_pairs") or [])
        body["allowed_address_pairs"] = pairs + [parse_allowed_address(text) for text in allowed_address or []]
    set_if(body, "admin_state_up", enable)
    set_if(body, "description", description)
    require_changes(body, f"port {port}")
    client.update(PORT, str(current["id"]), body)


@app.command("delete")
def delete(
    ctx: typer.Context,
    ports: Annotated[list[str], typer.Argument(metavar="PORT", help="Port names or ids.")],
) -> None:
    """Delete ports."""
    delete_each(client_of(ctx), PORT, ports)


def _security_group_ids(client: Client, values: Sequence[str]) -> list[str]:
    return [client.find_id(SECURITY_GROUP, value) for value in values]
