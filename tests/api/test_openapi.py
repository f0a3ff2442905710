"""/openapi.json and /v2.0/openapi.json: the whole API, every route with its request and response schemas."""

from __future__ import annotations

from pathlib import Path

import httpx

from cloudnet.api import openapi
from cloudnet.api.app import create_app
from cloudnet.config import ServerConfig
from cloudnet.store.db import Store
from tests.support.server import RunningServer

BODYLESS = {
    ("put", "/v2.0/{collection}/{resource_id}/tags/{tag}"),
    ("post", "/v2.0/hosts/{name}/check"),
    ("post", "/v2.0/hosts/{name}/remove"),
}


def test_served_without_a_token(server: RunningServer, tokens: dict[str, object]) -> None:
    """Public like version discovery (it holds no data), the same document at both addresses."""
    first = httpx.get(server.url + "/openapi.json")
    assert first.status_code == 200, first.text
    assert first.headers["content-type"] == "application/json"
    assert httpx.get(server.url + "/v2.0/openapi.json").json() == first.json()
    # Only the document is public: the API it describes still wants a token.
    assert httpx.get(server.url + "/v2.0/networks").status_code == 401
    assert httpx.post(server.url + "/openapi.json", json={}).status_code == 405


def test_every_route_documented(server_config: ServerConfig, tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'unused.db'}")  # the app's routes are all this test reads
    app = create_app(server_config, store)
    doc = openapi.document(app.routes)
    assert doc["openapi"].startswith("3.1")
    served = {(m.lower(), openapi._path(r)) for r in app.routes for m in (r.methods or ()) if m != "HEAD"}  # type: ignore[attr-defined]
    documented = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert served == documented
    loose = sorted(f"{m.upper()} {p}" for p, ops in doc["paths"].items() for m, op in ops.items()
                   if op.get(openapi.UNDOCUMENTED))  # fmt: skip
    assert not loose, f"routes without schemas in api/openapi.py: {loose}"
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            ok = [s for s in op["responses"] if s.startswith("2")]
            assert len(ok) == 1 and "4XX" in op["responses"], (method, path)
            if method in ("post", "put", "patch") and (method, path) not in BODYLESS:
                assert "requestBody" in op, (method, path)
    # Every reference resolves (request models come from the services' own validation models).
    text = str(doc)
    for name in doc["components"]["schemas"]:
        assert "$defs" not in str(doc["components"]["schemas"][name])
    refs = {part.split("'")[0] for part in text.split("#/components/schemas/")[1:]}
    assert refs <= set(doc["components"]["schemas"]), refs - set(doc["components"]["schemas"])
    network = doc["components"]["schemas"]["NetworkCreate"]
    assert network["additionalProperties"] is False and "router:external" in network["properties"]
    store.dispose()
