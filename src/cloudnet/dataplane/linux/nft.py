"""nftables through libnftables, in process: one script = one atomic kernel transaction.

One libnftables context is kept per namespace. A fresh context per script costs a new netlink socket
and a cold cache each time, and closing that socket after a set-element delete costs the kernel a
grace period (about 15 ms measured); a kept context makes a one-element delete about 0.3 ms. A
context's socket belongs to the namespace it was opened in, so contexts are keyed by the namespace
file's identity: a namespace deleted and recreated under the same name gets a new context. The netlink
socket that asks for the ruleset generation is kept beside it for the same reason.

Each namespace has a lock of its own, held while its context and socket are used: a step that hangs inside
libnftables or waits out a netlink answer in one router's namespace (and is abandoned by dataplane/steps.py)
holds up only that namespace, never the NAT of the other routers or the host's firewall.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import nftables

from cloudnet.dataplane.kernel import netns


@dataclass
class _Kept:
    identity: tuple[int, int]  # (st_dev, st_ino) of the namespace
    ctx: nftables.Nftables
    gen_socket: socket.socket | None = None


@dataclass
class _Namespace:
    """What is kept open in one namespace, and the lock held while it is used."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    kept: _Kept | None = None
    forgotten: bool = False  # dropped from _namespaces (perhaps while in use: then its user closes what it kept)


# How long a call waits for a namespace another thread uses: far longer than any transaction takes, shorter than a
# step's time limit, so that a step behind one that hangs there fails with the reason instead of hanging too.
LOCK_WAIT = 5.0
# namespace name (None: the process's own) -> what is kept open there
_namespaces: dict[str | None, _Namespace] = {}
_registry = threading.Lock()  # only around lookups in _namespaces: never held while waiting for a namespace


class NftError(RuntimeError):
    pass


@contextlib.contextmanager
def _inside(namespace: str | None) -> Iterator[_Namespace]:
    """The calling thread inside the namespace (None: where it is, the process's own), holding its lock."""
    with _registry:
        held = _namespaces.setdefault(namespace, _Namespace())
    if not held.lock.acquire(timeout=LOCK_WAIT):
        where = f"namespace {namespace}" if namespace is not None else "the agent's namespace"
        raise NftError(f"nftables in {where} still in use by another thread after {LOCK_WAIT:g} s")
    try:
        with netns.entered(namespace) if namespace is not None else contextlib.nullcontext():
            yield held
    finally:
        held.lock.release()
        if held.forgotten:
            _drop_unused(held)


def run(namespace: str | None, script: str) -> None:
    """Apply `script` in the namespace as one transaction (all of it or none of it)."""
    with _inside(namespace) as held:
        _run(held, script)


def check(namespace: str | None, script: str) -> None:
    """Have the kernel validate `script` as one transaction and abort it (nft --check): nothing changes."""
    with _inside(namespace) as held:
        ctx = _context(held)
        ctx.set_dry_run(True)
        try:
            _run(held, script)
        finally:
            ctx.set_dry_run(False)


def commit(namespace: str, script: str) -> tuple[int, int]:
    """`run`, returning the ruleset generation right before and right after: after == before + 1 proves that the
    transaction was the only one committed in between."""
    with _inside(namespace) as held:
        before = _generation(held)
        _run(held, script)
        return before, _generation(held)


def listing(namespace: str | None, command: str) -> dict[str, Any] | None:
    """What a `list ...` command answers, as nft's JSON document; None when the object listed does not exist."""
    with _inside(namespace) as held:
        ctx = _context(held)
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
    with _inside(namespace) as held:
        return _generation(held)


def _generation(held: _Namespace) -> int:
    kept = _kept(held)
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
    """Drop the namespace's context (and with it the netlink sockets that keep the namespace alive). Never waits:
    if the namespace is in use (or its user hangs), whoever holds it closes what it kept when it lets go."""
    with _registry:
        held = _namespaces.pop(namespace, None)
    if held is None:
        return
    held.forgotten = True
    _drop_unused(held)


def _drop_unused(held: _Namespace) -> None:
    """Close what a forgotten namespace kept, unless it is in use: its user does when it lets go (each checks after
    the other has marked or released it, so one of them does)."""
    if held.lock.acquire(blocking=False):
        try:
            _drop(held)
        finally:
            held.lock.release()


def _drop(held: _Namespace) -> None:
    if held.kept is not None and held.kept.gen_socket is not None:
        held.kept.gen_socket.close()
    held.kept = None


def _kept(held: _Namespace) -> _Kept:
    st = os.stat("/proc/thread-self/ns/net")  # the thread is already inside the namespace
    identity = (st.st_dev, st.st_ino)
    if held.kept is not None and held.kept.identity == identity:
        return held.kept
    _drop(held)
    ctx = nftables.Nftables()  # created inside the namespace: its netlink socket belongs there
    ctx.set_echo_output(False)
    held.kept = _Kept(identity, ctx)
    return held.kept


def _context(held: _Namespace) -> nftables.Nftables:
    return _kept(held).ctx


def _run(held: _Namespace, script: str) -> None:
    rc, _out, err = _context(held).cmd(script)
    if rc != 0:
        raise NftError(err.strip() or f"nft failed with status {rc}")


def replace_table(namespace: str | None, family: str, table: str, body: str) -> None:
    """Swap a whole table atomically: create-if-missing, delete, recreate, in one transaction."""
    script = f"table {family} {table} {{}}\ndelete table {family} {table}\ntable {family} {table} {{\n{body}\n}}\n"
    run(namespace, script)


def delete_table(namespace: str | None, family: str, table: str) -> None:
    run(namespace, f"table {family} {table} {{}}\ndelete table {family} {table}\n")
