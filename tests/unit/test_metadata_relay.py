"""The proxy's parts without namespaces: caller lookup from a desired state, the forwarded request, the
upstream connections, and the rate limiter. (Framing and malformed requests: tests/metadata/test_http_server.py.)"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from cloudnet import metrics
from cloudnet.agent.metadata import upstream as metadata_upstream
from cloudnet.agent.metadata.guest import MAX_CONNECTIONS_PER_SOURCE, NetworkGuests, Relay
from cloudnet.agent.metadata.ratelimit import RateLimiter
from cloudnet.agent.metadata.relay import Callers, canonical_ip, guest_forwarded, mac_of_link_local, upstream_request
from cloudnet.agent.metadata.upstream import Upstream, UpstreamUnavailable
from cloudnet.agent.metadata.upstreams import Upstreams
from cloudnet.wire import http1, signing
from tests.support.metadata import RunningMetadata


def test_keep_alive_rules() -> None:
    def request(version: str, *headers: tuple[str, str]) -> http1.Request:
        return http1.Request("GET", "/", version, list(headers))

    assert not request("HTTP/1.0").keep_alive
    assert request("HTTP/1.0", ("connection", "keep-alive")).keep_alive
    assert request("HTTP/1.1").keep_alive
    assert not request("HTTP/1.1", ("connection", "close")).keep_alive


STATE = {
    "instances": [
        {"id": "i-a", "project_id": "p1", "ports": ["pa"]},
        {"id": "i-b", "project_id": "p2", "ports": ["pb"]},
        {"id": "i-c", "project_id": "p1", "ports": ["pc"]},
        {"id": "i-d", "project_id": "p1", "ports": ["pd", "missing"]},
    ],
    "ports": {
        "pa": {"network_id": "n1", "mac_address": "FA:16:3E:00:00:0A",
               "fixed_ips": [{"ip_address": "10.0.0.10"}, {"ip_address": "2001:db8::a"}]},
        "pb": {"network_id": "n2", "mac_address": "fa:16:3e:00:00:0b", "fixed_ips": [{"ip_address": "10.0.0.10"}]},
        "pc": {"network_id": "n3", "mac_address": "fa:16:3e:00:00:0c", "fixed_ips": [{"ip_address": "10.0.0.20"}]},
        "pd": {"network_id": "n3", "mac_address": "fa:16:3e:00:00:0d", "fixed_ips": [{"ip_address": "10.0.0.20"}]},
    },
}  # fmt: skip


def test_callers_by_network_and_address() -> None:
    callers = Callers(STATE, "s")
    a, b = callers.find("n1", "10.0.0.10"), callers.find("n2", "10.0.0.10")
    assert a is not None and a.instance_id == "i-a" and a.signature == signing.sign("s", "i-a")
    assert b is not None and b.instance_id == "i-b" and b.project_id == "p2"  # same address, other network
    assert callers.find("n1", "::ffff:10.0.0.10") == a  # IPv4-mapped
    assert callers.find("n1", "2001:db8:0::a") == a
    assert callers.find("n2", "10.0.0.11") is None and callers.find("n9", "10.0.0.10") is None
    assert callers.find("n3", "10.0.0.20") is None  # claimed by two instances on one network: fail closed
    assert callers.find("n1", "fe80::f816:3eff:fe00:a%eth0") == a  # EUI-64 link-local -> MAC
    assert callers.find("n1", "fe80::1234:5678:9abc:def0") is None  # privacy address: no MAC in it
    assert callers.find("n1", "garbage") is None
    assert callers.networks == {"n1", "n2", "n3"} and callers.instances == {"i-a", "i-b", "i-c", "i-d"}


def test_networks_with_only_pool_ports_are_served_too() -> None:
    # A network whose metadata namespace the dataplane built ahead (pool ports, no instance yet) is served, so
    # that a guest taking over a parked namespace finds the proxy listening; one without a metadata port is not.
    state = {**STATE, "networks": {"n4": {"metadata_port": {"id": "m4"}}, "n5": {"metadata_port": None}}}
    callers = Callers(state, "s")
    assert callers.networks == {"n1", "n2", "n3", "n4"} and callers.find("n4", "10.0.0.10") is None


def test_address_helpers() -> None:
    assert canonical_ip("::ffff:192.0.2.1") == "192.0.2.1" and canonical_ip("x") is None
    assert mac_of_link_local("fe80::a8bb:ccff:fedd:eeff") == "aa:bb:cc:dd:ee:ff"
    assert mac_of_link_local("2001:db8::a8bb:ccff:fedd:eeff") is None


def test_upstream_request_carries_only_the_proxy_identity() -> None:
    caller = Callers(STATE, "s").find("n1", "10.0.0.10")
    assert caller is not None
    req = http1.Request("PUT", "http://169.254.169.254/latest/api/token?x=1", "HTTP/1.1", [
        ("x-forwarded-for", "6.6.6.6"), ("x-instance-id", "i-b"), ("x_tenant_id", "p2"), ("x-network-id", "n2"),
        ("x-aws-ec2-metadata-token-ttl-seconds", "60"), ("user-agent", "Cloud-Init/22.4.2"), ("cookie", "c"),
    ], b"")  # fmt: skip
    out = upstream_request(req, caller, "n1", "10.0.0.10").decode()
    head = out.split("\r\n")
    assert head[0] == "PUT /latest/api/token?x=1 HTTP/1.1"
    lowered = [line.lower() for line in head]
    assert "x-forwarded-for: 10.0.0.10" in lowered and "x-network-id: n1" in lowered
    assert "x-instance-id: i-a" in lowered and "x-tenant-id: p1" in lowered
    assert "6.6.6.6" not in out and "i-b" not in out and "p2" not in out and "n2" not in out and "cookie" not in out
    assert "x-aws-ec2-metadata-token-ttl-seconds: 60" in lowered and "user-agent: cloud-init/22.4.2" in lowered
    assert guest_forwarded(req) and not guest_forwarded(http1.Request("GET", "/", "HTTP/1.1", []))


def test_upstream_addresses() -> None:
    assert Upstream("http://127.0.0.1:8775").url == "http://127.0.0.1:8775"
    Upstream("unix:/run/x.sock")
    Upstream("http://[::1]:8775")
    with pytest.raises(ValueError):
        Upstream("127.0.0.1")
    with pytest.raises(ValueError, match="certificate"):  # https needs the CA and this host's certificate
        Upstream("https://127.0.0.1:8775")
    with pytest.raises(ValueError):
        Upstream("ftp://127.0.0.1:8775")


def test_rate_limiter() -> None:
    now = [0.0]
    limiter = RateLimiter(burst=3, rate=0.5, clock=lambda: now[0])
    assert [limiter.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = limiter.take("a")
    assert wait == pytest.approx(2.0) and RateLimiter.retry_after(wait) == "2"
    assert limiter.take("b") == 0.0  # per key
    now[0] += 2.0
    assert limiter.take("a") == 0.0 and limiter.take("a") > 0
    now[0] += 100
    assert [limiter.take("a") for _ in range(4)][-1] > 0  # refills up to the burst, not beyond
    limiter.keep_only(["b"])
    assert limiter.take("a") == 0.0
    assert RateLimiter.retry_after(0.01) == "1"
    with pytest.raises(ValueError):
        RateLimiter(burst=0, rate=1)


def test_a_request_decodes_its_header_lines_when_asked() -> None:
    raw = [(b"Host", b"x"), (b"X-Two", b"a  "), (b"x-two", b"b")]
    req = http1.Request("GET", "/p%41th?q", "HTTP/1.1", None, b"", raw, ("10.0.0.1", 5))
    assert req.raw_headers is raw and req.peer == ("10.0.0.1", 5) and req.path == "/pAth"
    assert req.headers == [("host", "x"), ("x-two", "a"), ("x-two", "b")]
    made = http1.Request("GET", "/", "HTTP/1.0", [("connection", "keep-alive")])
    assert made.raw_headers == [(b"connection", b"keep-alive")] and made.keep_alive


class Paths:
    """A metadata-server application answering with the path it was asked (/slow/ ones by its coroutine)."""

    def answer_now(self, request: http1.Request) -> http1.Response | None:
        if request.path.startswith("/slow/"):
            return None
        return http1.Response(200, [("Content-Type", "text/plain")], request.path.encode())

    async def answer(self, request: http1.Request) -> http1.Response:
        await asyncio.sleep(0.05)
        return http1.Response(200, [("X-Slow", "1")], request.path.encode())

    def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass


def test_upstream_pipelines_requests_and_hands_answers_back_in_order() -> None:
    running = RunningMetadata.start(Paths(), idle_timeout=0.3)
    try:

        async def go() -> None:
            upstream = Upstream(running.url)
            ask = [f"GET /{'slow/' if n % 7 == 0 else ''}{n} HTTP/1.1\r\nHost: m\r\n\r\n".encode() for n in range(40)]
            answers = await asyncio.gather(*(upstream.exchange(data) for data in ask))
            assert [a.body for a in answers] == [f"/{'slow/' if n % 7 == 0 else ''}{n}".encode() for n in range(40)]
            assert all(a.status == 200 and a.keep_alive for a in answers)
            assert ("x-slow", "1") in answers[0].headers and ("content-type", "text/plain") in answers[1].headers
            # 40 requests at once share a few connections (MAX_DEPTH each), not one each.
            assert 1 <= len(running.server.connections) <= 40 // metadata_upstream.MAX_DEPTH + 1
            deadline = asyncio.get_running_loop().time() + 10
            while running.server.connections:  # the server closes the idle connections (0.3 s) ...
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.02)
            # ... and the upstream notices: the next request opens a new one.
            assert (await upstream.exchange(ask[1])).body == b"/1"
            head = await upstream.exchange(b"GET /h HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n")
            assert head.body == b"/h" and not head.keep_alive
            await upstream.close()

        asyncio.run(go())
    finally:
        running.stop()


def test_upstream_unreachable_and_silent() -> None:
    async def go() -> None:
        with pytest.raises(UpstreamUnavailable):
            await Upstream("unix:/nonexistent/metadata.sock").exchange(b"GET / HTTP/1.1\r\n\r\n")
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        upstream = Upstream(f"http://127.0.0.1:{silent.getsockname()[1]}", answer_timeout=0.2)
        waiting = asyncio.ensure_future(upstream.exchange(b"GET / HTTP/1.1\r\n\r\n"))
        await asyncio.sleep(0.3)
        upstream.sweep(asyncio.get_running_loop().time())
        with pytest.raises(UpstreamUnavailable, match=r"no answer within 0\.2 s"):
            await waiting
        await upstream.close()
        silent.close()

    asyncio.run(go())


def test_the_guest_gets_the_answer_without_hop_headers_rendered_ahead() -> None:
    from cloudnet.agent.metadata.relay import guest_answer

    ttl = "x-aws-ec2-metadata-token-ttl-seconds"
    api = http1.Response(200, [("content-type", "application/json"), ("content-length", "2"), ("server", "x"),
                               ("connection", "keep-alive"), (ttl, "60")], b"{}")  # fmt: skip
    for body, rid in ((b"{}", "req-1"), (b"[1]", "req-2")):  # the head is kept, the length is the body's
        got = guest_answer(http1.Response(api.status, api.headers, body), rid)
        assert got.headers == [("content-type", "application/json"), (ttl, "60"), ("X-OpenStack-Request-ID", rid)]
        assert got.wire == http1.render_response(200, got.headers, body, True) and got.body == body


def test_upstream_does_not_queue_behind_a_slow_answer() -> None:
    running = RunningMetadata.start(Paths())
    try:

        async def go() -> None:
            upstream = Upstream(running.url)
            slow = asyncio.ensure_future(upstream.exchange(b"GET /slow/1 HTTP/1.1\r\nHost: m\r\n\r\n"))
            await asyncio.sleep(metadata_upstream.SLOW * 3)
            fast = await upstream.exchange(b"GET /2 HTTP/1.1\r\nHost: m\r\n\r\n")
            assert fast.body == b"/2" and not slow.done()  # on another connection, not behind the slow one
            assert (await slow).body == b"/slow/1"
            await upstream.close()

        asyncio.run(go())
    finally:
        running.stop()


def test_upstream_sends_again_only_what_may_be_repeated() -> None:
    """The API closes a used connection without answering: a GET goes again on a fresh connection, a POST
    (it may have been carried out) gets UpstreamUnavailable."""

    async def go() -> None:
        seen: list[bytes] = []

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            # Each connection answers its first request and closes on the second, unanswered.
            for n in range(2):
                line = await reader.readline()
                while (await reader.readline()) not in (b"\r\n", b""):
                    pass
                seen.append(line)
                if n:
                    break
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        upstream = Upstream(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        get = b"GET /x HTTP/1.1\r\nHost: m\r\n\r\n"
        post = b"POST /p HTTP/1.1\r\nHost: m\r\nContent-Length: 0\r\n\r\n"
        assert (await upstream.exchange(get)).body == b"ok"
        assert (await upstream.exchange(get)).body == b"ok"  # lost on the used connection, sent again
        with pytest.raises(UpstreamUnavailable):
            await upstream.exchange(post, retry=False)  # lost on the used connection: not sent again
        assert seen.count(b"POST /p HTTP/1.1\r\n") == 1
        await upstream.close()
        server.close()
        await server.wait_closed()

    asyncio.run(go())


def test_connections_refused_for_their_source_are_counted_as_429s() -> None:
    # The proxy's own gate on a real listening socket: a source's connections beyond the cap are answered 429
    # before any request, and counted (tree "none"); the ones admitted are not counted until they ask something.
    def refused() -> float:
        value = metrics.AGENT.get_sample_value("cloudnet_metadata_requests_total", {"tree": "none", "status": "429"})
        return value or 0.0

    guests = NetworkGuests(Relay(Upstreams("http://127.0.0.1:9"), RateLimiter(1, 1), Callers(STATE, "s")), "n1")
    running = RunningMetadata.start(guests, gate=guests)
    before = refused()
    held: list[socket.socket] = []
    try:
        port = int(running.url.rsplit(":", 1)[1])
        for _ in range(MAX_CONNECTIONS_PER_SOURCE):
            held.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        deadline = time.monotonic() + 10
        while sum(guests.relay.per_source.values()) < MAX_CONNECTIONS_PER_SOURCE:  # all admitted by the server
            assert time.monotonic() < deadline, guests.relay.per_source
            time.sleep(0.01)
        assert refused() == before
        with socket.create_connection(("127.0.0.1", port), timeout=10) as extra:
            assert extra.recv(200).startswith(b"HTTP/1.1 429 Too Many Requests\r\n")
        assert refused() == before + 1
    finally:
        for sock in held:
            sock.close()
        running.stop()
