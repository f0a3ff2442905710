"""Answers rendered once: a cached metadata reply is kept with the bytes that answer it on the wire.

A guest asks the same few documents over and over, and rendering status line, headers and body for each
request was a measurable share of the metadata API's work. An `Answer` renders its reply once; the HTTP
server writes `Response.wire` as it is for a GET on a kept-alive connection (anything else, a HEAD or a last
answer, is rendered from the same status, headers and body). meta_data.json carries a fresh random_seed in
every answer: the rendered head and the rest of the body are kept, and only the seed is new.
"""

from __future__ import annotations

from cloudnet.metadata import trees
from cloudnet.metadata.trees import Reply
from cloudnet.wire.http1 import Response, render_response

_SEED_LENGTH = len(trees.random_seed())


class Answer:
    """The answer to one reply, rendered ahead; `response()` is what to send for a request."""

    __slots__ = ("_fixed", "_head", "_headers", "_rest", "reply")

    def __init__(self, reply: Reply, *headers: tuple[str, str]) -> None:
        self.reply = reply
        self._headers = [("Content-Type", reply.content_type), *headers]
        if reply.random_seed:
            self._fixed: Response | None = None
            self._rest = b'",' + reply.body[1:]
            length = len(trees.SEED_OPENING) + _SEED_LENGTH + len(self._rest)
            # A HEAD rendering is the head alone, with the length the body will have.
            self._head = render_response(reply.status, self._headers, b"", True, length)
        else:
            wire = render_response(reply.status, self._headers, reply.body, True)
            self._fixed = Response(reply.status, self._headers, reply.body, wire=wire)
            self._head = self._rest = b""

    @property
    def status(self) -> int:
        return self.reply.status

    def response(self) -> Response:
        fixed = self._fixed
        if fixed is not None:
            return fixed  # shared by every request: nobody changes a Response once made
        body = b"".join((trees.SEED_OPENING, trees.random_seed(), self._rest))
        return Response(self.reply.status, self._headers, body, wire=self._head + body)
