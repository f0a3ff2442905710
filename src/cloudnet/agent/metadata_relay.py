"""The relay half of the metadata proxy: who is asking (from the synced state), signing, forwarding.

Identity comes only from what the proxy itself observed — the namespace (so the network) a connection
arrived in and its source address — looked up in the agent's desired state. An address is only unique
within a network (tenants may overlap), and an address claimed by two instances of one network identifies
nobody (fail closed, as neutron does). The request then goes to the metadata API with a fresh set of headers:
the identity, its signature, and the few guest headers the API has a use for.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from dataclasses import dataclass
from typing import Any

from cloudnet.agent import http1
from cloudnet.agent.http1 import Request, Response
from cloudnet.metadata import signing

# Guest headers worth passing on; everything else is dropped, so no identity header or look-alike of one
# (X-Forwarded-For, X-Instance-ID*, X-Tenant-ID, X-Network-ID, X-OVN-*, X_Instance_ID, ...) can get through.
FORWARDED_HEADERS = frozenset(
    {"user-agent", "accept", "content-type", "x-aws-ec2-metadata-token", "x-aws-ec2-metadata-token-ttl-seconds"}
)
# Response headers that describe the hop, not the answer.
HOP_HEADERS = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "content-length", "te", "trailer",
     "upgrade", "server", "date"}
)  # fmt: skip
CONNECT_TIMEOUT = 5.0
ANSWER_TIMEOUT = 60.0  # neutron's proxy waits 60 s for nova
MAX_IDLE = 32
RETRY_AFTER = "2"


@dataclass(frozen=True)
class Caller:
    instance_id: str
    project_id: str
    signature: str


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
        self.networks = frozenset(net for net, _a in found)
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


class UpstreamUnavailable(Exception):
    pass


class Upstream:
    """The metadata API (`http://host:port` or `unix:/path`), over a small pool of kept-alive connections."""

    def __init__(self, url: str, answer_timeout: float = ANSWER_TIMEOUT) -> None:
        self.url = url
        self.answer_timeout = answer_timeout
        if url.startswith("unix:"):
            self._path: str | None = url[len("unix:") :]
            self._addr: tuple[str, int] | None = None
        else:
            hostport = url.removeprefix("http://").rstrip("/")
            host, _sep, port = hostport.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"metadata API address {url!r} must be http://HOST:PORT or unix:/PATH")
            self._path, self._addr = None, (host.strip("[]"), int(port))
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._busy: dict[asyncio.StreamWriter, float] = {}  # connections waiting for an answer, since when
        self._expired: set[asyncio.StreamWriter] = set()  # closed by `sweep`: not to be retried

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            if self._path is not None:
                opening = asyncio.open_unix_connection(self._path)
            else:
                assert self._addr is not None
                opening = asyncio.open_connection(*self._addr)
            return await asyncio.wait_for(opening, CONNECT_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            raise UpstreamUnavailable(str(exc) or type(exc).__name__) from None

    async def exchange(self, method: str, data: bytes) -> Response:
        """Send one request (head and body), return the whole answer."""
        for _attempt in range(2):
            reused = bool(self._idle)
            reader, writer = self._idle.pop() if reused else await self._connect()
            self._busy[writer] = asyncio.get_running_loop().time()  # `sweep` enforces ANSWER_TIMEOUT
            try:
                writer.write(data)
                response = await http1.read_response(reader, method)
            except (ConnectionError, asyncio.IncompleteReadError) as exc:
                writer.close()
                if writer in self._expired:
                    raise UpstreamUnavailable(f"no answer within {self.answer_timeout:g} s") from None
                if reused and not getattr(exc, "partial", b""):
                    continue  # the API closed an idle connection just as we used it: once more on a fresh one
                raise UpstreamUnavailable(str(exc) or type(exc).__name__) from None
            except (http1.HttpError, asyncio.LimitOverrunError) as exc:
                writer.close()
                raise UpstreamUnavailable(str(exc) or type(exc).__name__) from None
            finally:
                self._busy.pop(writer, None)
                self._expired.discard(writer)
            if response.keep_alive and len(self._idle) < MAX_IDLE:
                self._idle.append((reader, writer))
            else:
                writer.close()
            return response
        raise UpstreamUnavailable("connection closed")

    def sweep(self, now: float) -> None:
        """Give up on answers that take longer than ANSWER_TIMEOUT: the waiting request gets a 503."""
        for writer, since in list(self._busy.items()):
            if now - since > self.answer_timeout:
                self._expired.add(writer)
                writer.close()

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for _reader, writer in idle:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


def upstream_request(request: Request, caller: Caller, network_id: str, source: str) -> bytes:
    """The request as the API gets it: same method, path and body; identity headers set, not passed on."""
    target = request.target
    if not target.startswith("/"):
        # absolute-form ("GET http://169.254.169.254/x"): only the path and query matter to the API
        rest = target.split("://", 1)[-1]
        target = "/" + rest.split("/", 1)[1] if "/" in rest else "/"
    lines = [
        f"{request.method} {target} HTTP/1.1",
        "Host: metadata",
        f"X-Forwarded-For: {source}",
        f"X-Network-ID: {network_id}",
        f"X-Instance-ID: {caller.instance_id}",
        f"X-Tenant-ID: {caller.project_id}",
        f"X-Instance-ID-Signature: {caller.signature}",
    ]
    lines += [f"{name}: {value}" for name, value in request.headers if name in FORWARDED_HEADERS]
    lines.append(f"Content-Length: {len(request.body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + request.body


def answer_headers(response: Response) -> list[tuple[str, str]]:
    return [(name, value) for name, value in response.headers if name not in HOP_HEADERS]


def guest_forwarded(request: Request) -> bool:
    """Did the guest send forwarding headers of its own (X-Forwarded-For, Forwarded, in any spelling)?"""
    return any(name.replace("_", "-") in ("x-forwarded-for", "forwarded") for name, _v in request.headers)


def unavailable() -> Response:
    """What a guest gets while the API cannot be reached: cloud-init retries a 503, honouring Retry-After."""
    return http1.plain(503, "The metadata service is unavailable; try again.", ("Retry-After", RETRY_AFTER))
