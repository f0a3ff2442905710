"""`cloudnet network ...`."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from cloudnet.cli import forwards
from cloudnet.cli.client import NETWORK
from cloudnet.cli.common import AzHintOption, client_of, delete_each, require_changes, set_if
from cloudnet.cli.errors import CliError
from cloudnet.cli.output import Column, ColumnsOption, Format, FormatOption, print_list, print_show, up_down
from cloudnet.cli.parsing import parse_assignments

app = typer.Typer(help="Manage networks.", no_args_is_help=True)
app.add_typer(forwards.app, name="forward")

COLUMNS = [Column("ID", "id"), Column("Name", "name"), Column("Subnets", "subnets")]
LONG_COLUMNS = [
    *COLUMNS,
    Column("Project", "project_id"),
    Column("Status", "status"),
    Column("State", lambda n: up_down(n.get("admin_state_up"))),
    Column("Shared", "shared"),
    Column("External", "router:external"),
    Column("MTU", "mtu"),
    Column("Network Type", "provider:network_type"),
    Column("Port Security", "port_security_enabled"),
    Column("Tags", "tags"),
]

NetworkArg = Annotated[str, typer.Argument(metavar="NETWORK", help="Network name or id.")]


class NetworkType(StrEnum):
    flat = "flat"
    vlan = "vlan"
    local = "local"


PortSecurityOption = Annotated[
    bool | None,
    typer.Option("--enable-port-security/--disable-port-security", help="Port security of the network's new ports."),
]
RouteOption = Annotated[
    list[str] | None,
    typer.Option(metavar="CIDR", help="External networks: a range routed to the uplink from outside (repeatable)."),
]


@app.command("create")
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Name of the new network.")],
    mtu: Annotated[int | None, typer.Option(min=68, help="MTU (default: the server's).")] = None,
    shared: Annotated[bool, typer.Option("--shared", help="Share with all projects.")] = False,
    external: Annotated[bool, typer.Option("--external", help="Usable as a router gateway.")] = False,
    disable: Annotated[bool, typer.Option("--disable", help="Create administratively down.")] = False,
    provider_network_type: Annotated[NetworkType | None, typer.Option(help="Segment type.")] = None,
    provider_physical_network: Annotated[
        str | None, typer.Option(metavar="PHYSNET", help="Physical network of a flat/vlan segment.")
    ] = None,
    provider_segment: Annotated[int | None, typer.Option(metavar="VLAN", help="VLAN id.")] = None,
    description: Annotated[str | None, typer.Option(help="Description.")] = None,
    tag: Annotated[list[str] | None, typer.Option(help="Tag (repeatable).")] = None,
    project: Annotated[str | None, typer.Option(help="Owning project id (admin only).")] = None,
    route: RouteOption = None,
    port_security: PortSecurityOption = None,
    availability_zone_hint: AzHintOption = None,
    fmt: FormatOption = Format.table,
    columns: ColumnsOption = None,
) -> None:
    """Create a network."""
    body: dict[str, object] = {"name": name}
    set_if(body, "mtu", mtu)
    set_if(body, "shared", True if shared else None)
    set_if(body, "router:external", True if external else None)
    set_if(body, "admin_state_up", False if disable else None)
    set_if(body, "provider:network_type", provider_network_type.value if provider_network_type else None)
    set_if(body, "provider:physical_network", provider_physical_network)
    set_if(body, "provider:segmentation_id", provider_segment)
    set_if(body, "description", description)
    set_if(body, "tags", tag or None)
    set_if(body, "cloudnet:routes", list(route) if route else None)
    set_if(body, "project_id", project)
    set_if(body, "port_security_enabled", port_security)
    set_if(body, "availability_zone_hints", availability_zone_hint or None)
    print_show(client_of(ctx).create(NETWORK, body), fmt, columns)


@app.command("list")
def list_networks(
    ctx: typer.Context,
    external: Annotated[
        bool | None, typer.Option("--external/--internal", help="Only external (or internal) networks.")
    ] = None,
    name: Annotated[str | None, typer.Option(help="Only networks with this name.")] = None,
    long: Annotated[bool, typer.Option("--long", help="More columns.")] = False,
    fmt: FormatOption = Format.table,
    columns: ColumnsOption = None,
) -> None:
    """List networks."""
    params: list[tuple[str, str]] = []
    if external is not None:
        params.append(("router:external", str(external).lower()))
    if name is not None:
        params.append(("name", name))
    networks = client_of(ctx).list_all(NETWORK, params)
    print_list(networks, LONG_COLUMNS if long else COLUMNS, fmt, columns)


@app.command("show")
def show(
    ctx: typer.Context, network: NetworkArg, fmt: FormatOption = Format.table, columns: ColumnsOption = None
) -> None:
    """Show one network."""
    print_show(client_of(ctx).find(NETWORK, network), fmt, columns)


@app.command("set")
def set_network(
    ctx: typer.Context,
    network: NetworkArg,
    pairs: Annotated[
        list[str] | None,
        typer.Argument(metavar="KEY=VALUE", help="Entries of the network's config map."),
    ] = None,
    name: Annotated[str | None, typer.Option(help="New name.")] = None,
    mtu: Annotated[int | None, typer.Option(min=68, help="New MTU.")] = None,
    description: Annotated[str | None, typer.Option(help="New description.")] = None,
    enable: Annotated[bool | None, typer.Option("--enable/--disable", help="Administrative state.")] = None,
    external: Annotated[
        bool | None, typer.Option("--external/--internal", help="Usable as a router gateway or not.")
    ] = None,
    shared: Annotated[bool | None, typer.Option("--shared/--no-share", help="Share with all projects.")] = None,
    config: Annotated[
        list[str] | None,
        typer.Option("--set", metavar="KEY=VALUE", help="Config map entry (repeatable); same as positional."),
    ] = None,
    route: RouteOption = None,
    no_route: Annotated[bool, typer.Option("--no-route", help="Clear cloudnet:routes.")] = False,
    port_security: PortSecurityOption = None,
) -> None:
    """Change a network; KEY=VALUE pairs (e.g. ipv4.nat.address=IP) are merged into its config map.

    The server merges: keys not given keep their values, and KEY= (empty) removes KEY. LXD's
    `set NETWORK KEY VALUE` form is accepted too.
    """
    body: dict[str, object] = {}
    set_if(body, "name", name)
    set_if(body, "mtu", mtu)
    set_if(body, "description", description)
    set_if(body, "admin_state_up", enable)
    set_if(body, "router:external", external)
    set_if(body, "shared", shared)
    set_if(body, "port_security_enabled", port_security)
    positional = pairs or []
    if len(positional) == 2 and "=" not in positional[0]:
        positional = [f"{positional[0]}={positional[1]}"]  # `set NETWORK KEY VALUE`
    entries = parse_assignments([*positional, *(config or [])])
    set_if(body, "config", entries or None)
    if route or no_route:
        body["cloudnet:routes"] = list(route or [])
    require_changes(body, f"network {network}")
    client = client_of(ctx)
    client.update(NETWORK, client.find_id(NETWORK, network), body)


@app.command("unset")
def unset_network(
    ctx: typer.Context,
    network: NetworkArg,
    keys: Annotated[list[str], typer.Argument(metavar="KEY...", help="Config keys to remove.")],
) -> None:
    """Remove keys from a network's config map (e.g. ipv4.nat.address)."""
    bad = [key for key in keys if not key.strip() or "=" in key]
    if bad:
        raise CliError(f"KEY '{bad[0]}': expected a config key without '='")
    client = client_of(ctx)
    client.update(NETWORK, client.find_id(NETWORK, network), {"config": dict.fromkeys(keys, "")})


@app.command("delete")
def delete(
    ctx: typer.Context,
    networks: Annotated[list[str], typer.Argument(metavar="NETWORK", help="Network names or ids.")],
) -> None:
    """Delete networks."""
    delete_each(client_of(ctx), NETWORK, networks)
