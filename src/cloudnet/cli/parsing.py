"""Parsing of option values (`start=IP,end=IP`, `KEY=VALUE`, port ranges, ...) into API fields.

Everything here is pure; bad input raises `CliError` naming the option, so the user sees one line.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from cloudnet.cli.errors import CliError


def parse_pairs(
    text: str,
    *,
    option: str,
    allowed: Iterable[str],
    required: Iterable[str] = (),
    aliases: dict[str, str] | None = None,
) -> dict[str, str]:
    """`"start=10.0.0.2,end=10.0.0.9"` -> `{"start": "10.0.0.2", "end": "10.0.0.9"}`.

    Keys are checked against `allowed` (after mapping `aliases`), so typos fail loudly rather than
    being dropped.
    """
    allowed = tuple(allowed)
    aliases = aliases or {}
    expected = ",".join(f"{key}=..." for key in allowed)
    result: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key = aliases.get(key.strip(), key.strip())
        if not sep or not key:
            raise CliError(f"{option} '{text}': expected {expected}")
        if key not in allowed:
            raise CliError(f"{option} '{text}': unknown key '{key}' (expected {expected})")
        if key in result:
            raise CliError(f"{option} '{text}': '{key}' given twice")
        result[key] = value.strip()
    missing = [key for key in required if not result.get(key)]
    if missing:
        raise CliError(f"{option} '{text}': missing {', '.join(missing)}")
    return result


def parse_allocation_pool(text: str) -> dict[str, str]:
    return parse_pairs(text, option="--allocation-pool", allowed=("start", "end"), required=("start", "end"))


def parse_host_route(text: str) -> dict[str, str]:
    """`destination=CIDR,gateway=IP` (as the openstack client spells it) -> Neutron's `nexthop`."""
    pairs = parse_pairs(
        text,
        option="--host-route",
        allowed=("destination", "gateway"),
        required=("destination", "gateway"),
        aliases={"nexthop": "gateway"},
    )
    return {"destination": pairs["destination"], "nexthop": pairs["gateway"]}


def parse_fixed_ip(text: str) -> dict[str, str]:
    """`subnet=SUBNET,ip-address=IP` with either key optional; the subnet is still a name or id."""
    pairs = parse_pairs(
        text,
        option="--fixed-ip",
        allowed=("subnet", "ip-address"),
        aliases={"ip_address": "ip-address", "subnet_id": "subnet"},
    )
    if not any(pairs.values()):
        raise CliError(f"--fixed-ip '{text}': expected subnet=SUBNET and/or ip-address=IP")
    return pairs


def parse_allowed_address(text: str) -> dict[str, str]:
    """`ip-address=10.0.0.7[,mac-address=MAC]` -> an allowed address pair (`openstack port --allowed-address`)."""
    pair = parse_pairs(
        text, option="--allowed-address", allowed=("ip-address", "mac-address"), required=("ip-address",)
    )
    return {key.replace("-", "_"): value for key, value in pair.items()}


def parse_assignment(text: str, *, option: str = "KEY=VALUE") -> tuple[str, str]:
    """`"ipv4.nat.address=203.0.113.7"` -> `("ipv4.nat.address", "203.0.113.7")`; values may hold '='."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise CliError(f"{option} '{text}': expected KEY=VALUE")
    return key.strip(), value


def parse_assignments(texts: Iterable[str], *, option: str = "KEY=VALUE") -> dict[str, str]:
    return dict(parse_assignment(text, option=option) for text in texts)


def parse_port_range(text: str) -> tuple[int, int]:
    """`"22"` -> (22, 22); `"8000:8080"` -> (8000, 8080)."""
    low, sep, high = text.partition(":")
    try:
        start = int(low)
        end = int(high) if sep else start
    except ValueError:
        raise CliError(f"--dst-port '{text}': expected N or N:M") from None
    if not (0 <= start <= end <= 65535):
        raise CliError(f"--dst-port '{text}': expected 0 <= N <= M <= 65535")
    return start, end


def parse_gateway(text: str) -> str | None:
    """`none` means "no gateway" (JSON null); anything else must be an IP address."""
    if text.strip().lower() == "none":
        return None
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        raise CliError(f"--gateway '{text}': expected an IP address or 'none'") from None


def ip_version_of(cidr: str) -> int:
    try:
        return ipaddress.ip_network(cidr.strip(), strict=False).version
    except ValueError:
        raise CliError(f"--subnet-range '{cidr}': not a valid CIDR") from None


def ethertype_of(cidr: str) -> str:
    try:
        version = ipaddress.ip_network(cidr.strip(), strict=False).version
    except ValueError:
        raise CliError(f"--remote-ip '{cidr}': not a valid CIDR") from None
    return f"IPv{version}"
