"""The rules of a network forward's body (LXD's shape and words): canonical form, port ranges, validation.

Bodies are normalised first (LXD `Normalise`), then validated in LXD's order with LXD's words (reference §1.2,
§1.3), with the reference's fixes: every failure is a 400 (not 500) and ports are 1..65535.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cloudnet.errors import BadRequest
from cloudnet.services.forwards.uplinks import IP, Net, parse_ip, quoted, reserved_addresses

PROTOCOLS = ("tcp", "udp")
# Port specifications a forward may have (LXD sets no limit): each is a line of a request's validation and a rule
# of the router's NAT; a thousand is far beyond any forward seen, and keeps a hostile body's cost bounded.
MAX_PORT_SPECS = 1000
PORT_KEYS = {"description", "protocol", "listen_port", "target_port", "target_address"}


# -- canonical form -----------------------------------------------------------------------------


def canonical_ip(value: str) -> str:
    try:
        return str(parse_ip(value))
    except ValueError:
        return value.strip()


def _ports_text(value: str) -> str:
    return ",".join(part.strip() for part in value.split(","))


def normalise(body: dict[str, Any]) -> dict[str, Any]:
    """LXD's Normalise: canonical addresses, trimmed descriptions, port lists without blanks."""
    out: dict[str, Any] = {}
    if "listen_address" in body and isinstance(body["listen_address"], str):
        out["listen_address"] = canonical_ip(body["listen_address"])
    if "description" in body:
        out["description"] = (
            body["description"].strip() if isinstance(body["description"], str) else body["description"]
        )
    if "config" in body:
        config = body["config"]
        if isinstance(config, dict) and isinstance(config.get("target_address"), str):
            config = {**config, "target_address": canonical_ip(config["target_address"])}
        out["config"] = config
    if "ports" in body:
        ports = body["ports"]
        if isinstance(ports, list):
            ports = [_normalise_port(p) if isinstance(p, dict) else p for p in ports]
        out["ports"] = ports
    for key in body.keys() - out.keys():
        out[key] = body[key]
    return out


def _normalise_port(port: dict[str, Any]) -> dict[str, Any]:
    out = dict(port)
    for key in ("description", "protocol"):
        if isinstance(out.get(key), str):
            out[key] = out[key].strip()
    if isinstance(out.get("target_address"), str):
        out["target_address"] = canonical_ip(out["target_address"])
    for key in ("listen_port", "target_port"):
        if isinstance(out.get(key), str):
            out[key] = _ports_text(out[key])
    return out


# -- port ranges --------------------------------------------------------------------------------


def parse_port_range(text: str) -> tuple[int, int]:
    """`N` or `N-M` (M > N), each 1..65535, in ASCII digits (int() alone takes "8_0" and "٨٠")."""
    parts = text.split("-")
    if len(parts) > 2:
        raise ValueError(f"Invalid port range {quoted(text)}")
    if not all(p.isascii() and p.isdigit() for p in parts):
        raise ValueError(f"Invalid port {quoted(text)}")
    numbers = [int(p) for p in parts]
    for n in numbers:
        if not 1 <= n <= 65535:
            raise ValueError(f"Port {n} out of range (1-65535)")
    if len(numbers) == 2 and numbers[1] <= numbers[0]:
        raise ValueError("End port should be higher than start port")
    return numbers[0], numbers[-1]


def parse_ports(text: str) -> list[tuple[int, int]]:
    # An empty item ("80,,81") is an invalid port, as in LXD (ParseInt of "").
    return [parse_port_range(part.strip()) for part in text.split(",")]


def count(ranges: Iterable[tuple[int, int]]) -> int:
    """How many ports the ranges hold, repeats included (LXD compares the lengths of the expanded lists)."""
    return sum(hi - lo + 1 for lo, hi in ranges)


# -- validation ---------------------------------------------------------------------------------


def _check_target(address: IP, subnets: list[Net], label: str, index: int | None) -> None:
    """A target lies in the network's subnet of its family and is not its network or broadcast address."""
    where = f" in port specification {index}" if index is not None else ""
    same_family = [s for s in subnets if s.version == address.version]
    if not same_family:
        return
    inside = [s for s in same_family if address in s]
    if not inside:
        raise BadRequest(f"{label} is not within the network subnet{where}")
    kind = reserved_addresses(inside[0]).get(address)
    if kind is not None:
        raise BadRequest(f"{label} cannot be a {kind} address")


def validate(listen: IP, body: dict[str, Any], subnets: Iterable[Net]) -> None:
    """LXD's forwardValidate (reference §1.3, rules 8-18), after the listen-address checks; `subnets`: the
    network's. Bounded whatever the body: at most MAX_PORT_SPECS port specifications, and ranges are counted, not
    expanded, but for the listen ports, which are checked for repeats one by one until the first one repeated (at
    most 65,535 a protocol, whatever is asked)."""
    config = body.get("config") or {}
    if not isinstance(config, dict) or not all(isinstance(v, str) for v in config.values()):
        raise BadRequest("Invalid config: expected a map of strings")
    for key in config:
        if key != "target_address" and not key.startswith("user."):
            raise BadRequest(f"Invalid option {quoted(key)}")
    subnets = list(subnets)
    default = None
    if config.get("target_address"):
        try:
            default = parse_ip(config["target_address"])
        except ValueError:
            raise BadRequest("Invalid default target address") from None
        if default.version != listen.version:
            raise BadRequest("Cannot mix IP versions in listen address and default target address")
        _check_target(default, subnets, "Default target address", None)
    ports = body.get("ports") or []
    if not isinstance(ports, list):
        raise BadRequest("Invalid ports: expected a list")
    if len(ports) > MAX_PORT_SPECS:
        raise BadRequest(f"Too many port specifications: {len(ports)} (at most {MAX_PORT_SPECS} a forward)")
    seen: dict[str, set[int]] = {p: set() for p in PROTOCOLS}
    for i, port in enumerate(ports):
        if not isinstance(port, dict) or set(port) - PORT_KEYS:
            extra = sorted(set(port) - PORT_KEYS) if isinstance(port, dict) else []
            raise BadRequest(f"Invalid port specification {i}" + (f": unknown field(s) {extra}" if extra else ""))
        if port.get("protocol") not in PROTOCOLS:
            raise BadRequest(f"Invalid port protocol in port specification {i}, protocol must be one of: tcp, udp")
        try:
            target = parse_ip(str(port.get("target_address", "")))
        except ValueError:
            raise BadRequest(f"Invalid target address in port specification {i}") from None
        if default is not None and target == default:
            raise BadRequest(f"Target address is same as default target address in port specification {i}")
        if target.version != listen.version:
            raise BadRequest(f"Cannot mix IP versions in listen address and port specification {i} target address")
        _check_target(target, subnets, "Target address", i)
        listen_text = port.get("listen_port")
        if not isinstance(listen_text, str) or listen_text.strip() == "":
            raise BadRequest(f"Missing listen port in port specification {i}")
        try:
            listen_ranges = parse_ports(listen_text)
        except ValueError as exc:
            raise BadRequest(f"Invalid listen port in port specification {i}: {exc}") from None
        taken = seen[port["protocol"]]
        for p in (p for lo, hi in listen_ranges for p in range(lo, hi + 1)):  # (stops at the first repeat)
            if p in taken:
                raise BadRequest(
                    f"Duplicate listen port {p} for protocol {quoted(port['protocol'])} in port specification {i}"
                )
            taken.add(p)
        target_text = port.get("target_port") or ""
        if not isinstance(target_text, str):
            raise BadRequest(f"Invalid target port in port specification {i}")
        if target_text:
            try:
                target_count = count(parse_ports(target_text))
            except ValueError:
                raise BadRequest(f"Invalid target port in port specification {i}") from None
            if target_count not in (1, count(listen_ranges)):
                raise BadRequest(f"Mismatch of listen port(s) and target port(s) count in port specification {i}")
        if port.get("description") is not None and not isinstance(port["description"], str):
            raise BadRequest(f"Invalid description in port specification {i}")


def targets(config: dict[str, Any] | None, ports: list[dict[str, Any]] | None) -> list[str]:
    """The addresses a stored forward sends traffic to: its default target and its ports' targets."""
    found = [(config or {}).get("target_address") or ""] + [p.get("target_address") or "" for p in ports or []]
    return sorted({a for a in found if a})
