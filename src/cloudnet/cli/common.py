"""Helpers shared by the resource command modules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import typer

from cloudnet.cli.client import SUBNET, Client, Kind
from cloudnet.cli.errors import CliError
from cloudnet.cli.parsing import parse_fixed_ip

# Networks' and routers' availability_zone_hints at create (read-only after, as in Neutron).
AzHintOption = Annotated[
    list[str] | None,
    typer.Option("--availability-zone-hint", metavar="ZONE", help="Availability zone to realise it in (repeatable)."),
]


def client_of(ctx: typer.Context) -> Client:
    """The client the top-level callback put on the context."""
    client = ctx.find_object(Client)
    if client is None:
        raise RuntimeError("cloudnet commands must be invoked through cloudnet.cli.main:app")
    return client


def delete_each(client: Client, kind: Kind, values: Sequence[str], *, by_name: bool = True) -> None:
    """Delete every given resource, going on past failures as `openstack ... delete` does.

    `by_name=False` is for resources without names (security group rules): values are ids.
    """

    def delete_one(value: str) -> None:
        client.remove(kind, client.find_id(kind, value) if by_name else value)

    if len(values) == 1:
        delete_one(values[0])
        return
    failed = 0
    for value in values:
        try:
            delete_one(value)
        except CliError as exc:
            failed += 1
            typer.echo(f"Error: {value}: {exc}", err=True)
    if failed:
        raise CliError(f"Failed to delete {failed} of {len(values)} {kind.label}s")


def set_if(body: dict[str, object], key: str, value: object) -> None:
    """Put `value` in the request body unless the option was left out (None)."""
    if value is not None:
        body[key] = value


def require_changes(body: dict[str, object], what: str) -> None:
    if not body:
        raise CliError(f"Nothing to change for {what}; give at least one option")


def resolve_fixed_ips(client: Client, network_id: str, specs: Sequence[str]) -> list[dict[str, str]]:
    """`--fixed-ip subnet=..,ip-address=..` values as Neutron fixed_ips.

    Subnet names are looked up on `network_id` only, so equal names on other networks don't clash.
    """
    result = []
    for spec in specs:
        pairs = parse_fixed_ip(spec)
        entry: dict[str, str] = {}
        if pairs.get("subnet"):
            entry["subnet_id"] = client.find_id(SUBNET, pairs["subnet"], [("network_id", network_id)])
        if pairs.get("ip-address"):
            entry["ip_address"] = pairs["ip-address"]
        result.append(entry)
    return result
