"""The QEMU arguments that make a VM's second serial port its SmartOS metadata channel (RFD 69's KVM case).

The agent listens at wire/mdata_paths.serial_socket(); QEMU connects to it as a client and reconnects every
second, so the VM may start before the agent made the socket, and an agent restart (or the socket being
replaced) costs the guest a second of silence, not its channel. `isa-serial,index=1` puts the port at COM2
(I/O 0x2f8, IRQ 3): /dev/ttyS1 in a Linux guest whatever its console is, where mdata-client and cloud-init
look. Pure: `cloudnet instance qemu-args` and the tests call it.
"""

from __future__ import annotations

import re
from pathlib import Path

from cloudnet.wire.qemu_args import escape

CHARDEV_ID = "cnmd"
# QEMU 9.2 added `reconnect-ms` and deprecated `reconnect` (seconds); 10.0 (Debian 13) still takes both,
# 7.2 (Debian 12) only `reconnect`.
RECONNECT_MS_SINCE = (9, 2)
RECONNECT_SECONDS = 1

_VERSION = re.compile(r"(?:QEMU emulator version\s+)?(\d+)\.(\d+)")


def parse_qemu_version(text: str) -> tuple[int, int]:
    """(major, minor) of "10.0.13", "7.2", or the first line of `qemu-system-x86_64 --version`."""
    m = _VERSION.search(text)
    if m is None:
        raise ValueError(f"not a QEMU version: {text!r}")
    return int(m.group(1)), int(m.group(2))


def serial_qemu_args(path: str | Path, qemu_version: str | tuple[int, ...]) -> list[str]:
    """`-chardev` (a reconnecting client of the agent's socket at `path`) and `-device isa-serial` (COM2)."""
    version = parse_qemu_version(qemu_version) if isinstance(qemu_version, str) else tuple(qemu_version[:2])
    text = escape(str(path))  # (QEMU's option syntax would split the path at a comma)
    if version >= RECONNECT_MS_SINCE:
        reconnect = f"reconnect-ms={RECONNECT_SECONDS * 1000}"
    else:
        reconnect = f"reconnect={RECONNECT_SECONDS}"
    return [
        "-chardev", f"socket,id={CHARDEV_ID},path={text},{reconnect}",
        "-device", f"isa-serial,chardev={CHARDEV_ID},index=1",
    ]  # fmt: skip
