"""`cloudnet security-group ...` and `cloudnet security-group rule ...`."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from cloudnet.cli.client import SECURITY_GROUP, SECURITY_GROUP_RULE
from cloudnet.cli.common import client_of, delete_each, require_changes, set_if
from cloudnet.cli.errors import CliError
from cloudnet.cli.output import Column, ColumnsOption, Format, FormatOption, Item, print_list, print_show
from cloudnet.cli.parsing import ethertype_of, parse_port_range

app = typer.Typer(help="Manage security groups and their rules.", no_args_is_help=True)
rule_app = typer.Typer(help="Manage security group rules.", no_args_is_help=True)
app.add_typer(rule_app, name="rule")

COLUMNS = [
    Column("ID", "id"),
    Column("Name", "name"),
    Column("Description", "description"),
    Column("Project", "project_id"),
    Column("Stateful", "stateful"),
]


def _port_range(rule: Item) -> str:
    low, high = rule.get("port_range_min"), rule.get("port_range_max")
    if low is None and high is None:
        return ""
    return f"{'' if low is None else low}:{'' if high is None else high}"


RULE_COLUMNS = [
    Column("ID", "id"),
    Column("IP Protocol", "protocol"),
    Column("Ethertype", "ethertype"),
    Column("IP Range", "remote_ip_prefix"),
    Column("Port Range", _port_range),
    Column("Direction", "direction"),
    Column("Remote Security Group", "remote_group_id"),
]
# Listing the rules of every group needs to say which group each belongs to.
ALL_RULE_COLUMNS = [*RULE_COLUMNS, Column("Security Group", "security_group_id")]

StatefulOption = Annotated[
    bool | None,
    typer.Option(
        "--stateful/--stateless",
        help="Stateful (replies to allowed traffic pass; the default) or stateless (every direction needs its rule).",
    ),
]
GroupArg = Annotated[str, typer.Argument(metavar="SECURITY_GROUP", help="Security group name or id.")]
RuleArg = Annotated[str, typer.Argument(metavar="RULE", help="Rule id.")]


class Ethertype(StrEnum):
    ipv4 = "IPv4"
    ipv6 = "IPv6"


@app.command("create")
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Name of the new security group.")],
    description: Annotated[str | None, typer.Option(help="Description.")] = None,
    project: Annotated[str | None, typer.Option(help="Owning project id (admin only).")] = None,
    stateful: StatefulOption = None,
    fmt: FormatOption = Format.table,
    columns: ColumnsOption = None,
) -> None:
    """Create a security group."""
    body: dict[str, object] = {"name": name}
    set_if(body, "description", description)
    set_if(body, "project_id", project)
    set_if(body, "stateful", stateful)
    print_show(client_of(ctx).create(SECURITY_GROUP, body), fmt, columns)


@app.command("list")
def list_groups(ctx: typer.Context, fmt: FormatOption = Format.table, columns: ColumnsOption = None) -> None:
    """List security groups."""
    print_list(client_of(ctx).list_all(SECURITY_GROUP), COLUMNS, fmt, columns)


@app.command("show")
def show(ctx: typer.Context, group: GroupArg, fmt: FormatOption = Format.table, columns: ColumnsOption = None) -> None:
    """Show one security group with its rules."""
    print_show(client_of(ctx).find(SECURITY_GROUP, group), fmt, columns)


@app.command("set")
def set_group(
    ctx: typer.Context,
    group: GroupArg,
    name: Annotated[str | None, typer.Option(help="New name.")] = None,
    description: Annotated[str | None, typer.Option(help="New description.")] = None,
    stateful: StatefulOption = None,
) -> None:
    """Change a security group (stateful or not: only while no port uses it)."""
    body: dict[str, object] = {}
    set_if(body, "name", name)
    set_if(body, "description", description)
    set_if(body, "stateful", stateful)
    require_changes(body, f"security group {group}")
    client = client_of(ctx)
    client.update(SECURITY_GROUP, client.find_id(SECURITY_GROUP, group), body)


@app.command("delete")
def delete(
    ctx: typer.Context,
    groups: Annotated[list[str], typer.Argument(metavar="SECURITY_GROUP", help="Security group names or ids.")],
) -> None:
    """Delete security groups."""
    delete_each(client_of(ctx), SECURITY_GROUP, groups)


@rule_app.command("create")
def create_rule(
    ctx: typer.Context,
    group: GroupArg,
    ingress: Annotated[bool, typer.Option("--ingress/--egress", help="Direction of the traffic.")] = True,
    ethertype: Annotated[
        Ethertype | None,
        typer.Option(case_sensitive=False, help="IPv4 or IPv6 (default: from --remote-ip, else IPv4)."),
    ] = None,
    protocol: Annotated[
        str | None, typer.Option(help="tcp, udp, icmp, ipv6-icmp, a protocol number, or 'any'.")
    ] = None,
    dst_port: Annotated[str | None, typer.Option(metavar="N|N:M", help="Destination port or range.")] = None,
    remote_ip: Annotated[str | None, typer.Option(metavar="CIDR", help="Remote address range.")] = None,
    remote_group: Annotated[
        str | None, typer.Option(metavar="SECURITY_GROUP", help="Remote security group (name or id).")
    ] = None,
    description: Annotated[str | None, typer.Option(help="Description.")] = None,
    fmt: FormatOption = Format.table,
    columns: ColumnsOption = None,
) -> None:
    """Add a rule to a security group."""
    if remote_ip and remote_group:
        raise CliError("--remote-ip and --remote-group cannot be used together")
    ether = ethertype.value if ethertype is not None else ethertype_of(remote_ip) if remote_ip else Ethertype.ipv4.value
    client = client_of(ctx)
    body: dict[str, object] = {
        "security_group_id": client.find_id(SECURITY_GROUP, group),
        "direction": "ingress" if ingress else "egress",
        "ethertype": ether,
    }
    if protocol is not None and protocol.lower() != "any":
        body["protocol"] = protocol.lower()
    if dst_port is not None:
        body["port_range_min"], body["port_range_max"] = parse_port_range(dst_port)
    set_if(body, "remote_ip_prefix", remote_ip)
    if remote_group is not None:
        body["remote_group_id"] = client.find_id(SECURITY_GROUP, remote_group)
    set_if(body, "description", description)
    print_show(client.create(SECURITY_GROUP_RULE, body), fmt, columns)


@rule_app.command("list")
def list_rules(
    ctx: typer.Context,
    group: Annotated[
        str | None, typer.Argument(metavar="SECURITY_GROUP", help="Only this group's rules (name or id).")
    ] = None,
    fmt: FormatOption = Format.table,
    columns: ColumnsOption = None,
) -> None:
    """List security group rules."""
    client = client_of(ctx)
    params: list[tuple[str, str]] = []
    if group is not None:
        params.append(("security_group_id", client.find_id(SECURITY_GROUP, group)))
    rules = client.list_all(SECURITY_GROUP_RULE, params)
    print_list(rules, RULE_COLUMNS if group is not None else ALL_RULE_COLUMNS, fmt, columns)


@rule_app.command("show")
def show_rule(
    ctx: typer.Context, rule: RuleArg, fmt: FormatOption = Format.table, columns: ColumnsOption = None
) -> None:
    """Show one security group rule."""
    print_show(client_of(ctx).show(SECURITY_GROUP_RULE, rule), fmt, columns)


@rule_app.command("delete")
def delete_rule(
    ctx: typer.Context,
    rules: Annotated[list[str], typer.Argument(metavar="RULE", help="Rule ids.")],
) -> None:
    """Delete security group rules."""
    delete_each(client_of(ctx), SECURITY_GROUP_RULE, rules, by_name=False)
