"""Log set-up of the long-running processes (server, agent): each line carries the request id of the work that
caused it (wire/request_ids.py), as text for people or as one JSON object a line for log shippers."""

from __future__ import annotations

import atexit
import copy
import json
import logging
import logging.handlers
import queue
from datetime import UTC, datetime
from logging.handlers import QueueListener
from typing import Literal, TextIO

from cloudnet.wire import request_ids

LogFormat = Literal["text", "json"]
FORMATS: tuple[LogFormat, ...] = ("text", "json")
TEXT = "%(asctime)s %(levelname)s %(name)s%(request_tag)s: %(message)s"


def printable(text: str, most: int = 200) -> str:
    """`text` (a path, a reason: anything) fit for one bounded line: control characters escaped, cut at `most`."""
    if not text.isprintable():
        text = text.encode("unicode_escape").decode("ascii")
    return text if len(text) <= most else text[:most] + "..."


class RequestIdFilter(logging.Filter):
    """Adds the context's request id to every record: `request_id` (None outside a request) and `request_tag`
    (" [id]" or "", for the text format)."""

    def filter(self, record: logging.LogRecord) -> bool:
        rid = request_ids.current.get()
        record.request_id = rid
        record.request_tag = f" [{rid}]" if rid else ""
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (UTC, ISO 8601), level, logger, message, request_id, exception if any."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
        }
        exception = record.exc_text or (self.formatException(record.exc_info) if record.exc_info else None)
        if exception:
            line["exception"] = exception
        return json.dumps(line, ensure_ascii=True)


class Handoff(logging.handlers.QueueHandler):
    """Hands each record to the writer thread (`setup`): a request never waits for the log's disk or pipe (a
    stalled writer blocked the API's event loop with it). The record crosses ready to write: its message rendered,
    its exception's text made, its request id taken here, where the request's context is. A writer more than
    MAX_BEHIND records behind loses lines, and says how many with the next one it gets."""

    MAX_BEHIND = 100_000

    def __init__(self) -> None:
        super().__init__(queue.Queue(self.MAX_BEHIND))
        self.dropped = 0

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        ready = copy.copy(record)
        ready.message = ready.msg = record.getMessage()
        ready.args = None
        if record.exc_info:
            ready.exc_text = logging.Formatter().formatException(record.exc_info)
            ready.exc_info = None
        return ready

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            if self.dropped:
                note = logging.LogRecord("cloudnet.logs", logging.WARNING, __file__, 0, "%d log lines were dropped: "
                                         "their writer was behind", (self.dropped,), None)  # fmt: skip
                note.request_id, note.request_tag = None, ""
                self.queue.put_nowait(self.prepare(note))
                self.dropped = 0
            self.queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1


def handler(fmt: LogFormat | None = None, stream: TextIO | None = None, tag: bool = True) -> logging.Handler:
    """A handler writing `fmt` lines to `stream` (stderr), each with its request id (`tag`: taken by this handler,
    in the thread that logs; else the record has it already)."""
    # What no format of ours shows, and every record would look up (~a third of a record's making; the API logs a
    # line per write request).
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    made = logging.StreamHandler(stream)
    if tag:
        made.addFilter(RequestIdFilter())
    made.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT))
    return made


_chosen: list[LogFormat] = []


def choose(fmt: LogFormat) -> None:
    """The format `setup` will use: the command's --log-format. (Logging itself starts later, where the process
    starts its work: what libraries log as they are imported, such as Alembic's plug-ins, stays out of it.)"""
    _chosen[:] = [fmt]


def setup(fmt: LogFormat | None = None, level: int = logging.INFO, threaded: bool = True) -> None:
    """Log to stderr in `fmt` (default: the chosen one, else text), unless the process logs somewhere already;
    `threaded`: written by a thread of its own (the API's event loop never waits on the log), else by the thread
    that logs (the agent's: a line is in the log before what it says is done)."""
    fmt = fmt or (_chosen[0] if _chosen else None)
    root = logging.getLogger()
    if root.handlers:  # configured already (as logging.basicConfig, leave it): only make sure lines carry the id
        for existing in root.handlers:
            if not any(isinstance(f, RequestIdFilter) for f in existing.filters):
                existing.addFilter(RequestIdFilter())
        return
    root.setLevel(level)
    if not threaded:
        root.addHandler(handler(fmt))
        return
    handoff, writer = in_thread(fmt)
    atexit.register(writer.stop)  # (before logging's own shutdown: what is queued is written)
    root.addHandler(handoff)


def in_thread(fmt: LogFormat | None = None, stream: TextIO | None = None) -> tuple[Handoff, QueueListener]:
    """A handler that hands records to a writer thread, started, which writes `fmt` lines to `stream` (stderr)."""
    handoff = Handoff()
    handoff.addFilter(RequestIdFilter())
    writer = QueueListener(handoff.queue, handler(fmt, stream, tag=False))
    writer.start()
    return handoff, writer
