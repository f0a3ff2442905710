"""nftables through libnftables, in process: one script = one atomic kernel transaction."""

from __future__ import annotations

import threading

import nftables

from cloudnet.dataplane.linux import netns

_lock = threading.Lock()


class NftError(RuntimeError):
    pass


def run(namespace: str | None, script: str) -> None:
    """Apply `script` in the namespace as one transaction (all of it or none of it)."""
    with _lock:
        if namespace is None:
            _run(script)
        else:
            with netns.entered(namespace):
                _run(script)


def _run(script: str) -> None:
    nft = nftables.Nftables()  # created inside the namespace: its netlink socket belongs there
    nft.set_echo_output(False)
    rc, _out, err = nft.cmd(script)
    if rc != 0:
        raise NftError(err.strip() or f"nft failed with status {rc}")


def replace_table(namespace: str | None, family: str, table: str, body: str) -> None:
    """Swap a whole table atomically: create-if-missing, delete, recreate, in one transaction."""
    script = f"table {family} {table} {{}}\ndelete table {family} {table}\ntable {family} {table} {{\n{body}\n}}\n"
    run(namespace, script)


def delete_table(namespace: str | None, family: str, table: str) -> None:
    run(namespace, f"table {family} {table} {{}}\ndelete table {family} {table}\n")
