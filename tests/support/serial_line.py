"""A VM's serial port without a VM: what QEMU does with `-chardev socket,...,reconnect=1 -device isa-serial`.

The guest's end is a pty: its slave is the guest's /dev/ttyS1 (a real tty, with a line discipline: cooked mode,
echo and ONLCR until a client sets raw mode, as on a guest's UART), and its master is carried over a client
connection to the agent's socket, reconnecting when it closes. As with QEMU, what the guest writes while no
connection is up is lost, and the connection is not read while the guest does not take what it was sent.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import socket
import threading
import time
from pathlib import Path


class SerialPort:
    def __init__(self, path: Path, reconnect: float = 0.05) -> None:
        self.path = str(path)
        self.reconnect = reconnect
        self.master, self.slave = os.openpty()  # the slave fd stays open: the tty lives while the test runs
        self.device = os.ttyname(self.slave)
        os.set_blocking(self.master, False)
        self.connects = 0  # connections made so far (each VMM start or reconnect)
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="serial-port", daemon=True)
        self._thread.start()

    def wait_connected(self, count: int = 1, timeout: float = 10) -> None:
        """Until the port has connected `count` times in all."""
        deadline = time.monotonic() + timeout
        while self.connects < count:
            assert time.monotonic() < deadline, f"the serial port never connected ({self.connects}/{count})"
            time.sleep(0.01)  # polling a counter the bridge thread bumps

    def drop(self) -> None:
        """The VMM restarts: its connection closes, and the port connects again."""
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.drop()
        for fd in (self.master, self.slave):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _connect(self) -> socket.socket | None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.path)
        except OSError:
            sock.close()
            return None
        sock.setblocking(False)
        with self._lock:
            self._sock = sock
            self.connects += 1
        return sock

    def _run(self) -> None:
        to_guest = b""  # from the agent, not yet taken by the guest's UART (the pty)
        while not self._stop.is_set():
            with self._lock:
                sock = self._sock
            if sock is None:
                to_guest = b""
                if self._connect() is None:
                    self._stop.wait(self.reconnect)
                continue
            sel = selectors.DefaultSelector()
            try:
                sel.register(self.master, selectors.EVENT_READ | (selectors.EVENT_WRITE if to_guest else 0))
                if not to_guest:  # the UART is full: QEMU stops reading the socket
                    sel.register(sock, selectors.EVENT_READ)
                events = sel.select(0.05)
            except (OSError, ValueError):  # closed by drop() meanwhile
                continue
            finally:
                sel.close()
            for key, mask in events:
                if key.fd == self.master and mask & selectors.EVENT_READ:
                    data = _read(self.master)
                    with contextlib.suppress(OSError):
                        sock.sendall(data)  # nobody connected: lost, as on QEMU
                if key.fd == self.master and mask & selectors.EVENT_WRITE:
                    to_guest = to_guest[_write(self.master, to_guest) :]
                if key.fd != self.master:
                    try:
                        data = sock.recv(65536)
                    except OSError:
                        data = b""
                    if not data:
                        self.drop()
                    to_guest += data


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EIO):
            return b""
        raise


def _write(fd: int, data: bytes) -> int:
    try:
        return os.write(fd, data)
    except BlockingIOError:
        return 0
