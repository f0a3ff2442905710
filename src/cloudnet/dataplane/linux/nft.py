"""nftables through libnftables, in process: one script = one atomic kernel transaction.

One libnftables context is kept per namespace. A fresh context per script costs a new netlink socket
and a cold cache each time, and closing that socket after a set-element delete costs the kernel a
grace period (about 15 ms measured); a kept context makes a one-element delete about 0.3 ms. A
context's socket belongs to the namespace it was opened in, so contexts are keyed by the namespace
file's identity: a namespace deleted and recreated under the same name gets a new context. The netlink
socket that asks for the ruleset generation is kept beside it for the same reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Any

import nftables

from cloudnet.dataplane.linux import netns

_lock = threading.Lock()


@dataclass
class _Kept:
    identity: tuple[int, int]  # (st_dev, st_ino) of the namespace
    ctx: nftables.Nftables
    gen_socket: socket.socket | None = None


# namespace name (None: the process's own) -> what is kept open there
_contexts: dict[str | None, _Kept] = {}


class NftError(RuntimeError):
    pass


def run(namespace: str | None, script: str) -> None:
    """Apply `script` in the namespace as one transaction (all of it or none of it)."""
    with _lock:
        if namespace is None:
            _run(None, script)
        else:
            with netns.entered(namespace):
                _run(namespace, script)


def check(namespace: str | None, script: str) -> None:
    """Have the kernel validate `script` as one transaction and abort it (nft --check): nothing changes."""
    with _lock, netns.entered(namespace) if namespace is not None else contextlib.nullcontext():
        ctx = _context(namespace)
        ctx.set_dry_run(True)
        try:
            _run(namespace, script)
        finally:
            ctx.set_dry_run(False)


def commit(namespace: str, script: str) -> tuple[int, int]:
    """`run`, returning the ruleset generation right before and right after: after == before + 1 proves that the
    transaction was the only one committed in between."""
    with _lock, netns.entered(namespace):
        before = _generation(namespace)
        _run(namespace, script)
        return before, _generation(namespace)


def listing(namespace: str | None, command: str) -> dict[str, Any] | None:
    """What a `list ...` command answers, as nft's JSON document; None when the object listed does not exist."""
    with _lock:
        if namespace is None:
            return _list(None, command)
        with netns.entered(namespace):
            return _list(namespace, command)


def _list(namespace: str | None, command: str) -> dict[str, Any] | None:
    ctx = _context(namespace)
    ctx.set_json_output(True)
    try:
        rc, out, err = ctx.cmd(command)
    finally:
        ctx.set_json_output(False)
    if rc != 0:
        if "No such file or directory" in err:
            return None
        raise NftError(err.strip() or f"nft failed with status {rc}")
    return json.loads(out)  # type: ignore[no-any-return]


# Netlink: the generation of a namespace's nftables ruleset, which every committed transaction increments.
NETLINK_NETFILTER, NFNL_SUBSYS_NFTABLES, NFT_MSG_NEWGEN, NFT_MSG_GETGEN, NFTA_GEN_ID = 12, 10, 15, 16, 1
NLM_F_REQUEST = 1


def generation(namespace: str | None) -> int:
    """The namespace's ruleset generation (nft's GETGEN): unchanged means nothing was committed there since."""
    with _lock:
        if namespace is None:
            return _generation(None)
        with netns.entered(namespace):
            return _generation(namespace)


def _generation(namespace: str | None) -> int:
    kept = _kept(namespace)
    if kept.gen_socket is None:  # opened inside the namespace, kept: closing it right after a commit would wait
        kept.gen_socket = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        kept.gen_socket.settimeout(5)
    sock = kept.gen_socket
    header = struct.pack("=LHHLL", 20, (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETGEN, NLM_F_REQUEST, 1, 0)
    sock.send(header + struct.pack("=BBH", socket.AF_UNSPEC, 0, 0))
    data = sock.recv(4096)
    length, kind = struct.unpack_from("=LH", data)
    if kind != (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWGEN:
        raise NftError(f"unexpected answer to GETGEN (message type {kind})")
    offset = 20  # after the netlink header and nfgenmsg
    while offset + 4 <= min(length, len(data)):
        size, kind = struct.unpack_from("=HH", data, offset)
        if kind & 0x3FFF == NFTA_GEN_ID and size >= 8:
            return int(struct.unpack_from(">I", data, offset + 4)[0])
        offset += max(4, (size + 3) & ~3)
    raise NftError("the kernel's answer to GETGEN carries no generation")


def forget(namespace: str | None) -> None:
    """Drop the namespace's context (and with it the netlink sockets that keep the namespace alive)."""
    with _lock:
        _drop(_contexts.pop(namespace, None))


def _drop(kept: _Kept | None) -> None:
    if kept is not None and kept.gen_socket is not None:
        kept.gen_socket.close()


def _kept(namespace: str | None) -> _Kept:
    st = os.stat("/proc/thread-self/ns/net")  # the thread is already inside the namespace
    identity = (st.st_dev, st.st_ino)
    kept = _contexts.get(namespace)
    if kept is not None and kept.identity == identity:
        return kept
    _drop(kept)
    ctx = nftables.Nftables()  # created inside the namespace: its netlink socket belongs there
    ctx.set_echo_output(False)
    kept = _contexts[namespace] = _Kept(identity, ctx)
    return kept


def _context(namespace: str | None) -> nftables.Nftables:
    return _kept(namespace).ctx


def _run(namespace: str | None, script: str) -> None:
    rc, _out, err = _context(namespace).cmd(script)
    if rc != 0:
        raise NftError(err.strip() or f"nft failed with status {rc}")


def replace_table(namespace: str | None, family: str, table: str, body: str) -> None:
    """Swap a whole table atomically: create-if-missing, delete, recreate, in one transaction."""
    script = f"table {family} {table} {{}}\ndelete table {family} {table}\ntable {family} {table} {{\n{body}\n}}\n"
    run(namespace, script)


def delete_table(namespace: str | None, family: str, table: str) -> None:
    run(namespace, f"table {family} {table} {{}}\ndelete table {family} {table}\n")
