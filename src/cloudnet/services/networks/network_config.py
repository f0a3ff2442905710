"""A network's `config` map (cloudnet extension, LXD's keys) and an external network's `cloudnet:routes`."""

from __future__ import annotations

import ipaddress
from typing import Any

from sqlalchemy import Connection

from cloudnet.errors import BadRequest
from cloudnet.services.forwards import forward_deps, uplinks
from cloudnet.services.forwards.uplinks import parse_ip, quoted

NAT_VERSION = {"ipv4.nat.address": 4, "ipv6.nat.address": 6}


def merge_config(conn: Connection, network_id: str | None, current: dict[str, str], update: Any) -> dict[str, str]:
    """`update` merged into `current` (an empty value removes a key, as in LXD), validated."""
    if not isinstance(update, dict):
        raise BadRequest("Invalid input for config. Reason: expected a map of strings.")
    for key, value in update.items():
        if key not in NAT_VERSION and not key.startswith("user."):
            raise BadRequest(f"Invalid option {quoted(key)}")
        if not isinstance(value, str):
            raise BadRequest(f"Invalid value for {key!r}: expected a string")
    merged = {k: v for k, v in {**current, **update}.items() if v != ""}
    for key, version in NAT_VERSION.items():
        if key not in update or not merged.get(key):
            continue
        try:
            address = parse_ip(merged[key])
        except ValueError:
            raise BadRequest(f"Invalid value for {key!r}: {merged[key]!r} is not an IP address") from None
        if address.version != version:
            raise BadRequest(f"Invalid value for {key!r}: {address} is not an IPv{version} address")
        if network_id is None:
            raise BadRequest(f"Cannot set {key!r} on a network without an uplink: attach it to a router first")
        uplink = uplinks.require_uplink(conn, network_id, lock=True)
        uplinks.check_external_address(conn, uplink, network_id, address, what="SNAT address")
        forward_deps.require_link(conn, uplink, network_id, version, f"SNAT address {quoted(str(address))}")
        merged[key] = str(address)
    return dict(sorted(merged.items()))


def check_routes(routes: Any, external: bool) -> list[str]:
    """`cloudnet:routes`: ranges routed to an external network from outside (LXD's uplink ipv4.routes)."""
    if not isinstance(routes, list) or not all(isinstance(r, str) for r in routes):
        raise BadRequest("Invalid input for cloudnet:routes. Reason: expected a list of CIDRs.")
    if routes and not external:
        raise BadRequest("cloudnet:routes can only be set on an external network (router:external)")
    out = []
    for r in routes:
        try:
            out.append(str(ipaddress.ip_network(r, strict=False)))
        except ValueError:
            raise BadRequest(f"Invalid input for cloudnet:routes. Reason: {r!r} is not a valid CIDR.") from None
    return sorted(set(out))
