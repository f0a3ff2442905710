"""/ui: the web UI's files, served to anyone with a strict Content-Security-Policy, and nothing else through it."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from cloudnet.api import ui
from tests.support.server import RunningServer


@pytest.fixture
def web(server: RunningServer, tokens: dict[str, dict[str, object]]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


def test_the_page_and_its_files_carry_the_policy(web: httpx.Client) -> None:
    moved = web.get("/ui")
    assert moved.status_code == 308 and moved.headers["location"] == "/ui/"
    page = web.get("/ui/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"] == ui.CSP
    assert "script-src 'self';" in ui.CSP and "unsafe-inline" not in ui.CSP and "unsafe-eval" not in ui.CSP
    # no HTML sink at all: Trusted Types required, and no policy may make one
    policy = [d.strip() for d in page.headers["content-security-policy"].split(";")]
    assert "require-trusted-types-for 'script'" in policy and "trusted-types 'none'" in policy
    assert page.headers["x-content-type-options"] == "nosniff" and page.headers["x-frame-options"] == "DENY"
    for src in re.findall(r'(?:src|href)="([^"#:]+)"', page.text):  # every file the page names is served
        asset = web.get("/ui/" + src)
        assert asset.status_code == 200, src
        assert asset.headers["content-security-policy"] == ui.CSP
    assert web.get("/ui/app.js").headers["content-type"].startswith("text/javascript")
    assert web.head("/ui/style.css").content == b""


def test_the_page_has_no_inline_script_and_no_markup_from_data() -> None:
    """The policy forbids inline script; the scripts build the DOM from text only (dom.js), never from markup."""
    page = (ui.UI_DIR / "index.html").read_text()
    assert re.findall(r"<script[^>]*>\s*([^<\s][^<]*)</script>", page) == []
    assert not re.search(r"\son[a-z]+=", page)  # no inline event handlers either
    for script in ui.UI_DIR.glob("*.js"):
        text = script.read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
            assert sink not in text, f"{script.name} uses {sink}"


def test_nothing_else_is_reached_through_ui(web: httpx.Client) -> None:
    """Only the UI's own files: no path outside its directory, no other method, and the API still wants a token."""
    for path in ("/ui/../tokens.json", "/ui/%2e%2e/tokens.json", "/ui/..%2Fapi%2Fui.py", "/ui/nope.js",
                 "/ui//etc/passwd", "/ui/.hidden"):  # fmt: skip
        answer = web.get(path)  # (httpx itself folds a plain `..`: the API's 401 then)
        assert answer.status_code in (401, 404), path
        assert "password_hash" not in answer.text and "tokens" not in answer.text
    refused = web.post("/ui/index.html", content=b"x")
    assert refused.status_code == 405
    assert web.get("/v2.0/networks").status_code == 401
    assert web.get("/uix").status_code == 401  # the /ui prefix only: other names are the API's


def test_the_files_are_package_data() -> None:
    """What an installed cloudnet serves: every file of the UI is listed in pyproject's package data."""
    project = (ui.UI_DIR.parents[2] / "pyproject.toml").read_text()
    kinds = {p.suffix for p in ui.UI_DIR.iterdir() if p.is_file()}
    for suffix in kinds:
        assert f'"ui/*{suffix}"' in project, suffix
    assert set(ui.load()) == {p.name for p in ui.UI_DIR.iterdir() if p.is_file()}  # and every one is served
