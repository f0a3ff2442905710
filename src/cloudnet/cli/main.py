"""The `cloudnet` command: global options, the resource command groups, and `serve`.

In-process use (tests): `CliRunner().invoke(app, ["--url", url, "network", "list", "-f", "json"])`,
or with `env={"CLOUDNET_URL": url}`. To skip the network entirely, pass an `httpx.Client` as
`obj=` (e.g. Starlette's `TestClient(api)`); requests then go through it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import click
import httpx
import typer
from typer.core import TyperGroup, TyperOption

from cloudnet.cli import (
    agent_command,
    daemons,
    hosts,
    instances,
    monitor,
    networks,
    ovn_cluster,
    pools,
    ports,
    routers,
    security_groups,
    subnets,
    users,
)
from cloudnet.cli.client import DEFAULT_TOKEN, DEFAULT_URL, Client
from cloudnet.cli.errors import CliError
from cloudnet.docker import command as docker_command

_display_type = TyperOption.display_type_rich


def _flag_display_type(self: TyperOption, ctx: click.Context) -> str | None:
    # typer's rich help gives a flag the type `<bool>`, as if it took a value; its plain help shows none.
    return None if self.is_flag or self.count else _display_type(self, ctx)


TyperOption.display_type_rich = _flag_display_type  # type: ignore[method-assign]


class CloudnetGroup(TyperGroup):
    """Reports a `CliError` raised by any subcommand as one `Error: ...` line, exit status 1."""

    def invoke(self, ctx: typer.Context) -> Any:  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except CliError as exc:
            typer.echo(f"Error: {exc}", err=True)
            raise typer.Exit(1) from None


app = typer.Typer(
    name="cloudnet",
    cls=CloudnetGroup,
    help="cloudnet: Neutron-compatible networking control plane.",
    no_args_is_help=True,
    add_completion=False,
    # The token is a local in the traceback frames; never print locals.
    pretty_exceptions_show_locals=False,
)
app.add_typer(networks.app, name="network")
app.add_typer(subnets.app, name="subnet")
app.add_typer(ports.app, name="port")
app.add_typer(routers.app, name="router")
app.add_typer(security_groups.app, name="security-group")
app.add_typer(instances.app, name="instance")
app.add_typer(hosts.app, name="host")
app.add_typer(pools.app, name="pool")
app.add_typer(ovn_cluster.app, name="ovn")
app.add_typer(users.user_app, name="user")
app.add_typer(users.token_app, name="token")


@app.callback()
def main(
    ctx: typer.Context,
    url: Annotated[str, typer.Option(envvar="CLOUDNET_URL", help="cloudnet API endpoint.")] = DEFAULT_URL,
    token: Annotated[str, typer.Option(envvar="CLOUDNET_TOKEN", help="Token sent as X-Auth-Token.")] = DEFAULT_TOKEN,
    cacert: Annotated[
        Path | None,
        typer.Option(
            envvar="CLOUDNET_CACERT",
            help="CA certificate an https API must chain to (the cloud's CA: <state-dir>/pki/ca.crt on the server).",
        ),
    ] = None,
) -> None:
    http = ctx.obj if isinstance(ctx.obj, httpx.Client) else None
    client = Client(url, token, http=http, cacert=cacert)
    ctx.obj = client
    ctx.call_on_close(client.close)


daemons.register(app)
agent_command.register(app)
monitor.register(app)
docker_command.register(app)
