"""Per-object steps of a dataplane pass: each isolated, time-bounded, and retried with backoff when it fails.

A driver converges many objects (networks, instances, pool devices, metadata namespaces, routers, VFs) in one pass.
One of them failing must not stop the others: each object's work runs as a step under its own key
("instance:<id>", "router:<id>", ...). A step that raises marks its object failed with the reason (the driver
reports it: a port ERROR / binding_failed with `binding:vif_details.reason`, other objects in the host's report),
and the pass goes on. The failed object is not tried again before its backoff expires (0.5 s, doubling up to 5
minutes), so a poisoned object costs the host nothing between attempts; a changed desired state for it (a new
fingerprint) is retried at once.

A step also runs under a time limit, on a worker thread, so that nothing an object does can hold the host: if the
limit passes, the object is marked failed ("timed out"), the worker is abandoned to finish (or hang) on its own
(its thread ends when the step returns), and the pass ends with StepTimedOut. Until that attempt returns, the
object is not tried again: a hung object costs one thread and one pass, not one of each per retry. The driver's
sockets may still be in the abandoned worker's hands, so the next pass starts afresh with new ones.
"""

from __future__ import annotations

import logging
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from cloudnet import metrics

log = logging.getLogger(__name__)
T = TypeVar("T")
FIRST_RETRY = 0.5
MAX_RETRY = 300.0
DEFAULT_TIMEOUT = 10.0


class StepFailed(Exception):
    """An object's step failed (now, or earlier and it is still backing off); str() is the reason."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(reason)
        self.key = key
        self.reason = reason


class StepTimedOut(Exception):
    """A step ran past its time limit: its object is marked failed; the pass must end (sockets may be in use)."""


@dataclass
class Failure:
    reason: str
    since: str  # when it first failed (UTC, ISO 8601)
    attempts: int
    retry_at: float  # monotonic
    fingerprint: Any = None  # what was being applied: a different one is tried at once

    def as_report(self, key: str, now: float) -> dict[str, Any]:
        return {"object": key, "reason": self.reason, "since": self.since, "attempts": self.attempts,
                "retry_in": math.ceil(max(0.0, self.retry_at - now) * 10) / 10}  # fmt: skip  # (never early)


class _Worker:
    """One daemon thread running steps one at a time (never joined: an abandoned one must not hold the exit)."""

    def __init__(self, init: Callable[[], None] | None) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], _Job]] = queue.SimpleQueue()
        self._init = init
        self.retired = False  # abandoned: the thread ends once its job returns (if it ever does)
        self.thread = threading.Thread(target=self._run, name="cloudnet-step", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        _inside.active = True
        broken: BaseException | None = None
        try:
            if self._init is not None:
                self._init()
        except Exception as exc:  # (e.g. the host namespace went): every step on this worker fails with it
            broken = exc
        while not self.retired:
            fn, job = self._jobs.get()
            try:
                if broken is not None:
                    raise broken
                job.result = fn()
            except BaseException as exc:
                job.error = exc
            job.done.set()

    def submit(self, fn: Callable[[], Any]) -> _Job:
        job = _Job()
        self._jobs.put((fn, job))
        return job


@dataclass
class _Job:
    result: Any = None
    error: BaseException | None = None

    def __post_init__(self) -> None:
        self.done = threading.Event()


_inside = threading.local()


class Steps:
    def __init__(
        self, timeout: float = DEFAULT_TIMEOUT, clock: Callable[[], float] = time.monotonic,
        thread_init: Callable[[], None] | None = None,
    ) -> None:  # fmt: skip
        """`thread_init` runs first on every worker thread (the Linux driver's enter the host namespace: its
        netlink sockets are per thread, opened where the thread is when it first uses one)."""
        self.timeout = timeout
        self.clock = clock
        self.thread_init = thread_init
        self.failures: dict[str, Failure] = {}
        self._hung: dict[str, _Job] = {}  # objects whose timed-out attempt has not returned yet
        self._worker: _Worker | None = None

    def restart(self) -> None:
        """Use a new worker from the next step on (its `thread_init` must run again: the namespace it entered
        was remade)."""
        self._worker = None

    def run(self, key: str, fn: Callable[[], T], fingerprint: Any = None) -> T:
        """Run `fn` as the step of object `key`; StepFailed when it fails (or is still backing off)."""
        failure = self.failures.get(key)
        if failure is not None and self.clock() < failure.retry_at and failure.fingerprint == fingerprint:
            raise StepFailed(key, failure.reason)
        hung = self._hung.get(key)
        if hung is not None:
            if not hung.done.is_set():  # its last attempt never returned: no second thread, no second wait
                reason = failure.reason if failure else "a previous attempt is still running"
                self._failed(key, reason, fingerprint)  # (looked at again after a longer backoff)
                raise StepFailed(key, reason)
            del self._hung[key]
        try:
            result = self._bounded(key, fn)
        except StepTimedOut:
            self._failed(key, f"timed out after {self.timeout:g} s", fingerprint)
            raise
        except Exception as exc:
            reason = _reason(exc)
            self._failed(key, reason, fingerprint)
            log.warning("%s failed: %s", key, reason, exc_info=not isinstance(exc, OSError | LookupError))
            raise StepFailed(key, reason) from exc
        if self.failures.pop(key, None) is not None:
            log.info("%s recovered", key)
        metrics.OBJECTS_APPLIED.labels(metrics.kind_of(key)).inc()
        return result

    def failed(self, key: str) -> Failure | None:
        return self.failures.get(key)

    def keep_only(self, keys: Iterable[str]) -> None:
        """Forget failures of objects that are gone from the desired state."""
        alive = set(keys)
        self.failures = {k: f for k, f in self.failures.items() if k in alive}
        self._hung = {k: j for k, j in self._hung.items() if k in alive and not j.done.is_set()}

    def report(self) -> list[dict[str, Any]]:
        now = self.clock()
        return [f.as_report(k, now) for k, f in sorted(self.failures.items())]

    def _failed(self, key: str, reason: str, fingerprint: Any) -> None:
        old = self.failures.get(key)
        attempts = 1 if old is None else old.attempts + 1
        delay = min(FIRST_RETRY * 2 ** (attempts - 1), MAX_RETRY)
        since = old.since if old is not None else datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.failures[key] = Failure(reason, since, attempts, self.clock() + delay, fingerprint)

    def _bounded(self, key: str, fn: Callable[[], T]) -> T:
        if getattr(_inside, "active", False):  # a step within a step shares the outer one's limit
            return fn()
        if self._worker is None or not self._worker.thread.is_alive():
            self._worker = _Worker(self.thread_init)
        job = self._worker.submit(fn)
        if not job.done.wait(self.timeout):
            log.error("%s ran past %g s: its worker thread is abandoned", key, self.timeout)
            self._worker.retired = True
            self._worker = None
            self._hung[key] = job  # (until it returns, the object is not tried again)
            raise StepTimedOut(f"timed out after {self.timeout:g} s")
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[no-any-return]


def _reason(exc: BaseException) -> str:
    code = getattr(exc, "code", None)  # netlink errors carry the kernel's errno here, their text is a tuple
    if isinstance(code, int) and code > 0 and not isinstance(exc, OSError):
        text = f"{os.strerror(code)} (errno {code})"
    else:
        text = str(exc) or type(exc).__name__
    return text[:500]
