"""Turn request bodies into validated models; pydantic errors become Neutron-worded 400s."""

from __future__ import annotations

import ipaddress
import uuid
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from cloudnet.errors import BadRequest

M = TypeVar("M", bound=BaseModel)


class Body(BaseModel):
    """Base of every request model: unknown attributes are an error, aliases like `router:external`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, str_strip_whitespace=False)


def parse(model: type[M], data: Any) -> M:
    if not isinstance(data, dict):
        raise BadRequest("Body contains invalid data")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _to_bad_request(model, exc) from None


def _to_bad_request(model: type[BaseModel], exc: ValidationError) -> BadRequest:
    errors = exc.errors(include_url=False)
    extra = [str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden" and len(e["loc"]) == 1]
    if extra:
        return BadRequest(f"Unrecognized attribute(s) '{', '.join(extra)}'")
    err = errors[0]
    loc = err["loc"]
    name = _alias_of(model, str(loc[0])) if loc else "body"
    where = name + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc[1:])
    reason = err["msg"]
    if reason.startswith("Value error, "):
        reason = reason[len("Value error, ") :]
    elif "input" in err and err["type"] not in ("missing",):
        reason = f"'{err['input']}' is not valid: {reason}"
    return BadRequest(f"Invalid input for {where}. Reason: {reason}.")


def _alias_of(model: type[BaseModel], field_name: str) -> str:
    f = model.model_fields.get(field_name)
    return f.alias if f is not None and f.alias else field_name


def is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except (ValueError, AttributeError, TypeError):
        return False
    return True


def check_uuid(value: str, what: str) -> str:
    if not is_uuid(value):
        raise ValueError(f"'{value}' is not a valid UUID for {what}")
    return value


def check_ip(value: str) -> str:
    """Canonical text form of an IP address (so stored and compared values are one spelling)."""
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError(f"'{value}' is not a valid IP address") from None


def check_tags(values: list[str]) -> list[str]:
    """Tags given in a create body: the same rules as the tag API (unique, 1-255 characters, no ',' or '/')."""
    for v in values:
        if not v or len(v) > 255 or "," in v or "/" in v:
            raise ValueError(f"'{v}' is not a valid tag")
    dups = sorted({v for v in values if values.count(v) > 1})
    if dups:
        raise ValueError(f"Duplicate items in the list: '{', '.join(dups)}'")
    return values
