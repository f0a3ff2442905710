"""Availability zone names as a host reports them (`cloudnet agent --availability-zone`, its heartbeat): the
agent checks its option with this rule, the server every heartbeat.

A zone name also goes into an OVN chassis' `ovn-cms-options` (`availability-zones=az1:az2`, options separated by
`,`): so no `:`, `,`, `=` or white space; letters, digits, `_`, `.` and `-`, at most 255 (Neutron's agents'
column), starting with a letter or a digit."""

from __future__ import annotations

import re

DEFAULT = "nova"  # Neutron's default_availability_zone of its agents
MAX_LENGTH = 255
PATTERN = rf"^[A-Za-z0-9][A-Za-z0-9_.-]{{0,{MAX_LENGTH - 1}}}$"
_NAME = re.compile(PATTERN)


def valid(name: str) -> bool:
    return bool(_NAME.fullmatch(name))


def check(name: str) -> str:
    """`name` if it is a usable zone name, else ValueError saying why."""
    if not valid(name):
        raise ValueError(f"{name[:64]!r} is not an availability zone name: 1-{MAX_LENGTH} letters, digits, '_', '.' "
                         "or '-', starting with a letter or a digit")  # fmt: skip
    return name
