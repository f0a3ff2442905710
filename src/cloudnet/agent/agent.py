"""The host agent: full sync, then follow the revision log and converge the dataplane on every change.

It only reads state and reports what it observed (heartbeats, port status) through the API. After a
lost connection it starts over with a full sync, so nothing depends on having seen every event.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import Any, Protocol

import httpx

from cloudnet import heap, metrics
from cloudnet.agent.client import MAX_PART_PORTS, ApiClient
from cloudnet.dataplane.base import Dataplane
from cloudnet.dataplane.steps import StepTimedOut
from cloudnet.wire import logs, request_ids

log = logging.getLogger("cloudnet.agent")
HELD_BACK_RETRY = 0.2
HELD_BACK_MAX = 5.0
# Failures and check differences in the host's report, at most (their counts say how many; the agent's log has them
# all): a host with thousands of broken objects must still fit its heartbeat in a request body.
MAX_REPORTED = 100
# Request ids the agent keeps for the passes to come (those of the changes it heard of), at most: beyond, the
# oldest are forgotten (their passes log without them).
MAX_REQUESTS = 10000
# Status reports of agents: their events name the request they realised, which is no new request to realise.
REPORT_TYPES = frozenset({"port.active", "port.failed", "port.down"})
# What a port's view may differ in from the one the agent holds when only its QoS changed (the QoS-only pass).
QOS_ONLY_KEYS = frozenset({"qos_policy_id", "revision_number", "updated_at"})


class StateObserver(Protocol):
    """Host-side services that follow the desired state too (metadata proxy, mdata sockets)."""

    def update(self, state: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class Agent:
    def __init__(
        self,
        client: ApiClient,
        dataplane: Dataplane,
        *,
        report: dict[str, Any] | None = None,
        heartbeat_interval: float = 10.0,
        poll_timeout: float = 30.0,
        resync_interval: float = 60.0,
        observers: list[StateObserver] | None = None,
    ) -> None:
        self.client = client
        self.dataplane = dataplane
        self.report = report or {}
        self.heartbeat_interval = heartbeat_interval
        self.poll_timeout = poll_timeout
        self.resync_interval = resync_interval
        self.observers = list(observers or [])
        self.held_back = False  # some port is plugged but not yet served by its metadata proxy
        self._retry = HELD_BACK_RETRY
        self.stop_event = threading.Event()
        self.synced = threading.Event()  # set after each successful reconcile (tests and `up` wait on it)
        self.revision = -1
        self._failed_kinds: set[str] = set()
        self._overdue: set[str] = set()  # failed objects already given a pass at once since their backoff ended
        # While held back, the API's long poll runs on a side thread (`_poll`); its end or the dataplane's news wakes
        # the wait (`_woken`).
        self._poll: Future[tuple[list[dict[str, Any]], int]] | None = None
        self._woken = threading.Event()
        self._state: dict[str, Any] | None = None  # the last pass's desired state, as it reported (reconcile)
        dataplane.on_news(self._woken.set)
        # The ids of the requests whose changes the next pass realises (its log lines carry them), and each port's
        # (its status report names it, so the port's ACTIVE event does): one grep follows a port from POST to kernel.
        self._pass_requests: dict[str, None] = {}
        self._port_requests: dict[str, str] = {}

    def stop(self) -> None:
        self.stop_event.set()

    def run(self) -> None:
        beat = threading.Thread(target=self._heartbeats, name="cloudnet-heartbeat", daemon=True)
        beat.start()
        backoff = 0.5
        reached = False  # until the API first answers, a failure is a wait (it may be starting), not a loss
        while not self.stop_event.is_set():
            try:
                self._register()
                reached = True
                self._follow()
                backoff = 0.5
            except (httpx.TransportError, httpx.HTTPStatusError) as exc:
                if reached:
                    log.warning("lost the API (%s); full sync again in %.1f s", exc, backoff)
                else:
                    log.info("waiting for the API (%s); trying again in %.1f s", exc, backoff)
                self.stop_event.wait(backoff)
                backoff = min(backoff * 2, 10.0)
            except StepTimedOut:
                # One object's step hung: it is marked failed and backs off; the next pass (on fresh sockets)
                # converges everything else at once.
                log.error("a dataplane step timed out; full sync again now")
            except Exception:
                log.exception("reconcile failed; retrying with a full sync")
                self.stop_event.wait(backoff)
                backoff = min(backoff * 2, 10.0)
        beat.join(timeout=5)
        for observer in self.observers:
            observer.close()

    def _register(self) -> None:
        self.client.heartbeat(self._with_samples())

    def _with_samples(self) -> dict[str, Any]:
        """The report with this process's agent samples (api/metrics.py serves them with the host's name)."""
        return {**self.report, "metrics": metrics.samples()}

    def _heartbeats(self) -> None:
        while not self.stop_event.wait(self.heartbeat_interval):
            self._send_report()

    def _send_report(self) -> None:
        try:
            self.client.heartbeat(self._with_samples())
        except (httpx.TransportError, httpx.HTTPStatusError) as exc:
            log.warning("heartbeat failed: %s", exc)

    def _follow(self) -> None:
        self.reconcile(full=True, check=True)  # at start: the kernel compared with the desired state, repaired
        heap.freeze_startup()  # (after the first pass: what it made to stay stays)
        last_full = time.monotonic()
        while not self.stop_event.is_set():
            # While ports wait for their metadata proxy, look again soon even if nothing changes.
            timeout = self._retry if self.held_back else self.poll_timeout
            retry = self._next_retry()  # a failed object is tried again when its backoff ends, events or not
            if retry is not None:
                timeout = min(timeout, retry)
            timeout = max(0.0, min(timeout, last_full + self.resync_interval - time.monotonic()))
            # The last pass reported what it did and left the rest (devices to park) for this one: at once, after
            # whatever came meanwhile (new instances are plugged before more parking).
            more = self.dataplane.unfinished()
            if more:
                timeout = 0.0
            waited_from = time.monotonic()
            events, latest = self._wait(timeout)
            upto = max((int(e["revision"]) for e in events), default=self.revision)  # (what was read, all hosts')
            due = retry is not None and time.monotonic() >= waited_from + retry
            # Back off while a proxy stays unable to listen; start quick again once all is served.
            self._retry = min(self._retry * 2, HELD_BACK_MAX) if self.held_back else HELD_BACK_RETRY
            # Other hosts' heartbeats and checks change nothing here.
            events = [e for e in events if e.get("resource") != "host" or e.get("resource_id") == self.client.host]
            self._note_requests(events)
            if any(e.get("resource") == "host" and e.get("operation") == "check" for e in events):
                self.reconcile(full=True, check=True)  # asked for (`cloudnet host check`)
                last_full = time.monotonic()
            elif time.monotonic() - last_full >= self.resync_interval:
                # Also under a steady stream of events: catch changes made behind the API's back (a
                # device deleted by hand, an instance namespace recreated), which incremental passes trust.
                self.reconcile(full=True)
                last_full = time.monotonic()
            elif events and not (self.held_back or due or more) and (named := self._qos_only(events)) is not None:
                self.reconcile(full=False, qos_change=(named, upto))
            elif events or self.held_back or due or more:
                # Only what changed: the dataplane keeps what it applied. Woken by the dataplane's news alone (OVN: a
                # port bound) with nothing new in the log, the last pass's state stands: not fetched again.
                self.reconcile(full=False, reuse=not events and self.dataplane.news())
            else:
                self.revision = max(self.revision, latest)

    def _note_requests(self, events: list[dict[str, Any]]) -> None:
        for e in events:
            rid = request_ids.well_formed(e.get("request_id"))
            # (this host's own heartbeats realise nothing; an admin's check of it does)
            own = e.get("resource") == "host" and e.get("operation") != "check"
            if rid is None or own or e.get("type") in REPORT_TYPES:
                continue
            self._pass_requests[rid] = None
            if e.get("resource") == "port":
                self._port_requests[str(e.get("resource_id"))] = rid
        for kept in (self._pass_requests, self._port_requests):
            while len(kept) > MAX_REQUESTS:
                del kept[next(iter(kept))]

    def _wait(self, timeout: float) -> tuple[list[dict[str, Any]], int]:
        """The API's events after our revision, waited for up to `timeout`. While ports wait on the dataplane (OVN: to
        be bound), the long poll runs on a side thread and the dataplane's news ends the wait at once, so that the
        pass that reports them follows the change underneath; a poll still running is taken up by the next wait (it
        asked from an older revision: what it brings is never less than what came since)."""
        if self._poll is None and not self.held_back:
            return self.client.events(self.revision, timeout)
        self._woken.clear()
        if self._poll is None:
            self._poll = self._poll_aside(timeout)
        if not self._poll.done() and not self.dataplane.news():
            self._woken.wait(timeout)
        if not self._poll.done():
            return [], self.revision
        poll, self._poll = self._poll, None
        return poll.result()

    def _poll_aside(self, timeout: float) -> Future[tuple[list[dict[str, Any]], int]]:
        future: Future[tuple[list[dict[str, Any]], int]] = Future()
        since = self.revision

        def poll() -> None:
            try:
                future.set_result(self.client.events(since, timeout))
            except BaseException as exc:  # (re-raised on the agent's thread by the wait that takes it up)
                future.set_exception(exc)
            self._woken.set()

        threading.Thread(target=poll, name="cloudnet-events", daemon=True).start()
        return future

    def _next_retry(self) -> float | None:
        """Seconds until the next failed object's backoff ends; None when none is waiting. One already due gets
        one pass at once (0): its backoff may have ended while the last pass ran, after that pass had looked at it
        (a slow pass on a loaded host). Still due after that pass, it was not looked at: it waits for the next event
        or full pass (never a busy loop)."""
        waits = []
        failures = self.dataplane.failures()
        for f in failures:
            key, wait = str(f["object"]), float(f["retry_in"])
            if wait > 0:
                self._overdue.discard(key)
                waits.append(wait)
            elif key not in self._overdue:
                self._overdue.add(key)
                waits.append(0.0)
        self._overdue &= {str(f["object"]) for f in failures}
        return min(waits, default=None)

    def _report_failures(self) -> None:
        """Objects the dataplane could not converge go into the host's report (`cloudnet host show`), at once."""
        everything = [{k: v for k, v in f.items() if k != "retry_in"} for f in self.dataplane.failures()]
        failed = Counter(metrics.kind_of(str(f["object"])) for f in everything)
        for kind in self._failed_kinds | set(failed):  # (a kind that recovered goes to 0, not away)
            metrics.OBJECTS_FAILED.labels(kind).set(failed.get(kind, 0))
        self._failed_kinds |= set(failed)
        failures = everything[:MAX_REPORTED]
        if failures != self.report.get("failures", []) or len(everything) != self.report.get("failure_count", 0):
            self.report["failures"], self.report["failure_count"] = failures, len(everything)
            self._send_report()

    def _report_check(self, revision: int) -> None:
        """The check's result in the host's report: it answers every check asked for up to `revision`."""
        found = self.dataplane.differences()
        self.report["check"] = {"revision": revision, "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                                "count": len(found), "differences": found[:MAX_REPORTED]}  # fmt: skip
        self._send_report()

    def _metadata_served(self, state: dict[str, Any], network_id: str | None) -> bool:
        network = state["networks"].get(network_id or "")
        if not network or not network.get("metadata_port"):
            return True  # no metadata for this network on this host (e.g. no subnet)
        checks = [o.serving for o in self.observers if hasattr(o, "serving")]
        return all(serving(network_id) for serving in checks)

    def _qos_only(self, events: list[dict[str, Any]]) -> list[str] | None:
        """The ports these events name when they can have changed no more than QoS: QoS policies' (their rules'), and
        updates of ports this host plugs (the QoS-only pass checks that their views changed in QoS alone, else
        passes as usual); None when they may have changed more."""
        state = self._state
        if state is None:
            return None
        ports = sorted({str(e.get("resource_id")) for e in events if e.get("resource") == "port"})
        if len(ports) > MAX_PART_PORTS:
            return None
        for e in events:
            mine = e.get("resource") == "port" and e.get("operation") == "update" and e["resource_id"] in state["ports"]
            if not mine and e.get("resource") != "qos_policy":
                return None
        return ports

    def reconcile(
        self,
        full: bool = True,
        check: bool = False,
        reuse: bool = False,
        qos_change: tuple[list[str], int] | None = None,
    ) -> None:
        """Fetch the desired state, converge the dataplane, report what changed. A full pass checks
        every device; otherwise the dataplane touches only what changed since its last pass. `check`: the
        dataplane also reads back what it otherwise trusts, and what differed goes into the host's report. Its log
        lines carry the ids of the requests it realises. `reuse`: the last pass's state (with the port states it
        reported) instead of a new fetch (the caller knows the log has nothing new: a fetch costs a request and the
        host's whole state, ~20 ms in the OVN bench). `qos_change`: the events read up to a revision changed at most
        QoS and these ports (`_qos_only`): the QoS part alone is fetched and applied if so, else the pass goes on."""
        kind, started, result = "full" if full else "incremental", time.monotonic(), "failed"
        token = request_ids.current.set(request_ids.joined(list(self._pass_requests)))
        try:
            if qos_change is None or not self._qos_pass(*qos_change):
                self._reconcile(full, check, reuse)
            self._pass_requests.clear()  # (kept for the next try when the pass failed)
            result = "ok"
            metrics.LAST_PASS.set(time.time())
        finally:
            request_ids.current.reset(token)
            metrics.PASS_DURATION.labels(kind).observe(time.monotonic() - started)
            metrics.PASSES.labels(kind, result).inc()

    def _qos_pass(self, named: list[str], upto: int) -> bool:
        """The QoS job alone, from the QoS part of the desired state and the views of the ports the events named:
        False (nothing done) when a port's view changed in more than QoS or the dataplane cannot (its next pass is a
        full one). The state it held, with the new part, is the state the next pass may reuse."""
        state = self._state
        assert state is not None  # (_qos_only)
        part = self.client.desired_part("qos", named)
        for pid in named:
            new, held = part["ports"].get(pid), state["ports"].get(pid)
            if new is None or held is None or _without(new, QOS_ONLY_KEYS) != _without(held, QOS_ONLY_KEYS):
                return False
        merged = {**state, "ports": {**state["ports"], **part["ports"]}, "qos": part["qos"]}
        self._state = None  # (until it has applied: a pass that fails fetches again)
        try:
            if not self.dataplane.apply_qos(merged):
                return False
        finally:
            self._report_failures()
        self._state = merged
        self.revision = max(self.revision, upto)
        self.synced.set()
        level = logging.INFO if self._pass_requests else logging.DEBUG
        log.log(level, "reconciled revision %d: QoS of %d ports", self.revision, len(part["qos"]))
        return True

    def _reconcile(self, full: bool, check: bool, reuse: bool) -> None:
        if reuse and self._state is not None:
            state = self._state
        else:
            state = self.client.desired_state(max(self.revision, 0))
            # The requests that changed its ports in events this pass skips (the state is newer than what was read):
            # their reports name them all the same.
            for port_id, rid in (state.get("requests") or {}).items():
                if (rid := request_ids.well_formed(rid)) is not None:
                    self._port_requests[str(port_id)] = rid
        self._state = None  # (until this pass has reported: a pass that fails fetches again)
        try:
            reports = self.dataplane.apply(state, full=full, check=check)
        finally:
            self._report_failures()
        if check:
            self._report_check(int(state["revision"]))
        for observer in self.observers:
            try:  # (each follows many objects and isolates them itself; this keeps one observer from the rest)
                observer.update(state)
            except Exception:
                log.exception("%s could not follow revision %s", type(observer).__name__, state.get("revision"))
        changed = []
        self.held_back = False
        pool_ports = state.get("pool_ports", {})
        for r in reports:
            known = state["ports"].get(r.port_id) or pool_ports.get(r.port_id, {})  # (a parked pool port's)
            body = r.as_api()
            if body["status"] == "ACTIVE" and not self._metadata_served(state, known.get("network_id")):
                # A booting guest must never race its metadata proxy: ACTIVE only once it answers.
                body["status"] = "BUILD"
                self.held_back = True
            elif body["status"] == "BUILD":  # the dataplane is not done with it yet (OVN: not bound): look again soon
                self.held_back = True
            # Compare with what the server holds, not with what we sent: someone else (the dead-host
            # sweep) may have changed it since.
            if any(known.get(k) != body[k] for k in ("status", "binding:vif_type", "binding:vif_details")):
                self._name_request(body, known.get("status"))
                changed.append(body)
        answer = self.client.report_ports(changed)
        for body in changed:  # (the reused state says what the server holds now)
            known = state["ports"].get(body["id"]) or pool_ports.get(body["id"])
            if known is not None:
                known.update({k: body[k] for k in ("status", "binding:vif_type", "binding:vif_details")})
        self._state = state
        self.revision = max(self.revision, int(state["revision"])) if reuse else int(state["revision"])
        if answer and answer.get("revision_before") == self.revision:
            # Nothing was written between our snapshot and our report: its events are our own echo.
            self.revision = int(answer["revision"])
        self.synced.set()
        level = logging.INFO if self._pass_requests else logging.DEBUG
        log.log(level, "reconciled revision %d: %d ports, %d reported", self.revision, len(reports), len(changed))

    def _name_request(self, body: dict[str, Any], before: str | None) -> None:
        """The report of a port names the request that made or changed it (until its status settles), and says so
        in the log under that request's id."""
        port_id, status = body["id"], body["status"]
        rid = self._port_requests.get(port_id)
        if status != "BUILD":
            self._port_requests.pop(port_id, None)
        if rid is not None:
            body["request_id"] = rid
        if status == before:
            return
        token = request_ids.current.set(rid or request_ids.current.get())
        try:
            reason = (body.get("binding:vif_details") or {}).get("reason") if status == "ERROR" else None
            log.info("port %s %s%s", port_id, status, f": {logs.printable(str(reason), 1000)}" if reason else "")
        finally:
            request_ids.current.reset(token)


def _without(view: dict[str, Any], keys: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in view.items() if k not in keys}
