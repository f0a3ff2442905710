"""A churn of port creates and deletes from a thread (issue 29's faults run under it), and a client of several API
servers on one database that fails over between them. The churn keeps what the servers acknowledged (201 create,
204 delete), what it cannot know (a request lost after it was sent: it may or may not have been carried out), and
every other answer as a failure unless it is one the caller expects (503 while the database restarts). Used by
tests/ovn/test_writer_killed.py (one server) and tests/ovn/test_fleet.py (three, over TLS)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any, Protocol

import httpx

from cloudnet.dataplane.kernel import netns


class Requester(Protocol):
    def request(self, method: str, url: str, *, json: Any = None) -> httpx.Response: ...


class Servers:
    """Clients of several API servers: requests go round the servers in turn (any server answers any request); one
    that cannot be connected to is skipped for the next (the request was never sent); a request lost after it was
    sent raises httpx.TransportError (it may have been carried out: not sent again). From inside namespace `ns`."""

    def __init__(self, urls: Sequence[str], headers: dict[str, str], verify: Any, ns: str | None = None) -> None:
        self.ns = ns
        self.clients = [httpx.Client(base_url=f"{u}/v2.0", headers=headers, verify=verify, timeout=30) for u in urls]
        self.turn = 0
        self.lock = threading.Lock()

    def _entered(self) -> Any:
        return netns.entered(self.ns) if self.ns else nullcontext()

    def request(self, method: str, url: str, *, json: Any = None) -> httpx.Response:
        with self.lock:
            self.turn += 1
            first = self.turn
        error: httpx.TransportError | None = None
        for i in range(len(self.clients)):
            client = self.clients[(first + i) % len(self.clients)]
            try:
                with self._entered():
                    return client.request(method, url, json=json)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # (never sent: the next server may have it)
                error = exc
            except httpx.TransportError as exc:  # (lost after it was sent: only a read is sent again)
                if method != "GET":
                    raise
                error = exc
        assert error is not None
        raise error

    def get(self, url: str) -> httpx.Response:
        return self.request("GET", url)

    def close(self) -> None:
        for client in self.clients:
            client.close()


class PortChurn:
    """Creates ports on `network` (and every third time deletes an earlier one) until stopped."""

    def __init__(self, api: Requester, network: str, refusable: Sequence[int] = ()) -> None:
        self.api, self.network, self.refusable = api, network, tuple(refusable)
        self.created: list[str] = []
        self.deleted: set[str] = set()
        self.unknown: set[str] = set()  # deletes lost after they were sent
        self.failures: list[str] = []
        self.refused = 0
        self.lost = 0  # creates lost after they were sent
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _send(self, method: str, url: str, body: Any = None) -> httpx.Response | None:
        try:
            r = self.api.request(method, url, json=body)
        except httpx.TransportError:
            return None
        if r.status_code in self.refusable:
            self.refused += 1
            self.stopping.wait(0.05)  # (a client backing off, as Retry-After asks)
        elif r.status_code not in (201, 204):
            self.failures.append(f"{method} {url}: {r.status_code} {r.text[:200]}")
        return r

    def _run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            n += 1
            r = self._send("POST", "/ports", {"port": {"network_id": self.network, "name": f"churn-{n}"}})
            if r is None:
                self.lost += 1
                continue
            if r.status_code != 201:
                continue
            self.created.append(r.json()["port"]["id"])
            if n % 3 == 0:
                victim = self.created[-2]
                r = self._send("DELETE", f"/ports/{victim}")
                if r is None:
                    self.unknown.add(victim)
                elif r.status_code == 204:
                    self.deleted.add(victim)

    def acknowledged(self) -> int:
        return len(self.created)

    def kept(self) -> set[str]:
        """The ports whose create was acknowledged and no delete of them was sent."""
        return set(self.created) - self.deleted - self.unknown


@contextmanager
def churning(api: Requester, network: str, refusable: Sequence[int] = ()) -> Iterator[PortChurn]:
    """A churn running for the block; stopped (its thread joined) when it ends."""
    churn = PortChurn(api, network, refusable)
    churn.thread.start()
    try:
        yield churn
    finally:
        churn.stopping.set()
        churn.thread.join(timeout=60)
