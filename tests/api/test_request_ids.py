"""Request ids: every answer carries X-OpenStack-Request-ID (the client's when well-formed, else a new req-<uuid4>),
and so does every log line the request causes, in text or JSON (`cloudnet serve --log-format json`)."""

from __future__ import annotations

import asyncio
import json
import re
import signal
from pathlib import Path

import httpx
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from cloudnet.api.app import create_app
from cloudnet.api.auth import Authenticator
from cloudnet.config import ServerConfig
from cloudnet.store.db import Store
from tests.support.process import serve

FRESH = re.compile(r"^req-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
HOSTILE = [
    "a" * 65,  # too long
    "req-1 FAKE ERROR injected",  # spaces: a forged log line's start
    '"},{"level":"CRITICAL"',  # JSON breaking out of its string
    "-leading-dash",
    "%0aINFO forged",
]


def stopped_output(proc) -> str:  # type: ignore[no-untyped-def]
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    return str(out)


def test_ids_kept_made_and_logged_as_json(tmp_path: Path) -> None:
    rid = "req-0e6c4b9e-5d1a-4e0b-8a53-3f2c8e9a7b10"
    with serve(tmp_path, "--metadata-listen", "off", "--log-format", "json") as (proc, url):
        with httpx.Client(base_url=url + "/v2.0", timeout=30) as api:
            r = api.post("/networks", json={"network": {"name": "traced"}}, headers={"X-OpenStack-Request-ID": rid})
            assert r.status_code == 201 and r.headers["X-OpenStack-Request-ID"] == rid
            # Another tool's X-Request-ID is kept too; OpenStack's header wins when both are given.
            r = api.get("/networks", headers={"X-Request-ID": "trace.42_b"})
            assert r.headers["X-OpenStack-Request-ID"] == "trace.42_b"
            r = api.get("/networks", headers={"X-Request-ID": "other", "X-OpenStack-Request-ID": rid})
            assert r.headers["X-OpenStack-Request-ID"] == rid
            # Without one, or with a malformed one, a fresh id; refusals and errors carry one too.
            made = {api.get("/networks").headers["X-OpenStack-Request-ID"] for _ in range(3)}
            assert len(made) == 3 and all(FRESH.match(m) for m in made)
            for bad in HOSTILE:
                r = api.post("/networks", json={"network": {"name": "h"}}, headers={"X-OpenStack-Request-ID": bad})
                assert FRESH.match(r.headers["X-OpenStack-Request-ID"]), bad
            r = api.post("/networks", content=b"\xff", headers={"X-Request-ID": "broken-body"})
            assert r.status_code == 400 and r.headers["X-OpenStack-Request-ID"] == "broken-body"
            assert FRESH.match(api.get("/nothing-here").headers["X-OpenStack-Request-ID"])
            # A percent-encoded newline in the path reaches the log escaped, on its line.
            api.delete("/networks/x%0aCRITICAL forged", headers={"X-Request-ID": "nl-path"})
        out = stopped_output(proc)
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(lines) == len([x for x in out.splitlines() if x.strip()]), out  # every line is one JSON object
    traced = [x for x in lines if x["request_id"] == rid]
    assert [x["message"] for x in traced if x["message"].startswith("POST /v2.0/networks 201")], out
    assert all(x["level"] and x["logger"] and x["time"] for x in lines)
    assert [x for x in lines if x["request_id"] == "broken-body" and " 400 " in x["message"]], out
    forged = [x for x in lines if x["request_id"] == "nl-path"]
    assert forged and "\n" not in forged[0]["message"] and "\\n" in forged[0]["message"]
    for bad in HOSTILE:
        assert bad not in out


def test_text_lines_carry_the_id(tmp_path: Path) -> None:
    with serve(tmp_path, "--metadata-listen", "off") as (proc, url):
        r = httpx.post(url + "/v2.0/networks", json={"network": {"name": "t"}}, headers={"X-Request-ID": "txt-1"})
        assert r.status_code == 201
        out = stopped_output(proc)
    assert re.search(r"INFO cloudnet\.api\.requests \[txt-1\]: POST /v2\.0/networks 201 ", out), out


def test_an_unhandled_error_answers_with_the_id_too(server_config: ServerConfig, store: Store) -> None:
    app = create_app(server_config, store, Authenticator(server_config.tokens_file))

    async def boom(_request: Request) -> Response:
        raise RuntimeError("a fault injected by the test")

    app.router.routes.insert(0, Route("/v2.0/boom", boom, methods=["GET", "POST"]))

    async def ask(method: str) -> httpx.Response:
        transport = httpx.ASGITransport(app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return await client.request(method, "/v2.0/boom", headers={"X-Auth-Token": "admin", "X-Request-ID": "b-1"})

    for method in ("GET", "POST"):
        r = asyncio.run(ask(method))
        assert r.status_code == 500 and r.headers.get_list("X-OpenStack-Request-ID") == ["b-1"], r.headers
