"""`cloudnet host ...`: registered agents and their health; deleting decommissioned ones."""

from __future__ import annotations

import time
from typing import Annotated
from urllib.parse import quote

import typer

from cloudnet.cli.client import HOST
from cloudnet.cli.common import client_of, delete_each
from cloudnet.cli.errors import CliError
from cloudnet.cli.output import Column, ColumnsOption, Format, FormatOption, print_list, print_show

app = typer.Typer(help="Show hosts (agents), check them for drift, join new ones with a token, remove or delete "
                  "decommissioned ones.", no_args_is_help=True)  # fmt: skip
COLUMNS = [
    Column("Name", "name"),
    Column("Alive", lambda h: "yes" if h.get("alive") else "no"),
    Column("Heartbeat", "heartbeat_at"),
    Column("Availability Zone", "availability_zone"),
    Column("Agent Version", "agent_version"),
]


@app.command("list")
def list_hosts(ctx: typer.Context, fmt: FormatOption = Format.table, columns: ColumnsOption = None) -> None:
    """List hosts."""
    print_list(client_of(ctx).list_all(HOST), COLUMNS, fmt, columns)


@app.command("show")
def show(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Host name.")],
    fmt: FormatOption = Format.table,
    columns: ColumnsOption = None,
) -> None:
    """Show one host."""
    print_show(client_of(ctx).show(HOST, name), fmt, columns)


@app.command("delete")
def delete(
    ctx: typer.Context,
    names: Annotated[list[str], typer.Argument(metavar="NAME", help="Host names.")],
) -> None:
    """Delete hosts whose agent has stopped, with their port pools and ready pool ports."""
    # A host's name is its id: no lookup by name.
    delete_each(client_of(ctx), HOST, names, by_name=False)


@app.command("join-token")
def join_token(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The name of the host that will join (its certificate's name).")],
    ttl: Annotated[int, typer.Option(min=10, metavar="S", help="Seconds the token is valid.")] = 900,
    fmt: FormatOption = Format.table,
    columns: ColumnsOption = None,
) -> None:
    """Issue a single-use join token for host NAME: on that host, `cloudnet agent --join URL TOKEN` (the API over
    TLS) gets its certificate and everything else its agent needs."""
    item = client_of(ctx).post(f"/hosts/{quote(name, safe='')}/join-tokens", {"join_token": {"ttl": ttl}})
    token = item["join_token"]
    if fmt is Format.table and not columns:
        typer.echo(token["token"])
        typer.echo(f"(for host {token['host']}, single use, until {token['expires_at']})", err=True)
        return
    print_show(token, fmt, columns)


@app.command("remove")
def remove(
    ctx: typer.Context,
    names: Annotated[list[str], typer.Argument(metavar="NAME", help="Host names.")],
) -> None:
    """Revoke the hosts' certificates (refused on every request from then on) and their unused join tokens, and
    delete them as `host delete` does, alive or not."""
    client = client_of(ctx)
    for name in names:
        host = client.post(f"/hosts/{quote(name, safe='')}/remove", {})["host"]
        typer.echo(f"Removed host {name}: {host['certificates_revoked']} certificate(s) revoked")


CHECK_COLUMNS = [Column("Object", "object"), Column("Difference", "difference")]


@app.command("check")
def check(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Host name.")],
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the agent's answer.")] = 120.0,
    fmt: FormatOption = Format.table,
    columns: ColumnsOption = None,
) -> None:
    """Have the host's agent compare its kernel state (nftables maps and rules, routes, devices, namespaces) with
    the desired state and repair every difference; prints what differed. Exits 1 when something did."""
    client = client_of(ctx)
    asked = client.post(f"/hosts/{quote(name, safe='')}/check", {})["check"]
    deadline = time.monotonic() + timeout
    while True:  # the agent answers in its report, with the revision it compared against
        done = (client.show(HOST, name).get("report") or {}).get("check") or {}
        if int(done.get("revision", -1)) >= int(asked["revision"]):
            break
        if time.monotonic() > deadline:
            raise CliError(f"host {name} did not answer the check within {timeout:g} s (is its agent running?)")
        time.sleep(0.2)
    differences = done.get("differences") or []
    if fmt is Format.table:
        typer.echo(f"{done.get('count', len(differences))} difference(s) found and repaired at {done.get('at')}")
    if differences or fmt is not Format.table:
        print_list(differences, CHECK_COLUMNS, fmt, columns)
    if differences:
        raise typer.Exit(1)
