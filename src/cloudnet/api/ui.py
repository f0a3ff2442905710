"""/ui: the web UI's static files (src/cloudnet/ui/), served before the guard: they hold no data, and the page
authenticates every API call itself (X-Auth-Token, as any client).

Every answer carries a strict Content-Security-Policy: scripts and styles from this origin only (no inline script,
no eval), requests to this origin only, no framing, and no HTML sink at all (Trusted Types with no policy: Chromium
refuses every innerHTML-like assignment). Whatever the API returns is put into the page as text by the UI (never as
markup); the policy is the second wall if that ever slips.
"""

from __future__ import annotations

from pathlib import Path

from cloudnet.api.guard import ASGIApp, Receive, Scope, Send

UI_DIR = Path(__file__).resolve().parent.parent / "ui"
PREFIX = "/ui"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'; "
       "require-trusted-types-for 'script'; trusted-types 'none'")  # fmt: skip
# what the package ships (pyproject's package data: ui/*.html, ui/*.js, ui/*.css, one flat directory)
TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
         ".html": "text/html; charset=utf-8"}  # fmt: skip


def load() -> dict[str, tuple[bytes, str]]:
    """Every file of the UI by its name under /ui/ (read once: a request names a key of this table, never a path
    on disk, so no request can reach outside it)."""
    return {p.name: (p.read_bytes(), TYPES[p.suffix]) for p in sorted(UI_DIR.glob("*")) if p.suffix in TYPES}


def headers(kind: str, length: int) -> list[tuple[bytes, bytes]]:
    return [
        (b"content-type", kind.encode()), (b"content-length", str(length).encode()),
        (b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
        (b"x-frame-options", b"DENY"), (b"referrer-policy", b"no-referrer"), (b"cache-control", b"no-cache"),
    ]  # fmt: skip


class UiFiles:
    """ASGI middleware: GET/HEAD under /ui from the table above, everything else to the application."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.files = load()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path == PREFIX or path.startswith(PREFIX + "/")):
            await self.app(scope, receive, send)
            return
        if path == PREFIX:  # relative URLs in the page resolve under /ui/
            await self._answer(send, 308, b"", "text/plain", [(b"location", b"/ui/")])
            return
        if scope["method"] not in ("GET", "HEAD"):
            # (a body it may carry is never read: the connection is not kept for a next request)
            await self._answer(send, 405, b"Method Not Allowed", "text/plain",
                               [(b"allow", b"GET, HEAD"), (b"connection", b"close")])  # fmt: skip
            return
        found = self.files.get(path[len(PREFIX) + 1 :] or "index.html")
        if found is None:
            await self._answer(send, 404, b"Not Found", "text/plain")
            return
        body, kind = found
        await self._answer(send, 200, b"" if scope["method"] == "HEAD" else body, kind, length=len(body))

    @staticmethod
    async def _answer(send: Send, status: int, body: bytes, kind: str, extra: list[tuple[bytes, bytes]] | None = None,
                      length: int | None = None) -> None:  # fmt: skip
        head = headers(kind, len(body) if length is None else length) + (extra or [])
        await send({"type": "http.response.start", "status": status, "headers": head})
        await send({"type": "http.response.body", "body": body})
