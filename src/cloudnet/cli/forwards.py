"""`cloudnet network forward ...`: network forwards in LXD's syntax (`lxc network forward ...`).

Changes to an existing forward (set, unset, edit, port add/remove) read it with its ETag and write it
back whole with `If-Match`, so a change made by someone else in between is refused (412), not lost.
"""

from __future__ import annotations

import re
import ssl
import sys
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import quote

import click
import httpx
import typer
import yaml

from cloudnet.cli.client import NETWORK, Client, api_root
from cloudnet.cli.common import client_of
from cloudnet.cli.errors import ApiError, CliError
from cloudnet.cli.output import Column, ColumnsOption, Format, FormatOption, print_list, print_show, to_yaml
from cloudnet.wire import request_ids

app = typer.Typer(help="Manage network forwards (external addresses forwarded to instances).", no_args_is_help=True)
port_app = typer.Typer(help="Manage the port forwards of a network forward.", no_args_is_help=True)
app.add_typer(port_app, name="port")

COLUMNS = [
    Column("Listen Address", "listen_address"),
    Column("Description", "description"),
    Column("Default Target Address", lambda f: (f.get("config") or {}).get("target_address", "")),
    Column("Ports", lambda f: len(f.get("ports") or [])),
]

# What `edit` and stdin YAML may change (LXD's NetworkForwardPut), and what a shown forward also has.
WRITABLE = ("description", "config", "ports")
READ_ONLY = ("listen_address", "location", "id", "network_id", "network", "project_id", "created_at",
             "updated_at", "revision_number")  # fmt: skip
PROPERTIES = ("listen_address", "location", "description")
PORT_FIELDS = ("description", "protocol", "listen_port", "target_port", "target_address")

EDIT_HEADER = """\
### This is a YAML representation of the network forward.
### Any line starting with a '#' will be ignored.
###
### A network forward consists of a default target address and optional set of port forwards for a listen address.
###
### An example would look like:
### listen_address: 192.0.2.1
### config:
###   target_address: 198.51.100.2
### description: test desc
### ports:
### - description: port forward
###   protocol: tcp
###   listen_port: 80,81,8080-8090
###   target_address: 198.51.100.3
###   target_port: 80,81,8080-8090
### location: ""
###
### Note that the listen_address and location cannot be changed.
"""

NetworkArg = Annotated[str, typer.Argument(metavar="NETWORK", help="Network name or id.")]
ListenArg = Annotated[str, typer.Argument(metavar="LISTEN_ADDRESS", help="The forward's listen address.")]
PropertyOption = Annotated[
    bool, typer.Option("-p", "--property", help="The key is a property of the forward (description), not config.")
]


# -- HTTP -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Forwards:
    """The forwards of one network, through the CLI's client (its token, URL and HTTP session)."""

    client: Client
    network_id: str

    @classmethod
    def of(cls, ctx: typer.Context, network: str) -> Forwards:
        client = client_of(ctx)
        return cls(client, client.find_id(NETWORK, network))

    def path(self, listen: str | None = None) -> str:
        base = f"{NETWORK.collection}/{quote(self.network_id, safe='')}/forwards"
        if listen is None:
            return base
        if not listen.strip():
            raise CliError("A listen address cannot be empty")
        segment = quote(listen.strip(), safe="")
        if segment in (".", ".."):
            segment = segment.replace(".", "%2E")
        return f"{base}/{segment}"

    def list(self) -> list[dict[str, Any]]:
        return _member(self._send("GET", self.path()), "forwards", list)

    def get(self, listen: str) -> tuple[dict[str, Any], str]:
        """The forward and its ETag (as the server sent it, quotes included)."""
        response = self._send("GET", self.path(listen))
        return _member(response, "forward", dict), response.headers.get("etag", "")

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        return _member(self._send("POST", self.path(), body={"forward": body}), "forward", dict)

    def put(self, listen: str, body: dict[str, Any], etag: str = "") -> dict[str, Any]:
        response = self._send("PUT", self.path(listen), body={"forward": body}, if_match=etag)
        return _member(response, "forward", dict)

    def delete(self, listen: str) -> None:
        self._send("DELETE", self.path(listen))

    def _send(self, method: str, path: str, *, body: Any = None, if_match: str = "") -> httpx.Response:
        # Client.request returns bodies only; forwards need the ETag header and If-Match, so this goes
        # through the same session (tests may have given the client their own httpx.Client).
        client = self.client
        headers = {"X-Auth-Token": client.token, "Accept": "application/json"}
        if if_match:
            headers["If-Match"] = if_match
        url = f"{api_root(client.url)}/{path}"
        try:
            response = client._session().request(method, url, json=body, headers=headers, timeout=client.timeout)
        except httpx.ConnectError as exc:
            raise CliError(f"cannot reach cloudnet at {client.url}: {_reason(exc)}") from None
        except httpx.TimeoutException:
            raise CliError(f"cloudnet at {client.url} did not answer within {client.timeout:g}s") from None
        except (httpx.HTTPError, httpx.InvalidURL, ssl.SSLError) as exc:
            raise CliError(f"request to cloudnet at {client.url} failed: {_reason(exc)}") from None
        if not response.is_success:
            raise ApiError.from_payload(response.status_code, _json(response), response.reason_phrase,
                                        response.headers.get(request_ids.HEADER))  # fmt: skip
        return response


def _member(response: httpx.Response, key: str, expected: type) -> Any:
    payload = _json(response) if response.content else None
    if not isinstance(payload, dict) or not isinstance(payload.get(key), expected):
        raise CliError(f"cloudnet answered {response.request.method} {response.request.url.path} without '{key}'")
    return payload[key]


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _reason(exc: Exception) -> str:
    return re.sub(r"^\[Errno -?\d+\]\s*", "", str(exc)) or type(exc).__name__


# -- bodies -----------------------------------------------------------------------------------------


def put_body(forward: dict[str, Any]) -> dict[str, Any]:
    """What a PUT sends back of a forward the server showed: description, config and ports."""
    return {
        "description": forward.get("description") or "",
        "config": dict(forward.get("config") or {}),
        "ports": [{k: p[k] for k in PORT_FIELDS if k in p} for p in forward.get("ports") or []],
    }


def _text(value: Any) -> Any:
    """A YAML scalar as the string LXD's decoder would make of it (`listen_port: 80` is "80")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if value is None:
        return ""
    return value


def parse_yaml(text: str) -> dict[str, Any]:
    """A forward's writable fields from YAML (`show -f yaml` output is accepted: read-only keys are ignored).

    Unknown keys are refused rather than ignored: with a PUT, a misspelt `ports` would delete every port.
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CliError(f"Invalid YAML: {' '.join(str(exc).split())}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise CliError("Invalid YAML: expected a mapping with description, config and ports")
    unknown = sorted(str(k) for k in data if k not in WRITABLE and k not in READ_ONLY)
    if unknown:
        raise CliError(f"Invalid YAML: unknown key(s) {', '.join(unknown)} (expected {', '.join(WRITABLE)})")
    body: dict[str, Any] = {"description": _text(data.get("description")), "config": {}, "ports": []}
    config = data.get("config") or {}
    if not isinstance(config, dict):
        raise CliError("Invalid YAML: config must be a mapping")
    body["config"] = {str(k): _text(v) for k, v in config.items()}
    ports = data.get("ports") or []
    if not isinstance(ports, list) or not all(isinstance(p, dict) for p in ports):
        raise CliError("Invalid YAML: ports must be a list of mappings")
    body["ports"] = [{str(k): _text(v) for k, v in p.items()} for p in ports]
    return body


def parse_pairs(args: list[str], *, key_value_form: bool = True) -> dict[str, str]:
    """`k=v ...`, or (for set) LXD's `KEY VALUE` form: two words, the first without '='."""
    if key_value_form and len(args) == 2 and "=" not in args[0]:
        return {args[0]: args[1]}
    out: dict[str, str] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or not key:
            raise CliError(f"Bad key/value pair: {arg}")
        out[key] = value
    return out


def ports_text(value: str) -> str:
    """A port list as the server stores it (LXD's Normalise): items trimmed, no blanks around commas."""
    return ",".join(part.strip() for part in value.split(","))


def _is_property(key: str, flag: bool) -> bool:
    # `description` is never a config key, so it is the property even without -p.
    return flag or key == "description"


def _stdin_is_terminal() -> bool:
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


# -- commands ---------------------------------------------------------------------------------------


@app.command("list")
def list_forwards(
    ctx: typer.Context, network: NetworkArg, fmt: FormatOption = Format.table, columns: ColumnsOption = None
) -> None:
    """List the forwards of a network."""
    print_list(Forwards.of(ctx, network).list(), COLUMNS, fmt, columns)


@app.command("show")
def show(
    ctx: typer.Context,
    network: NetworkArg,
    listen: ListenArg,
    fmt: FormatOption = Format.table,
    columns: ColumnsOption = None,
) -> None:
    """Show one forward."""
    forward, _etag = Forwards.of(ctx, network).get(listen)
    print_show(forward, fmt, columns)


@app.command("create")
def create(
    ctx: typer.Context,
    network: NetworkArg,
    listen: ListenArg,
    pairs: Annotated[
        list[str] | None, typer.Argument(metavar="KEY=VALUE...", help="Config (target_address=IP, user.*).")
    ] = None,
    description: Annotated[str | None, typer.Option(help="Description.")] = None,
) -> None:
    """Create a forward; YAML on stdin (when it is not a terminal) gives its description, config and ports."""
    body: dict[str, Any] = {"listen_address": listen}
    if not _stdin_is_terminal():
        text = sys.stdin.read()
        if text.strip():
            body.update(parse_yaml(text))
    config = dict(body.get("config") or {})
    config.update(parse_pairs(pairs or [], key_value_form=False))
    if config:
        body["config"] = config
    if description is not None:
        body["description"] = description
    created = Forwards.of(ctx, network).create(body)
    typer.echo(f"Network forward {created['listen_address']} created")


@app.command("delete")
def delete(ctx: typer.Context, network: NetworkArg, listen: ListenArg) -> None:
    """Delete a forward."""
    Forwards.of(ctx, network).delete(listen)
    typer.echo(f"Network forward {listen} deleted")


@app.command("edit")
def edit(ctx: typer.Context, network: NetworkArg, listen: ListenArg) -> None:
    """Edit a forward as YAML: in $EDITOR, or read from stdin when it is not a terminal."""
    forwards = Forwards.of(ctx, network)
    if not _stdin_is_terminal():
        forwards.put(listen, parse_yaml(sys.stdin.read()))  # no ETag, as LXD: stdin replaces whatever is there
        return
    forward, etag = forwards.get(listen)
    shown = {"listen_address": forward["listen_address"], **put_body(forward), "location": forward.get("location", "")}
    content = EDIT_HEADER + "\n" + to_yaml(shown)
    while True:
        content = click.edit(content, extension=".yaml", require_save=False) or content
        try:
            forwards.put(listen, parse_yaml(content), etag)
            return
        except CliError as exc:
            if isinstance(exc, ApiError) and exc.status == 412:
                raise  # someone else changed it: editing again would not help
            typer.echo(f"Config parsing error: {exc}", err=True)
            typer.echo("Press enter to open the editor again or ctrl+c to abort change")
            if not sys.stdin.readline():
                raise CliError("Edit aborted") from None


@app.command("get")
def get(
    ctx: typer.Context,
    network: NetworkArg,
    listen: ListenArg,
    key: Annotated[str, typer.Argument(metavar="KEY", help="Config key, or a property with -p.")],
    prop: PropertyOption = False,
) -> None:
    """Print one config value (nothing when unset) or, with -p, a property such as the description."""
    forward, _etag = Forwards.of(ctx, network).get(listen)
    if _is_property(key, prop):
        if key not in PROPERTIES:
            raise CliError(f'The property "{key}" does not exist on the network forward "{listen}"')
        typer.echo(forward.get(key) or "")
        return
    value = (forward.get("config") or {}).get(key)
    if value is not None:
        typer.echo(value)


def _change(ctx: typer.Context, network: str, listen: str, changes: dict[str, str], prop: bool) -> None:
    forwards = Forwards.of(ctx, network)
    forward, etag = forwards.get(listen)
    body = put_body(forward)
    for key, value in changes.items():
        if _is_property(key, prop):
            if key != "description":
                raise CliError(f'The property "{key}" of the network forward "{listen}" cannot be set')
            body["description"] = value
        else:
            body["config"][key] = value  # "" removes it: empty values are not stored
    forwards.put(listen, body, etag)


@app.command("set")
def set_forward(
    ctx: typer.Context,
    network: NetworkArg,
    listen: ListenArg,
    pairs: Annotated[list[str], typer.Argument(metavar="KEY=VALUE...", help="Config entries (or description=...).")],
    prop: PropertyOption = False,
) -> None:
    """Set config keys (target_address, user.*) or the description of a forward."""
    _change(ctx, network, listen, parse_pairs(pairs), prop)


@app.command("unset")
def unset(
    ctx: typer.Context,
    network: NetworkArg,
    listen: ListenArg,
    key: Annotated[str, typer.Argument(metavar="KEY", help="Config key, or a property with -p.")],
    prop: PropertyOption = False,
) -> None:
    """Remove a config key (or clear the description) of a forward."""
    _change(ctx, network, listen, {key: ""}, prop)


@port_app.command("add")
def port_add(
    ctx: typer.Context,
    network: NetworkArg,
    listen: ListenArg,
    protocol: Annotated[str, typer.Argument(metavar="PROTOCOL", help="tcp or udp.")],
    listen_ports: Annotated[str, typer.Argument(metavar="LISTEN_PORTS", help='e.g. "80", "80-90", "80,90-100".')],
    target_address: Annotated[str, typer.Argument(metavar="TARGET_ADDRESS", help="Where they go.")],
    target_ports: Annotated[
        str | None,
        typer.Argument(metavar="TARGET_PORTS", help="One port (many-to-one) or as many as listen ports."),
    ] = None,
    description: Annotated[str | None, typer.Option(help="Description of the port forward.")] = None,
) -> None:
    """Add a port forward to a forward."""
    forwards = Forwards.of(ctx, network)
    forward, etag = forwards.get(listen)
    body = put_body(forward)
    port = {"protocol": protocol.strip(), "listen_port": ports_text(listen_ports),
            "target_address": target_address.strip()}  # fmt: skip
    if target_ports:
        port["target_port"] = ports_text(target_ports)
    if description is not None:
        port["description"] = description
    body["ports"].append(port)
    forwards.put(listen, body, etag)


@port_app.command("remove")
def port_remove(
    ctx: typer.Context,
    network: NetworkArg,
    listen: ListenArg,
    protocol: Annotated[str | None, typer.Argument(metavar="PROTOCOL", help="Only ports of this protocol.")] = None,
    listen_ports: Annotated[
        str | None, typer.Argument(metavar="LISTEN_PORTS", help="Only the port forward with exactly these ports.")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Remove every matching port forward.")] = False,
) -> None:
    """Remove port forwards: those matching the protocol and listen ports given (all of them without)."""
    forwards = Forwards.of(ctx, network)
    forward, etag = forwards.get(listen)
    body = put_body(forward)

    def matches(port: dict[str, Any]) -> bool:
        if protocol is not None and port.get("protocol") != protocol:
            return False
        return listen_ports is None or port.get("listen_port") == ports_text(listen_ports)

    kept = [p for p in body["ports"] if not matches(p)]
    removed = len(body["ports"]) - len(kept)
    if removed == 0:
        raise CliError("No matching port(s) found")
    if removed > 1 and not force:
        raise CliError("Multiple ports match. Use --force to remove them all")
    body["ports"] = kept
    forwards.put(listen, body, etag)
