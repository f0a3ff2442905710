"""`cloudnet pool ...`: port pools (ready ports per host, project and network) and their sizing."""

from __future__ import annotations

from typing import Annotated

import typer

from cloudnet.cli.client import Kind
from cloudnet.cli.common import client_of, require_changes, set_if
from cloudnet.cli.output import Column, ColumnsOption, Format, FormatOption, print_list, print_show

POOL = Kind("port-pools", "port_pool")

app = typer.Typer(help="Show and size port pools.", no_args_is_help=True)
COLUMNS = [
    Column("ID", "id"),
    Column("Host", "host"),
    Column("Project", "project_id"),
    Column("Network", "network_id"),
    Column("Ready", "ready"),
    Column("In Use", "in_use"),
    Column("Min", "min"),
    Column("Max", "max"),
    Column("Last Refill", "last_refill"),
]
LONG_COLUMNS = [
    *COLUMNS,
    Column("Batch", "batch"),
    Column("TTL", "ttl"),
    Column("Update Interval", "update_interval"),
    Column("Security Groups", "security_groups"),
]


@app.command("list")
def list_pools(
    ctx: typer.Context,
    host: Annotated[str | None, typer.Option(help="Only pools of this host.")] = None,
    network: Annotated[str | None, typer.Option(help="Only pools of this network (id).")] = None,
    long: Annotated[bool, typer.Option("--long", help="More columns.")] = False,
    fmt: FormatOption = Format.table,
    columns: ColumnsOption = None,
) -> None:
    """List port pools."""
    params = [("host", host)] if host else []
    if network:
        params.append(("network_id", network))
    print_list(client_of(ctx).list_all(POOL, params), LONG_COLUMNS if long else COLUMNS, fmt, columns)


@app.command("show")
def show(
    ctx: typer.Context,
    pool: Annotated[str, typer.Argument(help="Pool id.")],
    fmt: FormatOption = Format.table,
    columns: ColumnsOption = None,
) -> None:
    """Show one port pool."""
    print_show(client_of(ctx).show(POOL, pool), fmt, columns)


@app.command("set")
def set_pool(
    ctx: typer.Context,
    pool: Annotated[str, typer.Argument(help="Pool id.")],
    min_: Annotated[int | None, typer.Option("--min", min=0, help="Ready ports to keep.")] = None,
    max_: Annotated[int | None, typer.Option("--max", min=0, help="Ready ports at most (0: no cap).")] = None,
    batch: Annotated[int | None, typer.Option(min=1, help="Ports per bulk refill.")] = None,
    ttl: Annotated[int | None, typer.Option(min=0, help="Idle seconds before eviction above min (0: off).")] = None,
    update_interval: Annotated[int | None, typer.Option(min=1, help="Seconds between maintenance passes.")] = None,
    fmt: FormatOption = Format.table,
    columns: ColumnsOption = None,
) -> None:
    """Change a pool's sizing (each value overrides the server default for this pool)."""
    body: dict[str, object] = {}
    set_if(body, "min", min_)
    set_if(body, "max", max_)
    set_if(body, "batch", batch)
    set_if(body, "ttl", ttl)
    set_if(body, "update_interval", update_interval)
    require_changes(body, f"port pool {pool}")
    print_show(client_of(ctx).update(POOL, pool, body), fmt, columns)
