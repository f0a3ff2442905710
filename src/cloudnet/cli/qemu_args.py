"""`cloudnet instance qemu-args`: what a VMM needs to attach a VM instance, in one command (wire/qemu_args.py)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Annotated

import typer

from cloudnet.cli.client import INSTANCE, PORT
from cloudnet.cli.common import client_of
from cloudnet.cli.errors import CliError
from cloudnet.config import DEFAULT_STATE_DIR
from cloudnet.wire import qemu_args as wire
from cloudnet.wire.mdata_paths import serial_socket
from cloudnet.wire.mdata_serial import parse_qemu_version, serial_qemu_args

QEMU = "qemu-system-x86_64"


def _qemu_version(text: str | None) -> tuple[int, int]:
    """The version given (X.Y), else the installed QEMU's, else (0, 0) (unknown: the oldest syntax)."""
    if text is None:
        binary = shutil.which(QEMU)
        if binary is None:
            return (0, 0)
        try:
            text = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            return (0, 0)
    try:
        return parse_qemu_version(text or "")
    except ValueError:
        raise CliError(f"--qemu-version: no X.Y version in {text!r}") from None


def qemu_args(
    ctx: typer.Context,
    instance: Annotated[str, typer.Argument(metavar="INSTANCE", help="VM instance name or id.")],
    config_drive: Annotated[
        Path | None, typer.Option(metavar="PATH", help="Attach this config drive image (read-only virtio disk).")
    ] = None,
    smartos: Annotated[
        bool, typer.Option("--smartos", help="SmartOS identity (SMBIOS SmartDC HVM) and metadata serial port (ttyS1).")
    ] = False,
    state_dir: Annotated[
        Path, typer.Option(envvar="CLOUDNET_STATE_DIR", help="The VM host agent's state dir (--smartos's socket).")
    ] = DEFAULT_STATE_DIR,
    qemu_version: Annotated[
        str | None, typer.Option(metavar="X.Y", help="QEMU version the arguments are for (default: the installed).")
    ] = None,
    lines: Annotated[bool, typer.Option("--lines", help="One argument per line (for `mapfile -t`).")] = False,
    command: Annotated[
        bool,
        typer.Option("--command", help="Start with `ip netns exec <netns> qemu-system-x86_64` (the taps' namespace)."),
    ] = False,
) -> None:
    """Print the QEMU arguments that attach a VM instance: a tap netdev and a virtio NIC per port, the SMBIOS
    identity cloud-init looks for, and a config drive or the SmartOS serial port when asked. Shell-quoted on one
    line: `eval "$(cloudnet instance qemu-args vm1 --command) -m 256 -kernel ..."` (SMBIOS values hold spaces: a
    bare $(...) would split them); QEMU must run in the namespace of the taps (vif_details.netns, --command)."""
    client = client_of(ctx)
    inst = client.find(INSTANCE, instance)
    if inst.get("kind") != "vm":
        raise CliError(f"instance {instance} is not a vm (kind {inst.get('kind')!r}): it has no taps to attach")
    ports = {n["port_id"]: client.show(PORT, n["port_id"]) for n in inst.get("nets") or []}
    serial: list[str] = []
    if smartos:
        serial = serial_qemu_args(serial_socket(state_dir, str(inst["id"])), _qemu_version(qemu_version))
    drive = None if config_drive is None else os.path.abspath(config_drive)
    try:
        args = wire.qemu_args(inst, ports, config_drive=drive, serial=serial, smartos=smartos)
    except wire.NotAttachable as exc:
        raise CliError(f"instance {instance}: {exc}") from None
    if command:
        ns = wire.netns_of(ports)
        args = (["ip", "netns", "exec", ns] if ns else []) + [QEMU, *args]
    typer.echo("\n".join(args) if lines else shlex.join(args))
