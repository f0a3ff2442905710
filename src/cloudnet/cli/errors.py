"""Errors the CLI reports to the user as one line on stderr, and how API errors are worded."""

from __future__ import annotations

from typing import Any

from cloudnet.wire import request_ids


class CliError(Exception):
    """A failure the user can act on: printed as `Error: <message>`, exit status 1, no traceback."""


class ApiError(CliError):
    """The server answered with a 4xx/5xx status."""

    def __init__(self, status: int, message: str, *, type: str = "", detail: str = "", request_id: str = "") -> None:
        self.status = status
        self.message = message
        self.type = type
        self.detail = detail
        self.request_id = request_id
        super().__init__(api_error_line(status, message, type=type, detail=detail, request_id=request_id))

    @classmethod
    def from_payload(cls, status: int, payload: Any, reason: str = "", request_id: str | None = None) -> ApiError:
        """Build from a decoded error body; `payload` is None when the body was not JSON; `request_id` the answer's
        X-OpenStack-Request-ID (shown only when well-formed: it comes from whatever answered)."""
        rid = request_ids.well_formed(request_id) or ""
        if isinstance(payload, dict):
            neutron = payload.get("NeutronError")
            if isinstance(neutron, dict):
                return cls(
                    status,
                    str(neutron.get("message") or reason or "request failed"),
                    type=str(neutron.get("type") or ""),
                    detail=str(neutron.get("detail") or ""),
                    request_id=rid,
                )
            # Framework-level errors (unknown route, request validation) use FastAPI's shape.
            if "detail" in payload:
                return cls(status, _fastapi_detail(payload["detail"]) or reason, type=reason, request_id=rid)
        return cls(status, reason or "request failed", type=reason if payload is not None else "", request_id=rid)


def one_line(text: str) -> str:
    return " ".join(text.split())


def api_error_line(status: int, message: str, *, type: str = "", detail: str = "", request_id: str = "") -> str:
    """`Network foo could not be found. (404 NetworkNotFound) (Request-ID: req-...)`: the id as the `openstack`
    CLI prints it, for the operator to find the request in the server's log."""
    text = message if not detail or detail in message else f"{message} {detail}"
    suffix = f"{status} {type}" if type and type != message else str(status)
    line = one_line(f"{text} ({suffix})")
    return f"{line} (Request-ID: {request_id})" if request_id else line


def _fastapi_detail(detail: Any) -> str:
    if isinstance(detail, str):
        return detail
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, dict):
                where = ".".join(str(p) for p in item.get("loc", ()) if p != "body")
                msg = str(item.get("msg", ""))
                parts.append(f"{where}: {msg}" if where else msg)
            else:
                parts.append(str(item))
        return "; ".join(parts)
    return str(detail)
