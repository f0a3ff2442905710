"""The `cloudnet` CLI run in-process against a live server, and readers for what it prints.

One runner for every CLI test: `cloudnet --url <url> ...` inside typer's CliRunner isolation, with the exit
code, stdout, stderr and both interleaved (as a terminal shows them).
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from dataclasses import dataclass
from typing import Any

import httpx
import typer
from typer.testing import CliRunner

from cloudnet.cli.main import app

# `CliRunner.invoke(app, ...)` rebuilds the click command from the typer app on every call (~30 ms);
# build it once and run it the same way inside the runner's isolation.
COMMAND = typer.main.get_command(app)


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    stdout: str
    stderr: str
    output: str  # stdout and stderr interleaved, as a terminal shows them


class Cli:
    """Runs `cloudnet --url <url> ...` in-process. An unexpected exception (a traceback) fails the test.

    `env` adds environment variables, `url=False` leaves `--url` out (CLOUDNET_URL then names the server),
    `input` is stdin's text and `http` the httpx client the CLI uses instead of its own.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.runner = CliRunner()

    def run(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        url: bool = True,
        input: str | None = None,
        http: httpx.Client | None = None,
    ) -> Outcome:
        argv = ["--url", self.url, *args] if url else list(args)
        with self.runner.isolation(input=input, env=env) as (out, err, mixed):
            try:
                COMMAND.main(args=argv, prog_name="cloudnet", obj=http)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
            return Outcome(code, out.getvalue().decode(), err.getvalue().decode(), mixed.getvalue().decode())

    def ok(self, *args: str, **options: Any) -> Outcome:
        result = self.run(*args, **options)
        assert result.exit_code == 0, f"cloudnet {' '.join(args)} -> {result.exit_code}\n{result.output}"
        assert result.stderr == ""
        return result

    def out(self, *args: str, **options: Any) -> str:
        """What a command that must succeed printed on stdout."""
        return self.ok(*args, **options).stdout

    def json(self, *args: str, **options: Any) -> Any:
        return json.loads(self.out(*args, "-f", "json", **options))

    def fail(self, *args: str, **options: Any) -> str:
        """Run a command that must fail with exactly one `Error: ...` line; return that line."""
        result = self.run(*args, **options)
        assert result.exit_code == 1, f"cloudnet {' '.join(args)} -> {result.exit_code}:\n{result.output}"
        assert result.stdout == ""
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("Error: "), lines[0]
        assert result.output == result.stderr
        return REQUEST_ID.sub("", lines[0])


# What the CLI adds to a server's refusal (its request id, as the `openstack` CLI prints it): tests compare the rest.
REQUEST_ID = re.compile(r" \(Request-ID: [A-Za-z0-9._-]{1,64}\)$")


def table_rows(text: str) -> list[list[str]]:
    """The rows of a rich table (header first), cells stripped.

    A cell of several lines (e.g. two fixed IPs) continues on lines whose first cell is empty: every
    table here starts with a non-empty column (ID, Field), so those lines are folded into the row above.
    """
    rows: list[list[str]] = []
    for line in text.splitlines():
        if not line.startswith("│"):
            continue
        cells = [cell.strip() for cell in line.strip("│").split("│")]
        if rows and cells[0] == "":
            rows[-1] = [f"{old}\n{new}" if new else old for old, new in zip(rows[-1], cells, strict=True)]
        else:
            rows.append(cells)
    return rows


def table_dicts(text: str) -> list[dict[str, str]]:
    header, *rows = table_rows(text)
    return [dict(zip(header, row, strict=True)) for row in rows]


def show_table(text: str) -> dict[str, str]:
    header, *rows = table_rows(text)
    assert header == ["Field", "Value"]
    return {field: value for field, value in rows}


def csv_dicts(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))
