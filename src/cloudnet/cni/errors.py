"""CNI error codes (the spec's well-known ones and the plugin's own, 100 and up) and their JSON shape."""

from __future__ import annotations

from typing import Any

INCOMPATIBLE_VERSION = 1
UNSUPPORTED_FIELD = 2
UNKNOWN_CONTAINER = 3
INVALID_ENV = 4
IO_FAILURE = 5
DECODE_FAILURE = 6
INVALID_CONFIG = 7
TRY_AGAIN_LATER = 11
NOT_AVAILABLE = 50  # STATUS: the plugin cannot take ADDs now

# The plugin's own.
API_REFUSED = 100  # cloudnet answered a request with an error that retrying will not fix
PLUG_FAILED = 101  # the host's agent could not plug the instance (its reason is the message)
CHECK_FAILED = 102  # CHECK found the attachment missing or different from what was added
INTERNAL = 103  # a bug of the plugin's: the details say where


class CniError(Exception):
    """A failure reported to the runtime: {"cniVersion", "code", "msg", "details"} on stdout, exit status 1."""

    def __init__(self, code: int, msg: str, details: str = "", request_id: str = "") -> None:
        super().__init__(msg)
        self.code = code
        self.msg = msg
        self.details = details
        # The API's id of the request that failed (or made what failed): the server's and the agent's log lines
        # about it carry it.
        self.request_id = request_id

    def shape(self, version: str) -> dict[str, Any]:
        body: dict[str, Any] = {"cniVersion": version, "code": self.code, "msg": self.msg}
        tag = f"Request-ID: {self.request_id}" if self.request_id and self.request_id not in self.msg else ""
        details = "; ".join(part for part in (self.details, tag) if part)
        if details:
            body["details"] = details
        return body

    def log_line(self, command: str) -> str:
        """What the plugin writes to stderr (the runtime's log) about it."""
        rid = f" (Request-ID: {self.request_id})" if self.request_id and self.request_id not in self.msg else ""
        line = f"cloudnet-cni: {command} failed: {self.msg}{rid}"
        # (one line whatever a message holds; wire/logs' helper is not imported: its imports would cost every ADD)
        return line if line.isprintable() else line.encode("unicode_escape").decode("ascii")
