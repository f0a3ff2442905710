"""The relay half of the metadata proxy: who is asking (from the synced state), signing, forwarding.

Identity comes only from what the proxy itself observed — the namespace (so the network) a connection
arrived in and its source address — looked up in the agent's desired state. An address is only unique
within a network (tenants may overlap), and an address claimed by two instances of one network identifies
nobody (fail closed, as neutron does). The request then goes to the metadata API with a fresh set of headers:
the identity, its signature, and the few guest headers the API has a use for.
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass
from typing import Any

from cloudnet.wire import http1, request_ids, signing
from cloudnet.wire.http1 import Request, Response

# Guest headers worth passing on; everything else is dropped, so no identity header or look-alike of one
# (X-Forwarded-For, X-Instance-ID*, X-Tenant-ID, X-Network-ID, X-OVN-*, X_Instance_ID, ...) can get through.
FORWARDED_HEADERS = frozenset(
    {"user-agent", "accept", "content-type", "x-aws-ec2-metadata-token", "x-aws-ec2-metadata-token-ttl-seconds"}
)
_FORWARDED_RAW = frozenset(name.encode() for name in FORWARDED_HEADERS)
_FORWARDED_LENGTHS = frozenset(len(name) for name in FORWARDED_HEADERS)  # others are passed over at a glance
# Response headers that describe the hop, not the answer (and the API's copy of the request's id: the relay adds
# its own, the same unless the API is older).
HOP_HEADERS = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "content-length", "te", "trailer",
     "upgrade", "server", "date", "x-openstack-request-id"}
)  # fmt: skip
RETRY_AFTER = "2"


@dataclass(frozen=True)
class Caller:
    instance_id: str
    project_id: str
    signature: str

    def identity(self, network_id: str, source: str) -> bytes:
        """The header lines that say who is asking (the same for every request of the caller)."""
        return (
            f"X-Forwarded-For: {source}\r\nX-Network-ID: {network_id}\r\nX-Instance-ID: {self.instance_id}\r\n"
            f"X-Tenant-ID: {self.project_id}\r\nX-Instance-ID-Signature: {self.signature}\r\n"
        ).encode("latin-1")


@functools.lru_cache(maxsize=4096)  # asked once per guest connection, and a guest connects again and again
def canonical_ip(address: str) -> str | None:
    """The address as the state writes it: IPv4-mapped IPv6 as IPv4, no zone index."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip)


def mac_of_link_local(address: str) -> str | None:
    """The MAC an EUI-64 link-local address was made from (fe80::a8bb:ccff:fedd:eeff -> aa:bb:cc:dd:ee:ff)."""
    try:
        ip = ipaddress.IPv6Address(address.split("%", 1)[0])
    except ValueError:
        return None
    if not ip.is_link_local:
        return None
    iid = ip.packed[8:]
    if iid[3:5] != b"\xff\xfe":
        return None  # a privacy or stable-privacy address: it does not give its MAC away
    mac = bytes([iid[0] ^ 0x02, iid[1], iid[2], iid[5], iid[6], iid[7]])
    return ":".join(f"{b:02x}" for b in mac)


class Callers:
    """(network, address) -> the instance that owns it on this host, from one desired state."""

    def __init__(self, state: dict[str, Any], secret: str) -> None:
        found: dict[tuple[str, str], set[tuple[str, str]]] = {}
        for inst in state.get("instances", []):
            owner = (inst["id"], inst["project_id"])
            for port_id in inst.get("ports", []):
                port = state.get("ports", {}).get(port_id)
                if port is None:
                    continue
                net = port["network_id"]
                for fixed in port.get("fixed_ips", []):
                    address = canonical_ip(fixed["ip_address"])
                    if address:
                        found.setdefault((net, address), set()).add(owner)
                if port.get("mac_address"):
                    found.setdefault((net, "mac:" + port["mac_address"].lower()), set()).add(owner)
        signatures: dict[str, str] = {}
        self._table: dict[tuple[str, str], Caller | None] = {}
        for key, owners in found.items():
            if len(owners) != 1:
                self._table[key] = None  # claimed twice on one network: identifies nobody
                continue
            ((instance_id, project_id),) = owners
            if instance_id not in signatures:
                signatures[instance_id] = signing.sign(secret, instance_id)  # once per instance, not per request
            self._table[key] = Caller(instance_id, project_id, signatures[instance_id])
        # Served: the networks of this host's instances, and every network the dataplane made a metadata
        # namespace for (pool ports plumb theirs ahead: a guest taking over a parked device asks at once).
        served = {nid for nid, net in state.get("networks", {}).items() if net.get("metadata_port")}
        self.networks = frozenset(served | {net for net, _a in found})
        self.instances = frozenset(inst["id"] for inst in state.get("instances", []))

    def find(self, network_id: str, source: str) -> Caller | None:
        caller = self._table.get((network_id, source))  # the usual case: already in canonical form
        if caller is not None:
            return caller
        address = canonical_ip(source)
        if address is None:
            return None
        caller = self._table.get((network_id, address))
        if caller is None and ":" in address:
            mac = mac_of_link_local(address)
            if mac is not None:
                caller = self._table.get((network_id, "mac:" + mac))
        return caller


def upstream_request(
    request: Request, caller: Caller, network_id: str, source: str, method: str | None = None, request_id: str = ""
) -> bytes:
    """The request as the API gets it: same method (or `method`), path and body; identity headers set, not
    passed on; `request_id` its first header line (where the API looks for it: wire/request_ids.split_first)."""
    target = request.target
    if not target.startswith("/"):
        # absolute-form ("GET http://169.254.169.254/x"): only the path and query matter to the API
        rest = target.split("://", 1)[-1]
        target = "/" + rest.split("/", 1)[1] if "/" in rest else "/"
    first = f"{request_ids.HEADER}: {request_id}\r\n" if request_id else ""
    parts = [f"{method or request.method} {target} HTTP/1.1\r\n{first}Host: metadata\r\n".encode("latin-1"),
             caller.identity(network_id, source)]  # fmt: skip
    for name, value in request.raw_headers:
        if len(name) in _FORWARDED_LENGTHS:
            lowered = name.lower()
            if lowered in _FORWARDED_RAW:
                parts.append(b"%s: %s\r\n" % (lowered, value.strip(b" \t")))
    body = request.body
    if body or request.method not in ("GET", "HEAD"):
        parts.append(b"Content-Length: %d\r\n" % len(body))
    parts.append(b"\r\n")
    parts.append(body)
    return b"".join(parts)


def answer_headers(response: Response) -> list[tuple[str, str]]:
    return [(name, value) for name, value in response.headers if name not in HOP_HEADERS]


# (status, the API's headers) -> what the guest gets of them, and its answer's head up to Content-Length. The
# API answers a guest's usual questions with a handful of different heads.
_GUEST_HEADS: dict[tuple[int, tuple[tuple[str, str], ...]], tuple[list[tuple[str, str]], bytes]] = {}
_FRAMING_TAIL = b"Content-Length: 0\r\nConnection: keep-alive\r\n\r\n"
_ID_NAME = request_ids.HEADER.encode()


def guest_answer(response: Response, request_id: str) -> Response:
    """The API's answer as the guest gets it: hop headers dropped, the request's id added (the upstream connection
    took the API's copy of it out of the headers: they key this table), rendered ahead for a kept-alive GET."""
    key = (response.status, tuple(response.headers))
    head = _GUEST_HEADS.get(key)
    if head is None:
        headers = answer_headers(response)
        rendered = http1.render_response(response.status, headers, b"", True, 0)
        if len(_GUEST_HEADS) >= 256:
            _GUEST_HEADS.clear()
        _GUEST_HEADS[key] = head = (headers, rendered[: -len(_FRAMING_TAIL)])
    headers, start = head
    body = response.body
    wire = b"%s%s: %s\r\nContent-Length: %d\r\nConnection: keep-alive\r\n\r\n%s" % (
        start, _ID_NAME, request_id.encode("latin-1"), len(body), body)  # fmt: skip
    return Response(response.status, [*headers, (request_ids.HEADER, request_id)], body, wire=wire)


def guest_forwarded(request: Request) -> bool:
    """Did the guest send forwarding headers of its own (X-Forwarded-For, Forwarded, in any spelling)?"""
    return any(name.replace("_", "-") in ("x-forwarded-for", "forwarded") for name, _v in request.headers)


def unavailable() -> Response:
    """What a guest gets while the API cannot be reached: cloud-init retries a 503, honouring Retry-After."""
    return http1.plain(503, "The metadata service is unavailable; try again.", ("Retry-After", RETRY_AFTER))
