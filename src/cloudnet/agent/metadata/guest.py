"""The metadata proxy's side towards the guests: what one network's listener answers, and whom it admits.

Served by the HTTP/1.1 server the metadata API also uses (wire/http_server.py: asyncio.Protocol and llhttp), one
per listening socket. A request is answered at once when the proxy alone can answer it (an unknown caller,
an instance over its rate limit, a forwarded IMDSv2 token request); any other is forwarded to the API.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from cloudnet import metrics
from cloudnet.agent.metadata.ratelimit import RateLimiter
from cloudnet.agent.metadata.relay import (
    Caller,
    Callers,
    canonical_ip,
    guest_answer,
    guest_forwarded,
    unavailable,
    upstream_request,
)
from cloudnet.agent.metadata.upstream import UpstreamUnavailable
from cloudnet.agent.metadata.upstreams import Upstreams
from cloudnet.wire import http1, logs, request_ids
from cloudnet.wire.http1 import Request, Response
from cloudnet.wire.metadata_paths import is_token_request

log = logging.getLogger(__name__)

MAX_CONNECTIONS_PER_SOURCE = 64
MISS_WAIT = 2.0  # seconds an unknown caller's request waits for the agent's next states before its 404
TOO_MANY_CONNECTIONS = http1.plain(429, "Too many connections.", ("Retry-After", "1"))
REFUSED_TREE = "none"  # the `tree` of a connection refused before its first request
TOKEN_FORWARDED = http1.plain(403, "Forbidden: token requests must not carry X-Forwarded-For.")


def tree_of(path: str) -> str:
    """Which tree a guest asked for, as a metric label: openstack, ec2 (dated or latest), root or other."""
    first = path.lstrip("/").partition("/")[0].partition("?")[0]
    if first == "openstack":
        return "openstack"
    if first == "latest" or (first[:4].isdigit() and first[4:5] == "-"):
        return "ec2"
    return "root" if not first else "other"


def _counted(request: Request, response: Response, seconds: float) -> None:
    tree = tree_of(request.path)
    metrics.METADATA_REQUESTS.labels(tree, str(response.status)).inc()
    metrics.METADATA_DURATION.labels(tree).observe(seconds)


class Relay:
    """What every network's listener shares: who is who, the rate limit, the API and the connection counts."""

    def __init__(
        self, upstream: Upstreams, limiter: RateLimiter, callers: Callers, miss_wait: float = MISS_WAIT
    ) -> None:
        self.upstream = upstream
        self.limiter = limiter
        self.callers = callers
        self.miss_wait = miss_wait
        self.per_source: dict[tuple[str, str], int] = {}
        self._last_warning = 0.0
        self._updates: list[asyncio.Future[None]] = []  # requests waiting for the next state

    def update(self, callers: Callers) -> None:
        """A new synced state (on the proxy's loop): requests from callers it did not know look again."""
        self.callers = callers
        waiting, self._updates = self._updates, []
        for future in waiting:
            if not future.done():
                future.set_result(None)

    async def find(self, network_id: str, address: str) -> Caller | None:
        """The caller, waiting up to `miss_wait` seconds for the agent's next states when it is not known yet:
        an instance given a parked namespace can boot and ask before the agent has synced its claim."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.miss_wait
        while (caller := self.callers.find(network_id, address)) is None:
            left = deadline - loop.time()
            if left <= 0:
                return None
            future = loop.create_future()
            self._updates.append(future)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(future, left)
        return caller

    def warn_unreachable(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._last_warning > 10:  # one line per outage, not one per guest request
            self._last_warning = now
            log.warning("metadata API %s unreachable: %s", self.upstream.url, exc)


def _own(response: Response, rid: str) -> Response:
    """One of the proxy's own answers, with the request's id."""
    return http1.with_first_header(response, request_ids.HEADER, rid)


def _address(peer: Any) -> str:
    return str(peer[0]) if isinstance(peer, tuple) and peer else ""


class NetworkGuests:
    """The guests of one network: an http_server Application and Gate for one of its listening sockets."""

    def __init__(self, relay: Relay, network_id: str) -> None:
        self.relay = relay
        self.network_id = network_id

    # -- Gate ---------------------------------------------------------------------------------------

    def _key(self, peer: Any) -> tuple[tuple[str, str], bool]:
        source = canonical_ip(_address(peer))
        return (self.network_id, source or ""), source is not None

    def admit(self, peer: Any) -> Response | None:
        key, known = self._key(peer)
        count = self.relay.per_source[key] = self.relay.per_source.get(key, 0) + 1
        if known and count <= MAX_CONNECTIONS_PER_SOURCE:
            return None
        # Refused before any request is read: counted with the guests' 429s, under a tree of its own.
        metrics.METADATA_REQUESTS.labels(REFUSED_TREE, "429").inc()
        return TOO_MANY_CONNECTIONS

    def release(self, peer: Any) -> None:
        key, _known = self._key(peer)
        count = self.relay.per_source.get(key, 1) - 1
        if count > 0:
            self.relay.per_source[key] = count
        else:
            self.relay.per_source.pop(key, None)

    # -- Application ----------------------------------------------------------------------------------

    def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def answer_now(self, request: Request) -> Response | None:
        """The proxy's own answers; None to forward the request, or to look for an unknown caller again
        once the state is newer (asked once per request)."""
        caller = self.relay.callers.find(self.network_id, _address(request.peer))
        response = None if caller is None else self._refusal(caller, request)
        if response is None:
            return None
        _counted(request, response, 0.0)
        return _own(response, request_ids.from_headers(request.raw_headers))

    def _refusal(self, caller: Caller, request: Request) -> Response | None:
        wait = self.relay.limiter.take(caller.instance_id)
        if wait:
            return http1.plain(429, "Too many metadata requests.", ("Retry-After", RateLimiter.retry_after(wait)))
        if request.method == "PUT" and guest_forwarded(request) and is_token_request(request.path):
            # IMDSv2 hardening (AWS): a token request that went through a forwarding proxy inside the guest
            # is refused, so an SSRF-able web proxy in the instance cannot obtain a session token.
            return TOKEN_FORWARDED
        return None

    async def answer(self, request: Request) -> Response:
        started = time.perf_counter()
        # The guest's id when well-formed (as the API keeps a client's), else a new one; sent on to the API, in
        # the answer and in every line this request logs here (a task of its own: the id stays with it).
        rid = request_ids.from_headers(request.raw_headers)
        request_ids.current.set(rid)
        response = await self._answer(request, rid)
        _counted(request, response, time.perf_counter() - started)
        if request.method == "POST":  # a write (a password): logged, as the API logs its writes
            log.info("metadata: %s %s from %s on network %s: %d", request.method, logs.printable(request.path),
                     _address(request.peer), self.network_id, response.status)  # fmt: skip
        return response

    async def _answer(self, request: Request, rid: str) -> Response:
        """The API's answer (with the id), or the proxy's own (`_own`)."""
        address = _address(request.peer)
        caller = self.relay.callers.find(self.network_id, address)
        if caller is None:  # not known (yet): `answer_now` passed it on without checks
            caller = await self.relay.find(self.network_id, address)
            if caller is None:
                return _own(http1.plain(404, f"Instance was not found on network {self.network_id}."), rid)
            refusal = self._refusal(caller, request)
            if refusal is not None:
                return _own(refusal, rid)
        source = canonical_ip(address) or address
        # A HEAD goes to the API as a GET: the server here answers it with the GET's length and no body, and
        # the API's answer has the same head either way.
        method = "GET" if request.method == "HEAD" else request.method
        try:
            response = await self.relay.upstream.exchange(
                upstream_request(request, caller, self.network_id, source, method, rid), retry=method != "POST"
            )
        except UpstreamUnavailable as exc:
            self.relay.warn_unreachable(exc)
            return _own(unavailable(), rid)
        return guest_answer(response, rid)
