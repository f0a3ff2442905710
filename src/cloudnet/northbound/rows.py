"""The shape every northbound builder shares: a desired NB row keyed by `external_ids:cloudnet:key`, the result of a
read (rows and refusals), and the checks that keep client text out of OVN names and match expressions."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

KEY = "cloudnet:key"
PREFIX = "cloudnet-"
# Ids and chassis names that may become OVN names: what cloudnet generates (UUIDs) and hostnames.
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


@dataclass(frozen=True)
class Row:
    """One NB row: its table, cloudnet's key for it, the columns cloudnet sets (in the IDL's Python form: optional
    columns as lists), for a child row the key of its parent and the parent's column that holds it, and `refs`:
    columns that reference other rows cloudnet owns, as their keys (resolved to rows when applied)."""

    table: str
    key: str
    columns: dict[str, Any]
    parent: str | None = None
    parent_column: str = ""
    refs: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class Desired:
    revision: int
    rows: list[Row] = field(default_factory=list)  # parents before their children
    refused: list[str] = field(default_factory=list)  # objects left out, with the reason


def element_counts(rows: Iterable[Row]) -> tuple[int, int]:
    """(the forwards' load-balancer VIPs, the security groups' ACLs and address-set addresses) among these rows: on
    OVN, what the Linux dataplane's nftables map and set elements are (cloudnet_forward_elements and
    cloudnet_firewall_elements)."""
    forwards = firewall = 0
    for row in rows:
        if row.table == "Load_Balancer":
            forwards += len(row.columns.get("vips") or ())
        elif row.table == "ACL":
            firewall += 1
        elif row.table == "Address_Set":
            firewall += len(row.columns.get("addresses") or ())
    return forwards, firewall


def ids(key: str, **values: str) -> dict[str, str]:
    return {KEY: key, **{f"cloudnet:{k}": v for k, v in values.items()}}


def ip_key(address: str) -> tuple[int, int]:
    ip = ipaddress.ip_network(address, strict=False).network_address
    return ip.version, int(ip)


def cidr_len(subnets: dict[str, Any], subnet_id: str) -> int:
    return ipaddress.ip_network(subnets[subnet_id].cidr).prefixlen


def address(text: Any) -> str:
    """An IP address in canonical form (raises ValueError on anything else): what may go into a match or an option."""
    return str(ipaddress.ip_address(str(text)))


def network(text: Any) -> str:
    """A CIDR in canonical form (raises ValueError on anything else)."""
    return str(ipaddress.ip_network(str(text), strict=False))
