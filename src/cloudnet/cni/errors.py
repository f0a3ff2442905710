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

    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.code = code
        self.msg = msg
        self.details = details

    def shape(self, version: str) -> dict[str, Any]:
        body: dict[str, Any] = {"cniVersion": version, "code": self.code, "msg": self.msg}
        if self.details:
            body["details"] = self.details
        return body
