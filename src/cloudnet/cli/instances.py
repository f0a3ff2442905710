"""`cloudnet instance ...`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from cloudnet.cli.client import INSTANCE, NETWORK, PORT, Client
from cloudnet.cli.common import client_of, delete_each
from cloudnet.cli.errors import CliError
from cloudnet.cli.output import Column, Format, FormatOption, print_list, print_show
from cloudnet.cli.parsing import parse_assignments, parse_pairs

app = typer.Typer(help="Manage instances (what ports are plugged into and metadata describes).", no_args_is_help=True)


def _addresses(instance: dict[str, Any]) -> list[str]:
    return [f"{n['network_id']}={','.join(f['ip_address'] for f in n['fixed_ips'])}" for n in instance.get("nets", [])]


COLUMNS = [
    Column("ID", "id"),
    Column("Name", "name"),
    Column("Host", "host"),
    Column("Status", "status"),
    Column("Networks", _addresses),
]
InstanceArg = Annotated[str, typer.Argument(metavar="INSTANCE", help="Instance name or id.")]


def _net(client: Client, text: str) -> dict[str, Any]:
    pairs = parse_pairs(text, option="--nets", allowed=("port", "network", "v4-fixed-ip", "v6-fixed-ip"))
    if ("port" in pairs) == ("network" in pairs):
        raise CliError(f"--nets '{text}': give exactly one of port=... or network=...")
    if "port" in pairs:
        return {"port": client.find_id(PORT, pairs["port"])}
    net: dict[str, Any] = {"network": client.find_id(NETWORK, pairs["network"])}
    for key in ("v4-fixed-ip", "v6-fixed-ip"):
        if pairs.get(key):
            net[key] = pairs[key]
    return net


@app.command("create")
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Name of the new instance.")],
    netns: Annotated[str, typer.Option(help="The instance's network namespace: a name or /proc/PID/ns/net.")],
    nets: Annotated[
        list[str] | None,
        typer.Option(metavar="port=ID | network=NAME[,v4-fixed-ip=IP]", help="A NIC, in order (repeatable)."),
    ] = None,
    host: Annotated[str | None, typer.Option(help="Host that runs it (default: the only registered host).")] = None,
    hostname: Annotated[str | None, typer.Option(help="Hostname (default: the name).")] = None,
    user_data: Annotated[Path | None, typer.Option(help="File with user data.")] = None,
    property_: Annotated[
        list[str] | None, typer.Option("--property", metavar="KEY=VALUE", help="Metadata item (repeatable).")
    ] = None,
    ssh_key: Annotated[
        list[str] | None, typer.Option(metavar="NAME=PUBLIC_KEY_FILE", help="SSH public key (repeatable).")
    ] = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Create an instance and plug its ports."""
    client = client_of(ctx)
    body: dict[str, Any] = {"name": name, "netns": netns, "nets": [_net(client, n) for n in nets or []]}
    if host:
        body["host"] = host
    if hostname:
        body["hostname"] = hostname
    if user_data is not None:
        body["user_data"] = _read(user_data)
    if property_:
        body["metadata"] = parse_assignments(property_, option="--property")
    if ssh_key:
        body["ssh_keys"] = [{"name": k, "key": _read(Path(v)).strip()}
                            for k, v in parse_assignments(ssh_key, option="--ssh-key").items()]  # fmt: skip
    print_show(client.create(INSTANCE, body), fmt)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None


@app.command("list")
def list_instances(
    ctx: typer.Context,
    host: Annotated[str | None, typer.Option(help="Only instances on this host.")] = None,
    fmt: FormatOption = Format.table,
) -> None:
    """List instances."""
    params = [("host", host)] if host else []
    print_list(client_of(ctx).list_all(INSTANCE, params), COLUMNS, fmt)


@app.command("show")
def show(ctx: typer.Context, instance: InstanceArg, fmt: FormatOption = Format.table) -> None:
    """Show one instance."""
    print_show(client_of(ctx).find(INSTANCE, instance), fmt)


@app.command("delete")
def delete(
    ctx: typer.Context,
    instances: Annotated[list[str], typer.Argument(metavar="INSTANCE", help="Instance names or ids.")],
) -> None:
    """Delete instances: ports they created go, ports they were given are kept and unbound."""
    delete_each(client_of(ctx), INSTANCE, instances)
