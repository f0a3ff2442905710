"""`cloudnet host ...`: registered agents and their health; deleting decommissioned ones."""

from __future__ import annotations

from typing import Annotated

import typer

from cloudnet.cli.client import HOST
from cloudnet.cli.common import client_of, delete_each
from cloudnet.cli.output import Column, Format, FormatOption, print_list, print_show

app = typer.Typer(help="Show hosts (agents), delete decommissioned ones.", no_args_is_help=True)
COLUMNS = [
    Column("Name", "name"),
    Column("Alive", lambda h: "yes" if h.get("alive") else "no"),
    Column("Heartbeat", "heartbeat_at"),
    Column("Agent Version", "agent_version"),
]


@app.command("list")
def list_hosts(ctx: typer.Context, fmt: FormatOption = Format.table) -> None:
    """List hosts."""
    print_list(client_of(ctx).list_all(HOST), COLUMNS, fmt)


@app.command("show")
def show(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Host name.")],
    fmt: FormatOption = Format.table,
) -> None:
    """Show one host."""
    print_show(client_of(ctx).show(HOST, name), fmt)


@app.command("delete")
def delete(
    ctx: typer.Context,
    names: Annotated[list[str], typer.Argument(metavar="NAME", help="Host names.")],
) -> None:
    """Delete hosts whose agent has stopped, with their port pools and ready pool ports."""
    # A host's name is its id: no lookup by name.
    delete_each(client_of(ctx), HOST, names, by_name=False)
