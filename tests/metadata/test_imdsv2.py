"""IMDSv2 session tokens over real HTTP: the PUT, the TTL rules, required vs optional, expiry, and
`metadata_tokens` on the instance API."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from cloudnet.metadata.model import Settings
from cloudnet.metadata.server import MetadataApp
from cloudnet.metadata.tokens import TokenIssuer, parse_ttl
from tests.metadata.conftest import SECRET, create
from tests.support.metadata import Guest, RunningMetadata, identity
from tests.support.server import RunningServer

TTL = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN = "X-aws-ec2-metadata-token"


def token(guest: Guest, ttl: str = "21600") -> str:
    r = guest.request("PUT", "/latest/api/token", headers={TTL: ttl})
    assert r.status_code == 200, r.text
    assert int(r.headers[TTL]) == int(ttl) and r.headers["content-type"].startswith("text/plain")
    return r.text


@pytest.fixture
def strict(api: httpx.Client, md: httpx.Client, host: str) -> tuple[Guest, dict[str, Any]]:
    inst = create(api, "instances", "instance", name="strict", netns="ns-strict", host=host, metadata_tokens="required")
    return Guest(md, SECRET, inst), inst


def test_token_ttl_must_be_1_to_21600(guest: Guest) -> None:  # a non-ASCII digit is no digit either
    for bad in (None, "", "0", "21601", "-1", "1.5", "abc", "٣".encode()):
        headers = {} if bad is None else {TTL: bad}
        r = guest.request("PUT", "/latest/api/token", headers=headers)
        assert r.status_code == 400, bad
    for good in ("1", "21600", "060"):
        assert token(guest, good)


def test_token_requests_need_a_proxied_identity(md: httpx.Client, instance: dict[str, Any]) -> None:
    assert md.put("/latest/api/token", headers={TTL: "60"}).status_code == 400
    bad = identity("wrong-secret", instance["id"], instance["project_id"])
    assert md.put("/latest/api/token", headers={**bad, TTL: "60"}).status_code == 403
    assert md.put("/2009-04-04/api/token", headers={**identity(SECRET, instance["id"], instance["project_id"]),
                                                    TTL: "60"}).status_code == 404  # fmt: skip


def test_required_tokens(strict: tuple[Guest, dict[str, Any]], guest: Guest) -> None:
    g, inst = strict
    for path in ("/latest/meta-data/instance-id", "/openstack/latest/meta_data.json", "/openstack/latest/password"):
        assert g.get(path).status_code == 401, path
    assert g.get("/").status_code == 200  # the version list needs no identity, so no token either
    tok = token(g)
    r = g.get("/latest/meta-data/instance-id", **{TOKEN: tok})
    assert r.status_code == 200 and r.text == "i-" + inst["id"].replace("-", "")[:8]
    assert g.get("/latest/meta-data/instance-id", **{TOKEN: tok + "x"}).status_code == 401
    assert g.get("/latest/meta-data/instance-id", **{TOKEN: "not-a-token"}).status_code == 401
    # A token is bound to the instance it was issued to.
    assert g.get("/latest/meta-data/instance-id", **{TOKEN: token(guest)}).status_code == 401


def test_optional_tokens(guest: Guest) -> None:
    assert guest.get("/latest/meta-data/instance-id").status_code == 200  # IMDSv1 still works
    tok = token(guest)
    assert guest.get("/latest/meta-data/instance-id", **{TOKEN: tok}).status_code == 200
    # A token that is presented must be good, even where none is required (as AWS answers).
    assert guest.get("/latest/meta-data/instance-id", **{TOKEN: "bogus"}).status_code == 401


def test_tokens_expire(strict: tuple[Guest, dict[str, Any]]) -> None:
    g, _inst = strict
    tok = token(g, "1")
    assert g.get("/latest/meta-data/instance-id", **{TOKEN: tok}).status_code == 200
    time.sleep(1.1)
    assert g.get("/latest/meta-data/instance-id", **{TOKEN: tok}).status_code == 401
    assert g.get("/latest/meta-data/instance-id", **{TOKEN: token(g)}).status_code == 200  # a new one works


def test_another_server_with_the_same_secret_accepts_the_token(
    strict: tuple[Guest, dict[str, Any]], server: RunningServer
) -> None:
    g, inst = strict
    tok = token(g)
    second = RunningMetadata.start(MetadataApp(server.store, SECRET, Settings()))
    try:
        with httpx.Client(base_url=second.url) as other:
            r = Guest(other, SECRET, inst).get("/latest/meta-data/instance-id", **{TOKEN: tok})
            assert r.status_code == 200
    finally:
        second.stop()


def test_switching_an_instance_to_required_takes_effect(api: httpx.Client, guest: Guest, instance: Any) -> None:
    assert guest.get("/latest/meta-data/instance-id").status_code == 200
    r = api.put(f"/instances/{instance['id']}", json={"instance": {"metadata_tokens": "required"}})
    assert r.status_code == 200 and r.json()["instance"]["metadata_tokens"] == "required"
    assert guest.get("/latest/meta-data/instance-id").status_code == 401
    r = api.put(f"/instances/{instance['id']}", json={"instance": {"metadata_tokens": "optional"}})
    assert r.status_code == 200
    assert guest.get("/latest/meta-data/instance-id").status_code == 200


def test_instance_api_metadata_tokens(api: httpx.Client, host: str) -> None:
    inst = create(api, "instances", "instance", name="d", netns="ns-d", host=host)
    assert inst["metadata_tokens"] == "optional"
    r = api.post("/instances", json={"instance": {"name": "x", "netns": "ns-x", "host": host,
                                                  "metadata_tokens": "sometimes"}})  # fmt: skip
    assert r.status_code == 400 and "metadata_tokens" in r.text
    r = api.put(f"/instances/{inst['id']}", json={"instance": {"metadata_tokens": "always"}})
    assert r.status_code == 400
    assert api.get(f"/instances/{inst['id']}").json()["instance"]["metadata_tokens"] == "optional"


def test_token_issuer_is_self_validating() -> None:
    now = [1000.0]
    issuer = TokenIssuer("s", clock=lambda: now[0])
    tok = issuer.issue("i-1", 10)
    assert issuer.valid("i-1", tok) and not issuer.valid("i-2", tok)
    assert not TokenIssuer("other", clock=lambda: now[0]).valid("i-1", tok)
    assert not issuer.valid("i-1", tok[:-2]) and not issuer.valid("i-1", "!!!") and not issuer.valid("i-1", "")
    now[0] += 10
    assert not issuer.valid("i-1", tok)
    assert parse_ttl("21600") == 21600 and parse_ttl("21601") is None and parse_ttl(None) is None
