"""Errors the CLI reports to the user as one line on stderr, and how API errors are worded."""

from __future__ import annotations

from typing import Any


class CliError(Exception):
    """A failure the user can act on: printed as `Error: <message>`, exit status 1, no traceback."""


class ApiError(CliError):
    """The server answered with a 4xx/5xx status."""

    def __init__(self, status: int, message: str, *, type: str = "", detail: str = "") -> None:
        self.status = status
        self.message = message
        self.type = type
        self.detail = detail
        super().__init__(api_error_line(status, message, type=type, detail=detail))

    @classmethod
    def from_payload(cls, status: int, payload: Any, reason: str = "") -> ApiError:
        """Build from a decoded error body; `payload` is None when the body was not JSON."""
        if isinstance(payload, dict):
            neutron = payload.get("NeutronError")
            if isinstance(neutron, dict):
                return cls(
                    status,
                    str(neutron.get("message") or reason or "request failed"),
                    type=str(neutron.get("type") or ""),
                    detail=str(neutron.get("detail") or ""),
                )
            # Framework-level errors (unknown route, request validation) use FastAPI's shape.
            if "detail" in payload:
                return cls(status, _fastapi_detail(payload["detail"]) or reason, type=reason)
        return cls(status, reason or "request failed", type=reason if payload is not None else "")


def one_line(text: str) -> str:
    return " ".join(text.split())


def api_error_line(status: int, message: str, *, type: str = "", detail: str = "") -> str:
    """`Network foo could not be found. (404 NetworkNotFound)`."""
    text = message if not detail or detail in message else f"{message} {detail}"
    suffix = f"{status} {type}" if type and type != message else str(status)
    return one_line(f"{text} ({suffix})")


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
