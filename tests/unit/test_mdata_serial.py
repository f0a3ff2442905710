"""A VM's serial metadata channel, the pure parts: its path, QEMU's arguments for it, what a tty's line ends
become, and which lines are echoes of the server's own replies."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cloudnet.agent.metadata.mdata_serial import LineEnds, blocked_at
from cloudnet.config import group_id
from cloudnet.wire.mdata_paths import serial_socket, zone_socket
from cloudnet.wire.mdata_protocol import (
    FAILURE,
    NOTFOUND,
    SUCCESS,
    LineSplitter,
    looks_like_reply,
    v1_response,
    v2_request,
    v2_response,
)
from cloudnet.wire.mdata_serial import parse_qemu_version, serial_qemu_args

IID = "0b6b1f5c-3d1e-4a4e-9d3c-6f4b2a1e8c7d"


def test_paths() -> None:
    assert serial_socket(Path("/var/lib/cloudnet"), IID) == Path(f"/var/lib/cloudnet/vmserial/{IID}/ttyb")
    assert zone_socket(Path("/s"), IID) == Path(f"/s/zonecontrol/{IID}/metadata.sock")
    for bad in ("../etc", f"{IID}/..", IID.upper(), "", "x"):
        with pytest.raises(ValueError):
            serial_socket(Path("/s"), bad)


@pytest.mark.parametrize(
    ("version", "reconnect"),
    [("7.2.22", "reconnect=1"), ((9, 1), "reconnect=1"), ((9, 2, 0), "reconnect-ms=1000"),
     ("QEMU emulator version 10.0.13 (Debian 1:10.0.13+ds-0+deb13u1)\nCopyright", "reconnect-ms=1000")],
)  # fmt: skip
def test_qemu_args(version: str | tuple[int, ...], reconnect: str) -> None:
    assert serial_qemu_args(Path("/s/vmserial/x/ttyb"), version) == [
        "-chardev", f"socket,id=cnmd,path=/s/vmserial/x/ttyb,{reconnect}",
        "-device", "isa-serial,chardev=cnmd,index=1",
    ]  # fmt: skip


def test_qemu_args_quote_commas() -> None:
    assert serial_qemu_args("/a,b/ttyb", "8.0")[1] == "socket,id=cnmd,path=/a,,b/ttyb,reconnect=1"


def test_qemu_version() -> None:
    assert parse_qemu_version("QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)") == (7, 2)
    with pytest.raises(ValueError):
        parse_qemu_version("qemu")


def lines(chunks: list[bytes]) -> list[bytes]:
    ends, splitter = LineEnds(), LineSplitter()
    return [line for chunk in chunks for line in splitter.feed(ends.feed(chunk))]


def test_line_ends() -> None:
    assert lines([b"a\r\nb\rc\n"]) == [b"a", b"b", b"c"]
    assert lines([b"a\r", b"\nb\r", b"\r\n"]) == [b"a", b"b", b""]  # a CR LF split over two reads is one end
    assert lines([b"a\r", b"b\n"]) == [b"a", b"b"]
    assert lines([b"\n", b"\n"]) == [b"", b""]  # cloud-init's flush: each bare LF is a line


def test_echoed_replies() -> None:
    rid = b"0badf00d"
    for reply in (b"invalid command\n", b"V2_OK\n", v1_response(NOTFOUND), v1_response(FAILURE), b".\n",
                  v2_response(rid, SUCCESS, b"value"), v2_response(rid, NOTFOUND), v2_response(rid, FAILURE, b"x"),
                  b"V2_OK\r\n"):  # fmt: skip
        assert looks_like_reply(reply), reply
    for request in (b"\n", b"NEGOTIATE V2\n", b"GET sdc:uuid\n", v2_request(rid, "GET", b"k"), b"KEYS\n",
                    v2_request(rid, "PUT", b"a b")):  # fmt: skip
        assert not looks_like_reply(request), request


def test_vm_group() -> None:
    assert group_id(None) is None
    assert group_id("root") == group_id("0") == 0
    with pytest.raises(ValueError, match="no group 'no-such-group-here'"):
        group_id("no-such-group-here")


def test_blocked_at(tmp_path: Path) -> None:
    """The first directory up from a serial root that the VMMs' group may not search: the agent warns of it."""
    root = tmp_path / "state" / "vmserial"
    root.mkdir(parents=True, mode=0o710)
    os.chown(root, -1, 65534)
    os.chmod(root.parent, 0o700)
    assert blocked_at(root, 65534) == root.parent
    assert blocked_at(root, None) is None  # the agent's own group: nothing to say
    os.chmod(root.parent, 0o711)
    assert blocked_at(root, 65534) not in (root, root.parent)  # further up: pytest's own 0700 directories
