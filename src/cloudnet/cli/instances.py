"""`cloudnet instance ...`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import typer

from cloudnet.cli import qemu_args
from cloudnet.cli.client import INSTANCE, NETWORK, PORT, Client
from cloudnet.cli.common import client_of, delete_each
from cloudnet.cli.errors import CliError
from cloudnet.cli.output import Column, ColumnsOption, Format, FormatOption, print_list, print_show
from cloudnet.cli.parsing import parse_assignments, parse_pairs

app = typer.Typer(help="Manage instances (what ports are plugged into and metadata describes).", no_args_is_help=True)
app.command("qemu-args")(qemu_args.qemu_args)


def _ips(nic: dict[str, Any]) -> str:
    return ",".join(f["ip_address"] for f in nic.get("fixed_ips") or [])


def _addresses(instance: dict[str, Any]) -> str:
    """One line per NIC: several NICs' addresses on one line made one unreadable cell."""
    return "\n".join(f"{n['network_id']}={_ips(n)}" for n in instance.get("nets") or [])


def _nic_lines(nets: Any) -> Any:
    """`nets` in a show table: one line per NIC with what a user looks for, not every key of it (`-f json` has
    those); the key=value dump of a NIC was a 300-character line."""
    if not isinstance(nets, list):
        return nets
    lines = []
    for nic in nets:
        failure = f" ({nic['binding_failure']})" if nic.get("binding_failure") else ""
        lines.append(
            f"{nic.get('ifname')}: {_ips(nic)} {nic.get('status')}{failure} network={nic.get('network_id')} "
            f"port={nic.get('port_id')} mac={nic.get('mac_address')}"
        )
    return "\n".join(lines)


VIEWS = {"nets": _nic_lines}


COLUMNS = [
    Column("ID", "id"),
    Column("Name", "name"),
    Column("Host", "host"),
    Column("Status", "status"),
    Column("Networks", _addresses),
]
InstanceArg = Annotated[str, typer.Argument(metavar="INSTANCE", help="Instance name or id.")]


def _net(client: Client, text: str) -> dict[str, Any]:
    pairs = parse_pairs(text, option="--nets", allowed=("port", "network", "v4-fixed-ip", "v6-fixed-ip", "ifname"))
    if ("port" in pairs) == ("network" in pairs):
        raise CliError(f"--nets '{text}': give exactly one of port=... or network=...")
    if "port" in pairs:
        net: dict[str, Any] = {"port": client.find_id(PORT, pairs["port"])}
    else:
        net = {"network": client.find_id(NETWORK, pairs["network"])}
    for key in ("v4-fixed-ip", "v6-fixed-ip", "ifname"):
        if pairs.get(key):
            net[key] = pairs[key]
    return net


@app.command("create")
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Name of the new instance.")],
    nets: Annotated[
        list[str] | None,
        typer.Option(
            metavar="port=ID | network=NAME[,v4-fixed-ip=IP][,ifname=NAME]",
            help="A NIC, in order (repeatable); ifname: its name inside (default eth<position>).",
        ),
    ] = None,
    netns: Annotated[
        str | None,
        typer.Option(
            help="The instance's network namespace: a name or /proc/PID/ns/net (default: cloudnet provides one, "
            "a parked pool device's when there is one; the answer names it)."
        ),
    ] = None,
    vm: Annotated[
        bool,
        typer.Option("--vm", help="A virtual machine: a tap device per NIC for its VMM (see `instance qemu-args`)."),
    ] = False,
    host: Annotated[str | None, typer.Option(help="Host that runs it (default: the only registered host).")] = None,
    hostname: Annotated[str | None, typer.Option(help="Hostname (default: the name).")] = None,
    user_data: Annotated[Path | None, typer.Option(help="File with user data.")] = None,
    property_: Annotated[
        list[str] | None, typer.Option("--property", metavar="KEY=VALUE", help="Metadata item (repeatable).")
    ] = None,
    ssh_key: Annotated[
        list[str] | None, typer.Option(metavar="NAME=PUBLIC_KEY_FILE", help="SSH public key (repeatable).")
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait until its host has plugged it (ACTIVE); fail with the agent's reason.")
    ] = False,
    fmt: FormatOption = Format.table,
    columns: ColumnsOption = None,
) -> None:
    """Create an instance and plug its ports."""
    client = client_of(ctx)
    body: dict[str, Any] = {"name": name, "nets": [_net(client, n) for n in nets or []]}
    if netns:
        body["netns"] = netns
    if vm:
        body["kind"] = "vm"
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
    created = client.create(INSTANCE, body)
    print_show(_wait_active(client, created) if wait else created, fmt, columns, VIEWS)


WAIT_LIMIT = 120.0  # seconds: a host that takes longer is broken, and the user should hear of it
WAIT_STEP = 10.0  # seconds one request waits for the agent (GET ?wait=S), within the client's time limit


def _wait_active(client: Client, instance: dict[str, Any]) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_LIMIT
    while instance["status"] != "ACTIVE":
        if instance["status"] == "ERROR":
            raise CliError(f"instance {instance['name']} failed: {instance.get('status_reason') or 'no reason given'}")
        if instance.get("status_reason"):  # the agent said why it cannot plug it (a namespace that is not there)
            raise CliError(f"instance {instance['name']} is not plugged: {instance['status_reason']} (it is, once "
                           "that is fixed)")  # fmt: skip
        if time.monotonic() > deadline:
            raise CliError(f"instance {instance['name']} is still {instance['status']} after {WAIT_LIMIT:.0f} s "
                           f"(is the agent of host {instance['host']} running?)")  # fmt: skip
        instance = client.show_settled(INSTANCE, instance["id"], min(deadline - time.monotonic(), WAIT_STEP), 0.1)
    return instance


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
    columns: ColumnsOption = None,
) -> None:
    """List instances."""
    params = [("host", host)] if host else []
    print_list(client_of(ctx).list_all(INSTANCE, params), COLUMNS, fmt, columns)


@app.command("show")
def show(
    ctx: typer.Context, instance: InstanceArg, fmt: FormatOption = Format.table, columns: ColumnsOption = None
) -> None:
    """Show one instance."""
    print_show(client_of(ctx).find(INSTANCE, instance), fmt, columns, VIEWS)


@app.command("delete")
def delete(
    ctx: typer.Context,
    instances: Annotated[list[str], typer.Argument(metavar="INSTANCE", help="Instance names or ids.")],
) -> None:
    """Delete instances: ports they created go, ports they were given are kept and unbound."""
    delete_each(client_of(ctx), INSTANCE, instances)


@app.command("config-drive")
def config_drive(
    ctx: typer.Context,
    instance: InstanceArg,
    output: Annotated[Path, typer.Option("--output", "-o", metavar="FILE", help="Where to write the image.")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite FILE if it exists.")] = False,
) -> None:
    """Write the instance's config drive: an ISO 9660 image labelled config-2 holding what its guest reads from the
    metadata service (the OpenStack and EC2 trees), for cloud-init's ConfigDrive datasource (a VM's CD-ROM)."""
    exists = CliError(f"{output} exists: give --force to overwrite it")
    if output.exists() and not force:  # before asking: a refused overwrite costs the server nothing
        raise exists
    client = client_of(ctx)
    instance_id = client.find_id(INSTANCE, instance)
    image = client.download(f"instances/{quote(instance_id, safe='')}/config-drive", "application/x-iso9660-image")
    try:
        with output.open("wb" if force else "xb") as f:  # x: a file made meanwhile is not overwritten either
            f.write(image)
    except FileExistsError:
        raise exists from None
    except OSError as exc:
        raise CliError(f"cannot write {output}: {exc.strerror}") from None
    typer.echo(f"Wrote the config drive of instance {instance} to {output} ({len(image)} bytes)")


# -- cloudnet instance metadata ... ---------------------------------------------------------------

metadata_app = typer.Typer(
    help="Read and change an instance's metadata keys (what its guest reads over its metadata socket).",
    no_args_is_help=True,
)
app.add_typer(metadata_app, name="metadata")
METADATA_COLUMNS = [Column("Key", "key"), Column("Value", "value"), Column("Store", "store")]
KeyArg = Annotated[str, typer.Argument(metavar="KEY", help="Metadata key, e.g. user-script or com.example:role.")]
InternalOption = Annotated[
    bool, typer.Option("--internal", help="Internal metadata (admins): e.g. keys of an internal namespace.")
]


def _metadata_path(instance_id: str, key: str | None = None) -> str:
    path = f"instances/{quote(instance_id, safe='')}/metadata"
    if key is None:
        return path
    segment = quote(key, safe="")  # one path segment whatever the key holds; "." and ".." are dot segments
    return f"{path}/{segment.replace('.', '%2E') if segment in ('.', '..') else segment}"


def _items(body: Any) -> list[dict[str, Any]]:
    if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict):
        raise CliError("cloudnet answered without a 'metadata' object")
    internal = body.get("internal_metadata") or {}
    return [{"key": k, "value": v, "store": "customer"} for k, v in sorted(body["metadata"].items())] + [
        {"key": k, "value": v, "store": "internal"} for k, v in sorted(internal.items())
    ]


@metadata_app.command("list")
def metadata_list(
    ctx: typer.Context, instance: InstanceArg, fmt: FormatOption = Format.table, columns: ColumnsOption = None
) -> None:
    """List an instance's metadata: customer keys, and the internal ones you may see."""
    client = client_of(ctx)
    print_list(_items(client.get(_metadata_path(client.find_id(INSTANCE, instance)))), METADATA_COLUMNS, fmt, columns)


@metadata_app.command("get")
def metadata_get(
    ctx: typer.Context,
    instance: InstanceArg,
    key: KeyArg,
    fmt: FormatOption = Format.table,
    columns: ColumnsOption = None,
) -> None:
    """Show one key, read where the guest reads it (`*_pw` and internal namespaces: internal metadata)."""
    client = client_of(ctx)
    body = client.get(_metadata_path(client.find_id(INSTANCE, instance), key))
    if not isinstance(body, dict) or not isinstance(body.get("metadata_item"), dict):
        raise CliError("cloudnet answered without a 'metadata_item' object")
    print_show(body["metadata_item"], fmt, columns)


@metadata_app.command("set")
def metadata_set(
    ctx: typer.Context,
    instance: InstanceArg,
    key: KeyArg,
    value: Annotated[str | None, typer.Argument(help="The value (or use --file).")] = None,
    file: Annotated[Path | None, typer.Option("--file", help="Read the value from this file.")] = None,
    internal: InternalOption = False,
    fmt: FormatOption = Format.table,
    columns: ColumnsOption = None,
) -> None:
    """Set one key (`*_pw` keys go to internal metadata, as when the guest writes them)."""
    if (value is None) == (file is None):
        raise CliError("give the value either as an argument or with --file")
    text = value if value is not None else _read(file)  # type: ignore[arg-type]
    client = client_of(ctx)
    body: dict[str, Any] = {"value": text}
    if internal:
        body["internal"] = True
    items = _items(client.put(_metadata_path(client.find_id(INSTANCE, instance), key), body))
    stored = [i for i in items if i["key"] == key and i["value"] == text]
    print_show(stored[-1] if stored else {"key": key, "value": text}, fmt, columns)


@metadata_app.command("unset")
def metadata_unset(
    ctx: typer.Context,
    instance: InstanceArg,
    keys: Annotated[list[str], typer.Argument(metavar="KEY", help="Keys to remove.")],
    internal: InternalOption = False,
) -> None:
    """Remove keys, going on past failures."""
    client = client_of(ctx)
    instance_id = client.find_id(INSTANCE, instance)
    suffix = "?internal=true" if internal else ""
    failed = 0
    for key in keys:
        try:
            client.delete(_metadata_path(instance_id, key) + suffix)
        except CliError as exc:
            if len(keys) == 1:
                raise
            failed += 1
            typer.echo(f"Error: {key}: {exc}", err=True)
    if failed:
        raise CliError(f"Failed to remove {failed} of {len(keys)} metadata keys")
