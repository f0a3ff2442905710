"""SmartOS metadata over a VM's second serial port (RFD 69's KVM case; reference/vms-and-operations.md §A5).

Who listens. SmartOS has QEMU listen (`-chardev socket,server,nowait` on <zoneroot>/tmp/vm.ttyb) and its agent
connect, retrying every 100 ms and again on every zone state change, because the socket lives in a zone root
and a listener there would be the unsafe-path problem RFD 69 is about. cloudnet does it the other way round:
the AGENT listens at <state>/vmserial/<uuid>/ttyb (wire/mdata_paths.serial_socket) and QEMU connects as a
client with `reconnect` (wire/mdata_serial.serial_qemu_args). Because:
- the path is the agent's, in a directory only root writes, made as the zone sockets are (mdata_sockets: an
  O_NOFOLLOW directory descriptor, bound under a temporary name and renamed into place), so a VMM, which
  may run unprivileged, never creates anything the root agent then opens;
- the agent needs no watch on VMM lifecycles (SmartOS's reconnect on zone state changes and every minute):
  a restarted VMM connects again by itself, and an agent restart is bridged by QEMU's reconnect (the socket
  file stays; QEMU's next attempt reaches the new agent's socket);
- the VM may start before its socket exists (QEMU keeps retrying) and the agent never waits for a VMM.
The socket is mode 0660, its directories 0710, all of group `vm_group` (the VMMs' group; default the agent's):
anyone who can connect speaks as the guest, so the group is the trust boundary.

One stream per VM. A serial port is one byte stream, so an instance has one stream, and a newer connection
REPLACES it, as soon as it sends its first byte. A VMM only connects when it has no stream (it started or
restarted), so the newer connection is the live one and the old one a VMM that died or hung without its socket
closing; refusing instead would leave such a VM without metadata until the dead stream closed, and let whoever
connected first keep the port. Replacing at the first byte rather than at connect leaves the stream alone when
something only probes the socket (an agent checking whether the path is served, mdata_service._ensure, which
connects and closes); until then the newer connection waits beside the stream, and a newer one still takes
its place, so there are never more than two. Two VMMs for one VM (a misconfiguration) take turns, logged.

What a tty does to bytes (SerialConnection): CR LF and a lone CR end a line like LF (a guest tty not in raw
mode sends ONLCR's CR LF); lines shaped like our own replies are dropped, not answered (a guest tty left in
cooked mode echoes what we send, and answering the echo would loop); a half line a guest abandoned is glued
to its next request and answered as garbage is, and the line after works (clients reset with a bare LF, as
cloud-init's flush and mdata-client do); over-long lines are skipped to their end and writes rate-limited as
on the zone sockets (mdata_connection); and the stream is never closed for idleness: a guest may be quiet
for hours.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
from pathlib import Path

from cloudnet.agent.metadata.mdata_connection import Answer, Answerer, Connection, Instance
from cloudnet.agent.metadata.mdata_sockets import Access
from cloudnet.wire.mdata_protocol import looks_like_reply

log = logging.getLogger("cloudnet.mdata")


def vm_access(gid: int | None) -> Access:
    """Directories traversable and the socket connectable by group `gid` only (and root)."""
    return Access(0o710, 0o660, gid)


def blocked_at(directory: Path, gid: int | None) -> Path | None:
    """The first directory from `directory` up that group `gid` may not search (so a VMM of that group cannot
    reach its socket), if any. The agent only warns: opening the state directory to a group is the operator's
    call (`setfacl -m g:GROUP:x DIR`); a directory with an ACL is taken to be so configured."""
    if gid is None:
        return None
    for d in (directory, *directory.parents):
        st = os.stat(d)
        if st.st_mode & 0o001 or (st.st_gid == gid and st.st_mode & 0o010):
            continue
        try:
            os.getxattr(d, "system.posix_acl_access")
            continue
        except OSError:
            return d
    return None


class LineEnds:
    """Turns CR LF and a lone CR into LF, also when a CR LF is split between two reads."""

    __slots__ = ("_cr",)

    def __init__(self) -> None:
        self._cr = False

    def feed(self, data: bytes) -> bytes:
        if self._cr and data[:1] == b"\n":
            data = data[1:]  # the LF of a CR LF whose CR ended the previous read (and the line)
        self._cr = data[-1:] == b"\r"
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        return data


class SerialConnection(Connection):
    """A VMM's stream for a VM's serial port, never closed for idleness. The instance's `stream` is the one
    that connected first or spoke last; a newer connection waits beside it (one at most: the newest) until
    it sends a byte, and then replaces it."""

    closes_when_idle = False

    def __init__(self, service: Answerer, inst: Instance) -> None:
        super().__init__(service, inst)
        self.ends = LineEnds()
        self.peer: tuple[int, int] | None = None  # the connecting process's (pid, uid), for logs and tests

    def admit(self) -> bool:
        self.peer = _peer(self)
        if self.inst.stream is None:
            self.inst.stream = self
            log.info("instance %s: VMM connected to the metadata serial port (%s)", self.inst.id, _who(self))
        for other in list(self.inst.connections):
            if other is not self.inst.stream:  # an older standby that never spoke: this one takes its place
                other.abort()
                self.inst.connections.discard(other)
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self.inst.stream is self:
            self.inst.stream = None

    def data_received(self, data: bytes) -> None:
        old = self.inst.stream
        if old is not self:  # a standby speaks: it is the VMM now (the old stream's VMM hung or was replaced)
            log.warning("instance %s: serial connection (%s) replaces the previous one (%s)", self.inst.id,
                        _who(self), _who(old) if old else "gone")  # fmt: skip
            if old is not None:
                old.abort()
                self.inst.connections.discard(old)
            self.inst.stream = self
        super().data_received(self.ends.feed(data))

    def answer(self, line: bytes) -> Answer:
        if looks_like_reply(line):  # our own reply, echoed by a guest tty in cooked mode
            self.inst.dropped += 1
            return None
        return super().answer(line)


def _peer(conn: Connection) -> tuple[int, int] | None:
    """(pid, uid) of the process that connected (SO_PEERCRED), if the transport tells."""
    sock = conn.transport.get_extra_info("socket") if conn.transport is not None else None
    if sock is None:
        return None
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    pid, uid, _gid = struct.unpack("3i", raw)
    return pid, uid


def _who(conn: Connection) -> str:
    peer = getattr(conn, "peer", None)
    return f"pid {peer[0]} uid {peer[1]}" if peer else "unknown peer"
