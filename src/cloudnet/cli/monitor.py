"""`cloudnet monitor`: the cloud's events as they happen, one line each (as `lxc monitor` streams LXD's), over the
long poll of GET /v2.0/events: resources created, updated and deleted, ports going ACTIVE or failing (with the
agent's reason), agents' failures, hosts up and down. Admins see every project's (or --project's), members their
own. A dropped connection or a restarting server is waited out (`ask`), and the stream resumes after the last
event shown."""

from __future__ import annotations

import json
import random
import time
from enum import StrEnum
from typing import Annotated, Any

import typer

from cloudnet.cli.client import Client
from cloudnet.cli.common import client_of
from cloudnet.cli.errors import ApiError, CliError
from cloudnet.wire import logs

POLL = 30.0  # seconds a poll waits for news (the server may cut it shorter: --max-event-wait)
BATCH = 1000
MAX_DETAIL = 300  # characters of a reason shown on the line (--format json has it whole)
RETRY_FIRST, RETRY_MOST = 0.25, 10.0  # seconds between tries while the server cannot answer: doubling, capped


TYPE_HELP = (
    "Only events of TYPE (repeatable): port.active, port.failed, port.down, agent.failure, host.up, "
    "host.down, network.created, ...; a resource alone (port) for all of its."
)


class Style(StrEnum):
    text = "text"
    json = "json"


def line(event: dict[str, Any]) -> str:
    """One event for a terminal: every field as the server gave it, control characters escaped (a reason comes
    from an agent, a port's device names, a kernel's message)."""
    parts = [event.get("created_at"), event.get("type"), event.get("resource"), event.get("resource_id")]
    if event.get("project_id"):
        parts.append(f"project={event['project_id']}")
    if event.get("request_id"):
        parts.append(f"request={event['request_id']}")
    text = logs.printable(" ".join(str(p) for p in parts), 1000)
    detail = event.get("detail")
    return f"{text}: {logs.printable(str(detail), MAX_DETAIL)}" if detail else text


def ask(client: Client, query: list[tuple[str, str]]) -> dict[str, Any]:
    """One GET of the events, asked again (with a backoff) while the server cannot answer it: a dropped connection,
    a server restarting, a 5xx, a timeout. A refusal of the token (401, 403) is final: it will not change by
    waiting. The caller asks from the last revision it showed, so nothing is lost or shown twice."""
    delay = RETRY_FIRST
    failed = False
    while True:
        try:
            answer = client.request("GET", "events", params=query)
        except ApiError as exc:
            if exc.status in (401, 403):
                raise
            why = str(exc)
        except CliError as exc:
            why = str(exc)
        else:
            if failed:
                typer.echo("cloudnet monitor: reconnected", err=True)
            return dict(answer)
        failed = True
        typer.echo(f"cloudnet monitor: {why}; trying again in {delay:g} s", err=True)
        # (jittered: the monitors of a restarted server do not all come back in the same instant)
        time.sleep(delay * random.uniform(0.5, 1.0))
        delay = min(delay * 2, RETRY_MOST)


def start(client: Client, params: list[tuple[str, str]]) -> int:
    """Where the stream begins: now (the latest revision the caller may know of)."""
    answer = ask(client, [*params, ("since", "0"), ("limit", "1")])
    return int(answer["revision"])


def follow(client: Client, since: int, params: list[tuple[str, str]], count: int | None, style: Style) -> None:
    shown = 0
    client.timeout = POLL + 30  # (a long poll answers after up to POLL seconds)
    while count is None or shown < count:
        query = [*params, ("since", str(since)), ("timeout", str(POLL)), ("limit", str(BATCH))]
        answer = ask(client, query)
        events = answer.get("events") or []
        for event in events[: None if count is None else count - shown]:
            typer.echo(json.dumps(event, sort_keys=True) if style is Style.json else line(event))
            shown += 1
        # A full batch: more after its last one; else what the server says is the latest it may tell.
        since = int(events[-1]["revision"]) if len(events) >= BATCH else max(since, int(answer["revision"]))


def register(app: typer.Typer) -> None:
    @app.command("monitor")
    def monitor(
        ctx: typer.Context,
        types: Annotated[list[str] | None, typer.Option("--type", metavar="TYPE", help=TYPE_HELP)] = None,
        project: Annotated[
            str | None, typer.Option("--project", help="Only this project's events (admins; members see theirs).")
        ] = None,
        since: Annotated[
            int | None, typer.Option(min=0, metavar="REVISION", help="Start after this revision (default: now).")
        ] = None,
        count: Annotated[int | None, typer.Option(min=1, help="Stop after this many events.")] = None,
        style: Annotated[Style, typer.Option("-f", "--format", help="text: a line each; json: an object each.")] = (
            Style.text
        ),
    ) -> None:
        """Print the cloud's events as they happen (until Ctrl-C, or --count)."""
        client = client_of(ctx)
        params = [("type", t) for t in types or []] + ([("project_id", project)] if project else [])
        try:
            follow(client, start(client, params) if since is None else since, params, count, style)
        except KeyboardInterrupt:
            raise typer.Exit(0) from None
