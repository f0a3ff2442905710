"""The proxy's parts without namespaces: HTTP/1.1 framing, caller lookup from a desired state, the forwarded
request, and the rate limiter."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cloudnet.agent import http1
from cloudnet.agent.metadata_relay import (
    Callers,
    Upstream,
    canonical_ip,
    guest_forwarded,
    mac_of_link_local,
    upstream_request,
)
from cloudnet.agent.ratelimit import RateLimiter
from cloudnet.metadata import signing


def read(data: bytes, **kw: Any) -> http1.Request | None:
    async def go() -> http1.Request | None:
        reader = asyncio.StreamReader(limit=http1.MAX_HEAD)
        reader.feed_data(data)
        reader.feed_eof()
        return await http1.read_request(reader, **kw)

    return asyncio.run(go())


def test_reads_a_request_with_a_content_length_body() -> None:
    req = read(b"POST /openstack/latest/password HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
    assert req is not None and req.method == "POST" and req.body == b"hello" and req.keep_alive
    assert ("host", "x") in req.headers


def test_reads_a_chunked_body_and_answers_expect_continue() -> None:
    sent: list[bool] = []
    req = read(
        b"POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n"
        b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: x\r\n\r\n",
        send_continue=lambda: sent.append(True),
    )
    assert req is not None and req.body == b"abcde" and sent == [True]


def test_a_large_head_is_read_whole_and_an_oversized_one_refused() -> None:
    big = b"GET / HTTP/1.1\r\n" + b"".join(b"X-Pad-%d: %s\r\n" % (i, b"a" * 1000) for i in range(40)) + b"\r\n"
    req = read(big)
    assert req is not None and len(req.headers) == 40
    with pytest.raises(http1.HttpError) as exc:
        read(b"GET / HTTP/1.1\r\nX: " + b"a" * (http1.MAX_HEAD + 10) + b"\r\n\r\n")
    assert exc.value.status == 431


@pytest.mark.parametrize(
    "raw",
    [
        b"GET /\r\n\r\n",  # HTTP/0.9
        b"GET / HTTP/2.0\r\n\r\n",
        b"GET /a b HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nX-Instance-ID : spoof\r\n\r\n",
        b"GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
)
def test_ambiguous_or_malformed_requests_are_refused(raw: bytes) -> None:
    with pytest.raises(http1.HttpError):
        read(raw)


def test_too_large_a_body_is_a_413() -> None:
    with pytest.raises(http1.HttpError) as exc:
        read(b"POST / HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (http1.MAX_BODY + 1))
    assert exc.value.status == 413


def test_clean_close_between_requests_is_not_an_error() -> None:
    assert read(b"") is None
    with pytest.raises(asyncio.IncompleteReadError):
        read(b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")


def test_keep_alive_rules() -> None:
    assert not read(b"GET / HTTP/1.0\r\n\r\n").keep_alive  # type: ignore[union-attr]
    assert read(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive  # type: ignore[union-attr]
    assert not read(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").keep_alive  # type: ignore[union-attr]


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
