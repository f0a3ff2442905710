"""Turn request bodies into validated models; pydantic errors become Neutron-worded 400s."""

from __future__ import annotations

import ipaddress
import re
import uuid
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

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


MAC_RE = re.compile(r"^([0-9a-f]{2}:){5}[0-9a-f]{2}$")


def check_mac(value: str) -> str:
    """A unicast MAC address in its canonical form (lower case, ':'), as Neutron accepts them for ports and
    address pairs (not all-zero, not broadcast or multicast)."""
    mac = value.strip().lower().replace("-", ":") if isinstance(value, str) else ""
    if not MAC_RE.match(mac) or mac == "00:00:00:00:00:00":
        raise ValueError(f"'{value}' is not a valid MAC address")
    if int(mac[:2], 16) & 1:
        raise ValueError(f"MAC address {value} is a multicast address, which is not supported.")
    return mac


# What the kernel takes as a device name (dev_valid_name: under IFNAMSIZ, no '/', ':' or space), narrowed to the
# characters runtimes use; `lo` is every namespace's loopback, never an instance's port.
IFNAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,15}$")


def check_ifname(value: str) -> str:
    """The name an instance's interface gets inside its namespace (a CNI runtime's CNI_IFNAME)."""
    if not IFNAME_RE.match(value) or value in (".", "..", "lo"):
        raise ValueError(f"'{value[:32]}' is not a usable interface name: 1-15 letters, digits, '_', '.' or '-', "
                         "not 'lo', '.' or '..'")  # fmt: skip
    return value


# Neutron's limits (MAX_TAGS_COUNT, MAX_TAG_LEN), the same for every taggable resource.
MAX_TAGS = 50
MAX_TAG_LENGTH = 255


def tag_error(tag: str) -> str | None:
    """Why `tag` is not a valid tag (1-255 characters, no ',', '/' or NUL), else None."""
    if not tag or len(tag) > MAX_TAG_LENGTH or "," in tag or "/" in tag or "\x00" in tag:
        return f"'{tag[:MAX_TAG_LENGTH]}' is not a valid tag"
    return None


def check_tags(values: list[str]) -> list[str]:
    """A resource's tags, in a create body or the tag API: at most MAX_TAGS, each valid, no duplicates (checked
    in one pass: the count is bounded first, so a long list costs nothing more than reading it)."""
    if len(values) > MAX_TAGS:
        raise ValueError(f"a resource has at most {MAX_TAGS} tags, not {len(values)}")
    seen: set[str] = set()
    dups: set[str] = set()
    for v in values:
        why = tag_error(v)
        if why:
            raise ValueError(why)
        (dups if v in seen else seen).add(v)
    if dups:
        raise ValueError(f"Duplicate items in the list: '{', '.join(sorted(dups))}'")
    return values


# The `tags` attribute of create bodies (pydantic reads at most MAX_TAGS + 1 items' worth of error).
Tags = Annotated[list[str], Field(default_factory=list), AfterValidator(check_tags)]
