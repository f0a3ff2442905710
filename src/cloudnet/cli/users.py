"""`cloudnet user set|delete|list` and `cloudnet token create`: edit `<state-dir>/tokens.json` on the server's
machine (the server re-reads it within a second). Users log in through the Keystone face with a password, of
which the file keeps only a scrypt hash; tokens are the static `X-Auth-Token` values the `cloudnet` CLI sends.

The first user or token written ends the open mode of a server that ran without the file: from then on every
request needs a token (`cloudnet up`'s own agent keeps working).
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path
from typing import Annotated, Any, cast

import typer

from cloudnet.cli.errors import CliError
from cloudnet.config import DEFAULT_STATE_DIR
from cloudnet.services.context import ROLES, Role
from cloudnet.services.identity import keystone

user_app = typer.Typer(help="Users of the Keystone face (password login), in the tokens file.", no_args_is_help=True)
token_app = typer.Typer(help="Static tokens (X-Auth-Token), in the tokens file.", no_args_is_help=True)

StateDir = Annotated[
    Path, typer.Option(envvar="CLOUDNET_STATE_DIR", help="The server's state dir (holds tokens.json).")
]
Project = Annotated[list[str], typer.Option("--project", help="A project of the user (repeatable).")]
RoleOption = Annotated[str, typer.Option(help=f"Role in the project(s): {', '.join(ROLES)}.")]


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {"tokens": {}}
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise CliError(f"{path} does not hold a JSON object")
    return data


def _save(path: Path, data: dict[str, Any]) -> None:
    """Atomically, mode 0600: the server never reads half a file, and nobody else reads hashes or tokens."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _role(role: str) -> Role:
    if role not in ROLES:
        raise CliError(f"--role must be one of {', '.join(ROLES)}, not {role!r}")
    return cast(Role, role)


def _password(from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    return str(typer.prompt("Password", hide_input=True, confirmation_prompt=True))


@user_app.command("set")
def set_user(
    name: Annotated[str, typer.Argument(help="User name (what clouds.yaml's auth.username says).")],
    project: Project,
    role: RoleOption = "member",
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the password from stdin's first line (else: prompt).")
    ] = False,
    state_dir: StateDir = DEFAULT_STATE_DIR,
) -> None:
    """Add a user or replace its password and projects."""
    path = state_dir / "tokens.json"
    data = _load(path)
    try:
        entry = keystone.user_entry(_password(password_stdin), dict.fromkeys(project, _role(role)))
        keystone.parse_users({name: entry})
    except ValueError as exc:
        raise CliError(str(exc)) from None
    data.setdefault("users", {})[name] = entry
    _save(path, data)
    typer.echo(f"user {name}: {role} of {', '.join(project)} ({path})")


@user_app.command("delete")
def delete_user(name: str, state_dir: StateDir = DEFAULT_STATE_DIR) -> None:
    """Remove a user: its tokens stop working at once."""
    path = state_dir / "tokens.json"
    data = _load(path)
    if name not in data.get("users", {}):
        raise CliError(f"no user {name} in {path}")
    del data["users"][name]
    _save(path, data)


@user_app.command("list")
def list_users(state_dir: StateDir = DEFAULT_STATE_DIR) -> None:
    """Users and their roles."""
    for name, entry in sorted(_load(state_dir / "tokens.json").get("users", {}).items()):
        projects = ", ".join(f"{p}:{r}" for p, r in entry.get("projects", {}).items())
        typer.echo(f"{name}\t{projects}")


@token_app.command("create")
def create_token(
    project: Annotated[str, typer.Option(help="The project the token acts for.")],
    role: RoleOption = "member",
    state_dir: StateDir = DEFAULT_STATE_DIR,
) -> None:
    """Add a random static token and print it (for CLOUDNET_TOKEN / X-Auth-Token)."""
    if not 1 <= len(project) <= 255:
        raise CliError("--project must have 1-255 characters")
    path = state_dir / "tokens.json"
    data = _load(path)
    token = secrets.token_urlsafe(24)
    data.setdefault("tokens", {})[token] = {"project_id": project, "role": _role(role)}
    _save(path, data)
    typer.echo(token)
