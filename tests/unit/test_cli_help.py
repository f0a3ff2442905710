"""`--help` shows a flag as a flag: no `<bool>` type, as if it took a value."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cloudnet.cli.main import app


@pytest.mark.parametrize(("command", "flag"), [(["up"], "--park-pool-devices"), (["network", "create"], "--shared"),
                                               (["port", "set"], "--enable-port-security")])  # fmt: skip
def test_boolean_options_show_as_flags(command: list[str], flag: str) -> None:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "240"}, terminal_width=240)
    assert result.exit_code == 0, result.output
    assert flag in result.output and "--help" in result.output
    assert "<bool>" not in result.output
    assert "<int" in CliRunner().invoke(app, ["up", "--help"], env={"COLUMNS": "240"}).output  # types still shown
