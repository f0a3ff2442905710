"""`cloudnet subnet ...`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import typer

from cloudnet.cli.client import NETWORK, SUBNET
from cloudnet.cli.common import client_of, delete_each, require_changes, set_if
from cloudnet.cli.errors import CliError
from cloudnet.cli.output import Column, ColumnsOption, Format, FormatOption, Item, print_list, print_show
from cloudnet.cli.parsing import ip_version_of, parse_allocation_pool, parse_gateway, parse_host_route

app = typer.Typer(help="Manage subnets.", no_args_is_help=True)


def _pools(subnet: Item) -> str:
    return ", ".join(f"{p.get('start')}-{p.get('end')}" for p in subnet.get("allocation_pools") or [])


def _routes(subnet: Item) -> str:
    routes = subnet.get("host_routes") or []
    return ", ".join(f"destination={r.get('destination')},gateway={r.get('nexthop')}" for r in routes)


COLUMNS = [
    Column("ID", "id"),
    Column("Name", "name"),
    Column("Network", "network_id"),
    Column("Subnet", "cidr"),
]
LONG_COLUMNS = [
    *COLUMNS,
    Column("Project", "project_id"),
    Column("DHCP", "enable_dhcp"),
    Column("Name Servers", "dns_nameservers"),
    Column("Allocation Pools", _pools),
    Column("Host Routes", _routes),
    Column("IP Version", "ip_version"),
    Column("Gateway", "gateway_ip"),
]

SubnetArg = Annotated[str, typer.Argument(metavar="SUBNET", help="Subnet name or id.")]
GatewayOption = Annotated[
    str | None, typer.Option(metavar="IP|none", help="Gateway address, or 'none' for no gateway.")
]
PoolOption = Annotated[
    list[str] | None,
    typer.Option(metavar="start=IP,end=IP", help="Allocation pool (repeatable)."),
]
DnsOption = Annotated[list[str] | None, typer.Option(metavar="IP", help="DNS server (repeatable).")]
RouteOption = Annotated[
    list[str] | None,
    typer.Option(metavar="destination=CIDR,gateway=IP", help="Host route (repeatable)."),
]
DhcpOption = Annotated[bool | None, typer.Option("--dhcp/--no-dhcp", help="Run DHCP on the subnet.")]


@app.command("create")
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Name of the new subnet.")],
    network: Annotated[str, typer.Option(help="Network name or id.")],
    subnet_range: Annotated[str, typer.Option(metavar="CIDR", help="Address range, e.g. 10.0.0.0/24.")],
    ip_version: Annotated[int | None, typer.Option(help="4 or 6 (default: from the range).")] = None,
    gateway: GatewayOption = None,
    allocation_pool: PoolOption = None,
    dns_nameserver: DnsOption = None,
    host_route: RouteOption = None,
    dhcp: DhcpOption = None,
    description: Annotated[str | None, typer.Option(help="Description.")] = None,
    fmt: FormatOption = Format.table,
    columns: ColumnsOption = None,
) -> None:
    """Create a subnet."""
    version = ip_version if ip_version is not None else ip_version_of(subnet_range)
    _check_ip_version(version)
    client = client_of(ctx)
    body: dict[str, object] = {
        "name": name,
        "network_id": client.find_id(NETWORK, network),
        "cidr": subnet_range,
        "ip_version": version,
    }
    if gateway is not None:
        body["gateway_ip"] = parse_gateway(gateway)
    set_if(body, "allocation_pools", [parse_allocation_pool(p) for p in allocation_pool or []] or None)
    set_if(body, "dns_nameservers", dns_nameserver or None)
    set_if(body, "host_routes", [parse_host_route(r) for r in host_route or []] or None)
    set_if(body, "enable_dhcp", dhcp)
    set_if(body, "description", description)
    print_show(client.create(SUBNET, body), fmt, columns)


@app.command("list")
def list_subnets(
    ctx: typer.Context,
    network: Annotated[str | None, typer.Option(help="Only subnets of this network (name or id).")] = None,
    ip_version: Annotated[int | None, typer.Option(help="Only IPv4 (4) or IPv6 (6) subnets.")] = None,
    name: Annotated[str | None, typer.Option(help="Only subnets with this name.")] = None,
    long: Annotated[bool, typer.Option("--long", help="More columns.")] = False,
    fmt: FormatOption = Format.table,
    columns: ColumnsOption = None,
) -> None:
    """List subnets."""
    client = client_of(ctx)
    params: list[tuple[str, str]] = []
    if network is not None:
        params.append(("network_id", client.find_id(NETWORK, network)))
    if ip_version is not None:
        _check_ip_version(ip_version)
        params.append(("ip_version", str(ip_version)))
    if name is not None:
        params.append(("name", name))
    print_list(client.list_all(SUBNET, params), LONG_COLUMNS if long else COLUMNS, fmt, columns)


@app.command("show")
def show(
    ctx: typer.Context, subnet: SubnetArg, fmt: FormatOption = Format.table, columns: ColumnsOption = None
) -> None:
    """Show one subnet."""
    print_show(client_of(ctx).find(SUBNET, subnet), fmt, columns)


@app.command("set")
def set_subnet(
    ctx: typer.Context,
    subnet: SubnetArg,
    name: Annotated[str | None, typer.Option(help="New name.")] = None,
    gateway: GatewayOption = None,
    dns_nameserver: DnsOption = None,
    no_dns_nameservers: Annotated[
        bool, typer.Option("--no-dns-nameservers", help="Clear DNS servers (before adding any given).")
    ] = False,
    allocation_pool: PoolOption = None,
    host_route: RouteOption = None,
    no_host_route: Annotated[
        bool, typer.Option("--no-host-route", help="Clear host routes (before adding any given).")
    ] = False,
    dhcp: DhcpOption = None,
    description: Annotated[str | None, typer.Option(help="New description.")] = None,
) -> None:
    """Change a subnet. DNS servers, pools and routes given are added to the existing ones."""
    body: dict[str, object] = {}
    set_if(body, "name", name)
    if gateway is not None:
        body["gateway_ip"] = parse_gateway(gateway)
    set_if(body, "enable_dhcp", dhcp)
    set_if(body, "description", description)
    pools = [parse_allocation_pool(p) for p in allocation_pool or []]
    routes = [parse_host_route(r) for r in host_route or []]
    client = client_of(ctx)
    current = client.find(SUBNET, subnet)
    if dns_nameserver or no_dns_nameservers:
        body["dns_nameservers"] = _extend(current, "dns_nameservers", dns_nameserver or [], no_dns_nameservers)
    if pools:
        body["allocation_pools"] = _extend(current, "allocation_pools", pools, False)
    if routes or no_host_route:
        body["host_routes"] = _extend(current, "host_routes", routes, no_host_route)
    require_changes(body, f"subnet {subnet}")
    client.update(SUBNET, str(current["id"]), body)


@app.command("delete")
def delete(
    ctx: typer.Context,
    subnets: Annotated[list[str], typer.Argument(metavar="SUBNET", help="Subnet names or ids.")],
) -> None:
    """Delete subnets."""
    delete_each(client_of(ctx), SUBNET, subnets)


def _extend(current: Item, key: str, added: Sequence[Any], clear: bool) -> list[Any]:
    existing = [] if clear else list(current.get(key) or [])
    return existing + [item for item in added if item not in existing]


def _check_ip_version(version: int) -> None:
    if version not in (4, 6):
        raise CliError(f"--ip-version {version}: expected 4 or 6")
