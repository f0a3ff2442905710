"""`cloudnet-mdata get|put|delete|list`: the guest side of the SmartOS metadata protocol.

Behaves like joyent/mdata-client (mdata-get, mdata-put, mdata-delete, mdata-list; reference/metadata.md
§2.2-2.7): it resets the session with a bare newline (expecting `invalid command`), negotiates v2 and falls
back to v1 for reads, drops frames with a bad length, CRC or request id, and exits 0 (success), 1 (no such
key), 2 (error, including a FAILURE answer) or 3 (usage). Unlike mdata-client it gives up after an overall
deadline instead of retrying forever (a known hang: smartos-live issue #990).

The socket is the first of `--socket`, $CLOUDNET_MDATA_SOCKET, or the first existing one of mdata-client's
zone paths (/.zonecontrol/metadata.sock, /native/.zonecontrol/metadata.sock for LX, /var/run/smartdc/...).
Standard library only, so it runs in any guest with Python.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from cloudnet.wire.mdata_protocol import (
    DELETE,
    FAILURE,
    GET,
    INVALID_COMMAND,
    KEYS,
    NEGOTIATE_V2,
    NOTFOUND,
    PUT,
    SUCCESS,
    V2_OK,
    LineSplitter,
    Response,
    V1Reader,
    new_reqid,
    parse_v2_response,
    put_payload,
    v2_request,
)

EXIT_OK, EXIT_NOTFOUND, EXIT_ERROR, EXIT_USAGE = 0, 1, 2, 3
ENV_SOCKET = "CLOUDNET_MDATA_SOCKET"
SOCKET_PATHS = ("/.zonecontrol/metadata.sock", "/native/.zonecontrol/metadata.sock", "/var/run/smartdc/metadata.sock")
# mdata-client's timeouts: the reset reply within 2 s, v1 answers within 6 s, v2 answers within 45 s
# (a PUT waits for the store).
RESET_TIMEOUT, V1_TIMEOUT, V2_TIMEOUT = 2.0, 6.0, 45.0
DEFAULT_DEADLINE = 90.0


class MdataError(Exception):
    """Permanent: retrying will not help (no socket, a v1 host asked to write)."""


class Timeout(Exception):
    """No valid answer in time: reset the protocol and try again."""


class Session:
    """One connection to the metadata socket, reset and negotiated as mdata-client does."""

    def __init__(self, path: str, connect_timeout: float = RESET_TIMEOUT) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(connect_timeout)
        try:
            self.sock.connect(path)
        except ConnectionRefusedError:
            self.sock.close()
            raise Timeout from None  # the socket is there but its agent is restarting: try again
        except OSError as exc:
            self.sock.close()
            raise MdataError(f"could not open metadata socket {path}: {exc.strerror or exc}") from None
        self.lines = LineSplitter()
        self.ready: list[bytes] = []
        self.v2 = False

    def close(self) -> None:
        self.sock.close()

    def readline(self, deadline: float) -> bytes:
        while not self.ready:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Timeout
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                raise Timeout from None
            except OSError as exc:
                raise MdataError(f"metadata socket read failed: {exc.strerror or exc}") from None
            if not data:
                raise MdataError("metadata socket closed by the host")
            self.ready.extend(self.lines.feed(data))
        return self.ready.pop(0)

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise MdataError(f"metadata socket write failed: {exc.strerror or exc}") from None

    def start(self) -> None:
        """Reset (a bare newline must be answered `invalid command`), then NEGOTIATE V2 or stay on v1."""
        self.send(b"\n")
        deadline = time.monotonic() + RESET_TIMEOUT
        while self.readline(deadline) + b"\n" != INVALID_COMMAND:
            pass  # leftovers of an earlier exchange
        self.send(NEGOTIATE_V2)
        self.v2 = self.readline(time.monotonic() + V1_TIMEOUT) + b"\n" == V2_OK

    def request(self, op: str, arg: bytes | None = None) -> Response:
        if self.v2:
            reqid = new_reqid()
            self.send(v2_request(reqid, op, arg))
            deadline = time.monotonic() + V2_TIMEOUT
            while True:  # frames that fail the checks, or answer another request, are dropped
                answer = parse_v2_response(self.readline(deadline), reqid)
                if answer is not None:
                    return answer
        if op not in (GET, KEYS):
            raise MdataError("the metadata service only speaks protocol v1, which has no PUT or DELETE")
        self.send(op.encode() + (b" " + arg if arg else b"") + b"\n")
        reader, deadline = V1Reader(), time.monotonic() + V1_TIMEOUT
        while True:
            answer = reader.feed(self.readline(deadline))
            if answer is not None:
                return answer


def find_socket(option: str | None) -> str:
    if option:
        return option
    if os.environ.get(ENV_SOCKET):
        return os.environ[ENV_SOCKET]
    for path in SOCKET_PATHS:
        if Path(path).exists():
            return path
    raise MdataError(f"no metadata socket found (tried {', '.join(SOCKET_PATHS)}; set --socket or ${ENV_SOCKET})")


def call(path: str, op: str, arg: bytes | None, deadline: float) -> Response:
    """One request, retried on a fresh session after a timeout (as mdata-client does) until `deadline`."""
    while True:
        session: Session | None = None
        try:
            session = Session(path)
            session.start()
            return session.request(op, arg)
        except Timeout:
            if time.monotonic() >= deadline:
                raise MdataError("no answer from the metadata service") from None
            print("receive timeout, resetting protocol...", file=sys.stderr)
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        finally:
            if session is not None:
                session.close()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # mdata-client's usage status is 3, not argparse's 2
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="cloudnet-mdata", description="Read and write this instance's metadata (SmartOS protocol).")
    p.add_argument("--socket", help=f"metadata socket (default: ${ENV_SOCKET}, else {SOCKET_PATHS[0]} ...)")
    p.add_argument("--timeout", type=float, default=DEFAULT_DEADLINE, help="give up after this many seconds")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("get", help="print the value of a key").add_argument("key")
    put = sub.add_parser("put", help="set a key (the value is read from stdin when not given)")
    put.add_argument("key")
    put.add_argument("value", nargs="?")
    sub.add_parser("delete", help="remove a key").add_argument("key")
    sub.add_parser("list", help="list the keys")
    return p


def run(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    deadline = time.monotonic() + args.timeout
    key: str | None = getattr(args, "key", None)
    if key is not None and not key.strip():
        print("cloudnet-mdata: a key cannot be empty", file=sys.stderr)
        return EXIT_USAGE
    try:
        path = find_socket(args.socket)
        if args.command == "get":
            answer = call(path, GET, key.encode() if key else None, deadline)
        elif args.command == "list":
            answer = call(path, KEYS, None, deadline)
        elif args.command == "delete":
            answer = call(path, DELETE, key.encode() if key else None, deadline)
        else:
            value = args.value.encode() if args.value is not None else sys.stdin.buffer.read()
            answer = call(path, PUT, put_payload(key or "", value), deadline)
    except MdataError as exc:
        print(f"cloudnet-mdata: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return _report(args.command, key, answer)


def _report(command: str, key: str | None, answer: Response) -> int:
    if answer.code == NOTFOUND:
        print(f"No metadata for '{key}'", file=sys.stderr)
        return EXIT_NOTFOUND
    if answer.code == FAILURE or answer.code != SUCCESS:
        reason = (answer.value or b"").decode(errors="replace")
        print(f"cloudnet-mdata: {command} {key or ''}".rstrip() + f" failed{': ' + reason if reason else ''}",
              file=sys.stderr)  # fmt: skip
        return EXIT_ERROR
    value = answer.value or b""
    if command == "get" or (command == "list" and value):  # mdata-get ends what it prints with a newline
        out = sys.stdout.buffer
        out.write(value if value.endswith(b"\n") else value + b"\n")
        out.flush()
    return EXIT_OK


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
