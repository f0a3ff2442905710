"""Allowed address pairs (Neutron's allowed-address-pairs extension): what more than its own MAC and fixed IPs a
port may send from, an IP address or a CIDR with an optional MAC (the port's own when none is given).

Validated as Neutron validates them (neutron_lib's allowed address pair validator, multicast refused as with its
`aap-reject-multicast` extension), at most MAX_PAIRS per port, stored with the MAC resolved, replaced as a whole
on update.
"""

from __future__ import annotations

import functools
import ipaddress
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, delete, select

from cloudnet.errors import BadRequest, Conflict
from cloudnet.services import common
from cloudnet.services.validation import check_mac
from cloudnet.store import tables as t
from cloudnet.store.prepared import BulkInsert

AAP = t.allowed_address_pairs
# Neutron's max_allowed_address_pair (default 10).
MAX_PAIRS = 10
# Longest text an address or CIDR can be (an IPv6 address with an IPv4 tail and a prefix); also what an error
# message echoes at most of a bad value.
MAX_TEXT = 64
_MULTICAST = {4: ipaddress.ip_network("224.0.0.0/4"), 6: ipaddress.ip_network("ff00::/8")}
_INSERT = BulkInsert(AAP, ["port_id", "mac_address", "ip_address"])


@dataclass(frozen=True)
class Pair:
    ip_address: str  # as given (validated), as Neutron keeps it
    mac_address: str | None  # canonical form; None: the port's own


def _echo(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "..."


def parse(value: Any) -> list[Pair]:
    """The pairs of a request body (None: none), checked in Neutron's order; 400 with its messages."""
    if value is None:  # Neutron: convert_none_to_empty_list
        return []
    if not isinstance(value, list):
        raise BadRequest("Allowed address pairs must be a list.")
    if len(value) > MAX_PAIRS:
        raise BadRequest(
            f"The number of allowed address pair exceeds the maximum {MAX_PAIRS}.", type="AllowedAddressPairExhausted"
        )
    seen: set[tuple[str | None, str]] = set()
    out = []
    for item in value:
        if not isinstance(item, dict):
            raise BadRequest(f"Invalid input for allowed_address_pairs. Reason: '{_echo(item)}' is not a dictionary.")
        mac = None
        if "mac_address" in item:
            given = item["mac_address"]
            if not isinstance(given, str) or len(given) > MAX_TEXT:
                raise BadRequest(f"'{_echo(given)}' is not a valid MAC address")
            try:
                mac = check_mac(given)
            except ValueError as exc:
                raise BadRequest(str(exc)) from None
        if "ip_address" not in item:
            raise BadRequest("AllowedAddressPair must contain ip_address", type="AllowedAddressPairsMissingIP")
        ip = item["ip_address"]
        if not isinstance(ip, str) or len(ip) > MAX_TEXT:
            raise BadRequest(f"'{_echo(ip)}' is not a valid IP address")
        if (mac, ip) in seen:
            raise duplicate(mac, ip)
        seen.add((mac, ip))
        unknown = set(item) - {"mac_address", "ip_address"}
        if unknown:
            raise BadRequest(f"Unrecognized attribute(s) '{', '.join(sorted(_echo(k) for k in unknown))}'")
        _check_address(ip)
        out.append(Pair(ip, mac))
    return out


def _check_address(text: str) -> None:
    """An IP address or a CIDR, spelt as Neutron accepts them, not multicast (but 0.0.0.0/0)."""
    if any(c.isspace() for c in text) or "%" in text:  # (no zone ids: ipaddress would take "fe80::1%eth0")
        raise BadRequest(f"'{text}' is not a valid IP {'subnet' if '/' in text else 'address'}")
    if "/" in text:
        try:
            iface = ipaddress.ip_interface(text)
        except ValueError:
            iface = None
        # IPv4 in its plain spelling only: no netmask form, no leading zeros (Neutron's validate_subnet).
        if iface is None or (iface.version == 4 and str(iface) != text):
            raise BadRequest(f"'{text}' is not a valid IP subnet")
        net = iface.network
        if net != ipaddress.ip_network("0.0.0.0/0") and net.overlaps(_MULTICAST[net.version]):
            raise BadRequest(
                f"Subnet {text} overlaps with multicast range {_MULTICAST[net.version]}, which is not supported."
            )
        return
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise BadRequest(f"'{text}' is not a valid IP address") from None
    if address.is_multicast:
        raise BadRequest(f"IP {text} is a multicast address, which is not supported.")


def duplicate(mac: str | None, ip: str) -> BadRequest:
    return BadRequest(
        f"Request contains duplicate address pair: mac_address {mac} ip_address {ip}.",
        type="DuplicateAddressPairInRequest",
    )


def need_port_security() -> Conflict:
    return Conflict(
        "Port Security must be enabled in order to have allowed address pairs on a port.",
        type="AddressPairAndPortSecurityRequired",
    )


def resolve(pairs: list[Pair], port_mac: str) -> list[dict[str, str]]:
    """The pairs as stored and shown: the port's MAC where none was given; a pair given twice that way (once
    with the port's MAC, once without) is a duplicate, as Neutron's unique key makes it. In the order they are
    read back in."""
    out: list[dict[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for p in pairs:
        mac = p.mac_address or port_mac
        if (mac, p.ip_address) in seen:
            raise duplicate(mac, p.ip_address)
        seen.add((mac, p.ip_address))
        out.append({"ip_address": p.ip_address, "mac_address": mac})
    return sorted(out, key=lambda pair: (pair["mac_address"], pair["ip_address"]))  # as load() reads them back


# -- storage ------------------------------------------------------------------------------------


def insert(conn: Connection, rows: Iterable[tuple[str, list[dict[str, str]]]]) -> None:
    """Store the (port id, resolved pairs) given."""
    _INSERT.run(conn, [{"port_id": pid, **pair} for pid, pairs in rows for pair in pairs])


def replace(conn: Connection, port_id: str, pairs: list[dict[str, str]]) -> None:
    conn.execute(delete(AAP).where(AAP.c.port_id == port_id))
    insert(conn, [(port_id, pairs)])


def load(conn: Connection, port_ids: list[str]) -> dict[str, list[dict[str, str]]]:
    """The pairs of many ports, {port id: [{ip_address, mac_address}]} (by MAC, then address)."""
    out: dict[str, list[dict[str, str]]] = defaultdict(list)
    for chunk in common.chunks(port_ids, 5000):
        stmt = (
            select(AAP.c.port_id, AAP.c.ip_address, AAP.c.mac_address)
            .where(AAP.c.port_id.in_(chunk))
            .order_by(AAP.c.port_id, AAP.c.mac_address, AAP.c.ip_address)
        )
        for pid, ip, mac in conn.execute(stmt):
            out[pid].append({"ip_address": ip, "mac_address": mac})
    return out


def exist(conn: Connection, port_id: str) -> bool:
    return conn.execute(select(AAP.c.port_id).where(AAP.c.port_id == port_id).limit(1)).first() is not None


# -- the agent's view ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=1 << 16)  # (the desired state of every host asks for the same ones, on every event)
def canonical(text: str) -> str:
    """A stored address or CIDR as the dataplane takes it: the address in its canonical spelling, a CIDR as its
    network (host bits cleared)."""
    if "/" in text:
        return str(ipaddress.ip_network(text, strict=False))
    return str(ipaddress.ip_address(text))


@functools.lru_cache(maxsize=1 << 16)
def as_cidr(text: str) -> str:
    """A stored address or CIDR as a network (an address: /32 or /128), for sets of remote addresses."""
    return str(ipaddress.ip_network(text, strict=False))
