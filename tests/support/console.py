"""A VM's serial console on a pipe: wait for a line, run a shell command and read its output.

A reader thread drains the pipe into a transcript as the guest writes (a guest is never stalled on a full pipe,
and a failure can show everything the guest said). `expect` searches from a cursor that each match advances, so
successive waits read the console in order.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import threading
import time
from typing import IO

# The guest's canonical-mode tty takes lines of at most 4095 characters.
MAX_LINE = 4000


class ConsoleError(AssertionError):
    """The guest did not say what was expected in time, or its VMM is gone (an AssertionError: a test fails)."""


class GuestCommandError(ConsoleError):
    def __init__(self, command: str, status: int, output: str) -> None:
        super().__init__(f"guest command exited {status}: {command}\n{output}")
        self.command, self.status, self.output = command, status, output


class Console:
    def __init__(self, reader: IO[bytes], writer: IO[bytes] | None, name: str = "guest") -> None:
        self.name = name
        self._reader, self._writer = reader, writer
        self._text = ""
        self._cursor = 0
        self._closed = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._drain, name=f"console-{name}", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        fd = self._reader.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            with self._changed:
                if not chunk:
                    self._closed = True
                else:  # the tty ends lines with \r\n
                    self._text += chunk.decode("utf-8", "replace").replace("\r", "")
                self._changed.notify_all()
            if not chunk:
                return

    @property
    def transcript(self) -> str:
        with self._changed:
            return self._text

    def expect(self, pattern: str | re.Pattern[str], timeout: float) -> re.Match[str]:
        """The first match of `pattern` after the cursor, waiting up to `timeout` seconds; the cursor moves past it.
        Output arrives in pieces: a pattern whose last group could match a partial line must say what ends it."""
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                match = regex.search(self._text, self._cursor)
                if match is not None:
                    self._cursor = match.end()
                    return match
                left = deadline - time.monotonic()
                if self._closed or left <= 0:
                    why = "console closed (the VMM exited)" if self._closed else f"nothing matched in {timeout:g} s"
                    raise ConsoleError(f"{self.name}: {why} waiting for {regex.pattern!r}; last output:\n"
                                       f"{self._text[-3000:]}")  # fmt: skip
                self._changed.wait(left)

    def send(self, text: str) -> None:
        if self._writer is None:
            raise ConsoleError(f"{self.name}: this console is read-only")
        self._writer.write(text.encode())
        self._writer.flush()

    def run(self, command: str, timeout: float = 30, check: bool = True) -> str:
        """Run `command` with the guest's sh (its own `sh -c`, stdin from /dev/null) and return its output
        (stdout and stderr); GuestCommandError if it exits non-zero and `check`."""
        status, output = self.run_status(command, timeout)
        if check and status != 0:
            raise GuestCommandError(command, status, output)
        return output

    def run_status(self, command: str, timeout: float = 30) -> tuple[int, str]:
        nonce = secrets.token_hex(4)
        # The markers are quoted apart on the typed line, so a tty echoing it does not match them.
        line = f'echo "@@B""{nonce}"; sh -c {shlex.quote(command)} </dev/null 2>&1; echo "@@E""{nonce} $?"\n'
        if len(line) > MAX_LINE:
            raise ValueError(f"command too long for the guest's tty ({len(line)} > {MAX_LINE} characters)")
        self.send(line)
        self.expect(f"@@B{nonce}\n", timeout)
        start = self._cursor
        end = self.expect(rf"@@E{nonce} (\d+)\n", timeout)
        return int(end[1]), self.transcript[start : end.start()]
