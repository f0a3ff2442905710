"""Several metadata APIs (one per API server, `--metadata-url A,B`) behind one Upstream's interface: requests go to
the one that answered last; when it cannot be reached, to the next.

A request moves to the next server only when it cannot have been carried out: no connection could be made, or (for
a request that may be repeated: every GET) the connection was lost before any answer. A password POST whose
connection was lost after it was sent is not sent again: the guest gets the 503 and asks again, as it would from one
server.
"""

from __future__ import annotations

import logging
import ssl

from cloudnet.agent.metadata.upstream import (
    ANSWER_TIMEOUT,
    Response,
    Upstream,
    UpstreamUnavailable,
    UpstreamUnreachable,
)

log = logging.getLogger(__name__)
MAX_URLS = 16  # a fleet's API servers; a longer list is a mistake, not a fleet


def metadata_urls(urls: str) -> list[str]:
    """The comma-separated list of `--metadata-url`, each checked by Upstream when it is made."""
    found = [url.strip() for url in urls.split(",") if url.strip()]
    if not found:
        raise ValueError("no metadata API address given")
    if len(found) > MAX_URLS:
        raise ValueError(f"at most {MAX_URLS} metadata API addresses, not {len(found)}")
    return found


class Upstreams:
    """Upstream's interface (exchange, sweep, close, url) over several metadata APIs, failing over in order."""

    def __init__(self, urls: str, answer_timeout: float = ANSWER_TIMEOUT, tls: ssl.SSLContext | None = None) -> None:
        self._all = [Upstream(url, answer_timeout, tls=tls) for url in metadata_urls(urls)]
        self._current = 0

    @property
    def url(self) -> str:
        return self._all[self._current].url

    async def exchange(self, data: bytes, retry: bool = True) -> Response:
        first = self._current
        failure: UpstreamUnavailable | None = None
        for step in range(len(self._all)):
            index = (first + step) % len(self._all)
            try:
                response = await self._all[index].exchange(data, retry)
            except UpstreamUnreachable as exc:
                failure = exc
            except UpstreamUnavailable as exc:
                if not retry:
                    raise  # (it may have been carried out: not sent to another server)
                failure = exc
            else:
                if index != self._current:
                    log.warning("metadata API now %s (was %s)", self._all[index].url, self._all[self._current].url)
                    self._current = index
                return response
            if len(self._all) > 1:
                log.info("metadata API %s failed (%s)", self._all[index].url, failure)
        assert failure is not None
        raise failure

    def sweep(self, now: float) -> None:
        for upstream in self._all:
            upstream.sweep(now)

    async def close(self) -> None:
        for upstream in self._all:
            await upstream.close()
