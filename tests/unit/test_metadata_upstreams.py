"""Several metadata APIs behind the proxy (`--metadata-url A,B`): real asyncio servers on loopback stand for the
API servers; one is down (nothing listening), or takes a request and drops the connection."""

from __future__ import annotations

import asyncio

import pytest

from cloudnet.agent.metadata.upstream import UpstreamUnavailable
from cloudnet.agent.metadata.upstreams import MAX_URLS, Upstreams, metadata_urls
from tests.support.process import refused_port

GET = b"GET /x HTTP/1.1\r\nHost: m\r\n\r\n"
POST = b"POST /p HTTP/1.1\r\nHost: m\r\nContent-Length: 0\r\n\r\n"


class Api:
    """An API server that answers every request with its name, or (`drop`) reads one and closes unanswered."""

    def __init__(self, name: bytes, drop: bool = False) -> None:
        self.name, self.drop = name, drop
        self.seen: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            while (await reader.readline()) not in (b"\r\n", b""):
                pass
            self.seen.append(line)
            if self.drop:
                break
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(self.name), self.name))
            await writer.drain()
        writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


def test_the_list_is_checked() -> None:
    assert metadata_urls(" http://a:1 , unix:/x ,") == ["http://a:1", "unix:/x"]
    with pytest.raises(ValueError, match="no metadata API"):
        metadata_urls(" , ")
    with pytest.raises(ValueError, match=f"at most {MAX_URLS}"):
        metadata_urls(",".join(f"http://a:{n}" for n in range(MAX_URLS + 1)))
    with pytest.raises(ValueError, match="must be http"):
        Upstreams("http://127.0.0.1:1,ftp://x:2")  # every address checked as one alone is


def test_requests_go_to_the_next_server_when_one_is_down_and_stay_there() -> None:
    async def go(down: int) -> None:
        b = Api(b"b")
        upstreams = Upstreams(f"http://127.0.0.1:{down},{await b.start()}")
        assert (await upstreams.exchange(GET)).body == b"b"
        assert upstreams.url.endswith(str(b.server.sockets[0].getsockname()[1]))  # type: ignore[union-attr]
        # A POST too: nothing was sent to the one that could not be reached.
        assert (await upstreams.exchange(POST, retry=False)).body == b"b"
        assert b.seen == [b"GET /x HTTP/1.1\r\n", b"POST /p HTTP/1.1\r\n"]
        await upstreams.close()
        await b.stop()

    with refused_port() as down:
        asyncio.run(go(down))


def test_a_request_that_may_have_been_carried_out_is_not_sent_to_another_server() -> None:
    async def go() -> None:
        a, b = Api(b"a", drop=True), Api(b"b")
        upstreams = Upstreams(f"{await a.start()},{await b.start()}")
        with pytest.raises(UpstreamUnavailable):
            await upstreams.exchange(POST, retry=False)  # a took it and dropped the connection
        assert a.seen == [b"POST /p HTTP/1.1\r\n"] and b.seen == []
        assert (await upstreams.exchange(GET)).body == b"b"  # a GET may be repeated: on to b
        await upstreams.close()
        await a.stop()
        await b.stop()

    asyncio.run(go())


def test_all_down_is_one_failure_naming_the_last() -> None:
    async def go(ports: list[int]) -> None:
        upstreams = Upstreams(",".join(f"http://127.0.0.1:{p}" for p in ports))
        with pytest.raises(UpstreamUnavailable):
            await upstreams.exchange(GET)
        await upstreams.close()

    with refused_port() as one, refused_port() as two:
        asyncio.run(go([one, two]))
