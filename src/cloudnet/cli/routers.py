"""`cloudnet router ...`, including `router add|remove subnet|port`."""

from __future__ import annotations

from typing import Annotated

import typer

from cloudnet.cli.client import NETWORK, PORT, ROUTER, SUBNET, Client, Kind
from cloudnet.cli.common import AzHintOption, client_of, delete_each, require_changes, resolve_fixed_ips, set_if
from cloudnet.cli.errors import CliError
from cloudnet.cli.output import Column, ColumnsOption, Format, FormatOption, print_list, print_show, up_down

app = typer.Typer(help="Manage routers.", no_args_is_help=True)
add_app = typer.Typer(help="Attach a subnet or port to a router.", no_args_is_help=True)
remove_app = typer.Typer(help="Detach a subnet or port from a router.", no_args_is_help=True)
app.add_typer(add_app, name="add")
app.add_typer(remove_app, name="remove")

COLUMNS = [
    Column("ID", "id"),
    Column("Name", "name"),
    Column("Status", "status"),
    Column("State", lambda r: up_down(r.get("admin_state_up"))),
    Column("Project", "project_id"),
]
LONG_COLUMNS = [
    *COLUMNS,
    Column("External Gateway Info", "external_gateway_info"),
    Column("Description", "description"),
    Column("Tags", "tags"),
]

RouterArg = Annotated[str, typer.Argument(metavar="ROUTER", help="Router name or id.")]
SubnetArg = Annotated[str, typer.Argument(metavar="SUBNET", help="Subnet name or id.")]
PortArg = Annotated[str, typer.Argument(metavar="PORT", help="Port name or id.")]


@app.command("create")
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Name of the new router.")],
    disable: Annotated[bool, typer.Option("--disable", help="Create administratively down.")] = False,
    description: Annotated[str | None, typer.Option(help="Description.")] = None,
    availability_zone_hint: AzHintOption = None,
    fmt: FormatOption = Format.table,
    columns: ColumnsOption = None,
) -> None:
    """Create a router."""
    body: dict[str, object] = {"name": name}
    set_if(body, "admin_state_up", False if disable else None)
    set_if(body, "description", description)
    set_if(body, "availability_zone_hints", availability_zone_hint or None)
    print_show(client_of(ctx).create(ROUTER, body), fmt, columns)


@app.command("list")
def list_routers(
    ctx: typer.Context,
    long: Annotated[bool, typer.Option("--long", help="More columns.")] = False,
    fmt: FormatOption = Format.table,
    columns: ColumnsOption = None,
) -> None:
    """List routers."""
    print_list(client_of(ctx).list_all(ROUTER), LONG_COLUMNS if long else COLUMNS, fmt, columns)


@app.command("show")
def show(
    ctx: typer.Context, router: RouterArg, fmt: FormatOption = Format.table, columns: ColumnsOption = None
) -> None:
    """Show one router."""
    print_show(client_of(ctx).find(ROUTER, router), fmt, columns)


@app.command("set")
def set_router(
    ctx: typer.Context,
    router: RouterArg,
    name: Annotated[str | None, typer.Option(help="New name.")] = None,
    description: Annotated[str | None, typer.Option(help="New description.")] = None,
    enable: Annotated[bool | None, typer.Option("--enable/--disable", help="Administrative state.")] = None,
    external_gateway: Annotated[
        str | None, typer.Option(metavar="NETWORK", help="External network for the gateway (name or id).")
    ] = None,
    fixed_ip: Annotated[
        list[str] | None,
        typer.Option(metavar="subnet=SUBNET,ip-address=IP", help="Gateway address (repeatable)."),
    ] = None,
    snat: Annotated[bool | None, typer.Option("--enable-snat/--disable-snat", help="SNAT on the gateway.")] = None,
    no_external_gateway: Annotated[
        bool, typer.Option("--no-external-gateway", help="Remove the external gateway.")
    ] = False,
) -> None:
    """Change a router, including its external gateway."""
    if no_external_gateway and (external_gateway or fixed_ip or snat is not None):
        raise CliError("--no-external-gateway cannot be combined with other gateway options")
    if (fixed_ip or snat is not None) and not external_gateway:
        raise CliError("--fixed-ip and --enable-snat/--disable-snat need --external-gateway")
    client = client_of(ctx)
    body: dict[str, object] = {}
    set_if(body, "name", name)
    set_if(body, "description", description)
    set_if(body, "admin_state_up", enable)
    if no_external_gateway:
        body["external_gateway_info"] = {}
    elif external_gateway:
        body["external_gateway_info"] = _gateway_info(client, external_gateway, fixed_ip or [], snat)
    require_changes(body, f"router {router}")
    client.update(ROUTER, client.find_id(ROUTER, router), body)


@app.command("delete")
def delete(
    ctx: typer.Context,
    routers: Annotated[list[str], typer.Argument(metavar="ROUTER", help="Router names or ids.")],
) -> None:
    """Delete routers."""
    delete_each(client_of(ctx), ROUTER, routers)


@add_app.command("subnet")
def add_subnet(ctx: typer.Context, router: RouterArg, subnet: SubnetArg) -> None:
    """Give the router an interface on a subnet (at the subnet's gateway address)."""
    _interface(client_of(ctx), "add_router_interface", router, SUBNET, subnet)


@add_app.command("port")
def add_port(ctx: typer.Context, router: RouterArg, port: PortArg) -> None:
    """Give the router an interface through an existing port."""
    _interface(client_of(ctx), "add_router_interface", router, PORT, port)


@remove_app.command("subnet")
def remove_subnet(ctx: typer.Context, router: RouterArg, subnet: SubnetArg) -> None:
    """Remove the router's interface on a subnet."""
    _interface(client_of(ctx), "remove_router_interface", router, SUBNET, subnet)


@remove_app.command("port")
def remove_port(ctx: typer.Context, router: RouterArg, port: PortArg) -> None:
    """Remove the router's interface through a port."""
    _interface(client_of(ctx), "remove_router_interface", router, PORT, port)


def _interface(client: Client, action: str, router: str, kind: Kind, value: str) -> None:
    router_id = client.find_id(ROUTER, router)
    target_id = client.find_id(kind, value)
    client.put(f"{ROUTER.collection}/{router_id}/{action}", {f"{kind.key}_id": target_id})


def _gateway_info(client: Client, network: str, fixed_ips: list[str], snat: bool | None) -> dict[str, object]:
    network_id = client.find_id(NETWORK, network)
    info: dict[str, object] = {"network_id": network_id}
    set_if(info, "enable_snat", snat)
    if fixed_ips:
        info["external_fixed_ips"] = resolve_fixed_ips(client, network_id, fixed_ips)
    return info
