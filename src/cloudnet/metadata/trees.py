"""The OpenStack and EC2 metadata trees, as nova renders them (reference/metadata.md §1.3). Pure: no I/O.

`render(view, settings, path)` answers a GET for one instance. Paths are normalised like nova's
(`posixpath.normpath`: trailing slashes and `..` collapse); a first segment other than `openstack`/`ec2` is an
EC2 version. Anything not in the tree, or asked for at a version that predates it, is a 404.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import ssl
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from cloudnet.metadata.model import InstanceView, Port, Settings, Subnet
from cloudnet.wire.metadata_paths import tokens

TEXT = "text/plain; charset=utf-8"
JSON = "application/json"

EC2_VERSIONS = ("1.0", "2007-01-19", "2007-03-01", "2007-08-29", "2007-10-10", "2007-12-15", "2008-02-01",
                "2008-09-01", "2009-04-04")  # fmt: skip
OPENSTACK_VERSIONS = ("2012-08-10", "2013-04-04", "2013-10-17", "2015-10-15", "2016-06-30", "2016-10-06",
                      "2017-02-22", "2018-08-27", "2020-10-14", "2025-04-04")  # fmt: skip
GRIZZLY, HAVANA, LIBERTY, NEWTON_ONE, NEWTON_TWO, VICTORIA = (
    "2013-04-04", "2013-10-17", "2015-10-15", "2016-06-30", "2016-10-06", "2020-10-14",
)  # fmt: skip
PASSWORD = "password"
MAX_PASSWORD = 1020  # nova: 4 x 255 bytes of system metadata


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    content_type: str = TEXT
    # False when the body differs between two callers of one instance (the caller's address).
    cacheable: bool = True
    # meta_data.json: `body` is the JSON object without its random_seed, which is fresh in every answer
    # (as nova makes it); keeping the rest rendered makes the most requested document cheap to serve.
    random_seed: bool = False

    def payload(self) -> bytes:
        if not self.random_seed:
            return self.body
        return b"".join((SEED_OPENING, _SEEDS.take(), b'",', self.body[1:]))


_B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_TO_B64 = bytes(_B64[b & 63] for b in range(256))  # a random byte -> a random base64 character
# The last character of base64(512 bytes) carries 4 bits (2 bytes = 16 bits = 6 + 6 + 4), then one "=".
_LAST = {c: bytes((_B64[_B64.index(c) & 0b111100], 0x3D)) for c in _B64}


class _SeedPool:
    """512 random bytes per meta_data.json (nova's random_seed), base64-encoded, from larger draws of
    OpenSSL's CSPRNG (a DRBG seeded by the kernel): one draw per 16 answers. os.urandom would cost twenty
    times as much here (the kernel's generic ChaCha code), and was the largest single cost of the answer.

    The base64 text is made straight from random bytes, six random bits per character (one table lookup per
    byte, in C): binascii's encoder, at about 14k instructions per seed, was then the largest cost. The text
    decodes to 512 uniformly random bytes, exactly as base64 of 512 random bytes would, and is canonical (the
    unused low bits of its last character are zero). Every seed is handed out once; OpenSSL reseeds in a
    forked child and the pool starts empty there, so a child never repeats its parent's bytes."""

    SIZE = 512
    CHARS = 683  # base64 characters of 512 bytes, before the final "="
    BATCH = 16  # small: a refill is a pause of its own, and a large one would show in the answers' latency

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seeds: list[bytes] = []
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._seeds = []

    def take(self) -> bytes:
        """The next seed, base64-encoded (684 characters)."""
        try:
            return self._seeds.pop()  # atomic under the GIL: no two callers get one seed
        except IndexError:
            with self._lock:  # one refill at a time
                if not self._seeds:
                    text, n = ssl.RAND_bytes(self.CHARS * self.BATCH).translate(_TO_B64), self.CHARS
                    self._seeds = [text[i : i + n - 1] + _LAST[text[i + n - 1]] for i in range(0, len(text), n)]
            return self.take()


_SEEDS = _SeedPool()
SEED_OPENING = b'{"random_seed":"'  # how a seeded meta_data.json begins; the seed and `",` follow


random_seed = _SEEDS.take  # () -> a fresh random_seed value (base64 of 512 random bytes, 684 characters)


NOT_FOUND = Reply(404, b"404 Not Found\n\nThe resource could not be found.\n")


def _text(value: str | bytes) -> Reply:
    return Reply(200, value if isinstance(value, bytes) else value.encode())


def _json(value: Any, content_type: str = JSON, cacheable: bool = True) -> Reply:
    return Reply(200, orjson.dumps(value), content_type, cacheable)


def is_root(path: str) -> bool:
    """`/`: the EC2 version list, answered before any instance lookup (as nova does)."""
    return tokens(path) == ("ec2",)


def is_password(path: str) -> bool:
    parts = tokens(path)
    if len(parts) != 3 or parts[0] != "openstack" or parts[2] != PASSWORD:
        return False
    version = _os_version(parts[1])
    return version is not None and _since(GRIZZLY, version)


def ec2_versions() -> Reply:
    return _text("\n".join((*EC2_VERSIONS, "latest")))


def render(
    view: InstanceView, settings: Settings, path: str, remote_ip: str | None = None, today: str | None = None
) -> Reply:
    """The GET answer for `path` (also HEAD's, minus the body)."""
    parts = tokens(path)
    if parts[0] == "openstack":
        return _openstack(view, settings, list(parts[1:]), today or datetime.now(UTC).strftime("%Y-%m-%d"))
    return _ec2(view, settings, list(parts[1:]), remote_ip)


# -- OpenStack ------------------------------------------------------------------------------------


def _os_version(version: str) -> str | None:
    if version == "latest":
        return OPENSTACK_VERSIONS[-1]
    return version if version in OPENSTACK_VERSIONS else None


def _since(required: str, version: str) -> bool:
    return OPENSTACK_VERSIONS.index(version) >= OPENSTACK_VERSIONS.index(required)


def _openstack(view: InstanceView, settings: Settings, parts: list[str], today: str) -> Reply:
    if not parts:
        # Versions dated in the future are hidden from the list, yet still answer when asked for.
        return _text("\n".join([*(v for v in OPENSTACK_VERSIONS if v <= today), "latest"]))
    version = _os_version(parts[0])
    if version is None or len(parts) > 2:
        return NOT_FOUND  # includes /openstack/content/<n>: there are no injected files
    if len(parts) == 1:
        return _text("\n".join(_os_files(view, version)))
    name = parts[1]
    if name == "meta_data.json":
        md = meta_data(view, settings, version)
        seeded = md.pop("random_seed", None) is not None
        return Reply(200, orjson.dumps(md), JSON, random_seed=seeded)
    if name == "user_data":
        return NOT_FOUND if view.user_data is None else Reply(200, view.user_data)
    if name == PASSWORD and _since(GRIZZLY, version):
        return _text(view.password or "")
    if name == "vendor_data.json" and _since(HAVANA, version):
        return _json(settings.vendor_data)
    if name == "network_data.json" and _since(LIBERTY, version):
        return _json(network_data(view), TEXT)  # nova never switches this one's mimetype to JSON
    if name == "vendor_data2.json" and _since(NEWTON_TWO, version):
        return _json({"static": settings.vendor_data})
    return NOT_FOUND


def _os_files(view: InstanceView, version: str) -> list[str]:
    files = ["meta_data.json"]
    if view.user_data is not None:
        files.append("user_data")
    if _since(GRIZZLY, version):
        files.append(PASSWORD)
    if _since(HAVANA, version):
        files.append("vendor_data.json")
    if _since(LIBERTY, version):
        files.append("network_data.json")
    if _since(NEWTON_TWO, version):
        files.append("vendor_data2.json")
    return files


def hostname(view: InstanceView, settings: Settings) -> str:
    # A hostname that is already fully qualified keeps its own domain.
    if not settings.dhcp_domain or "." in view.hostname:
        return view.hostname
    return f"{view.hostname}.{settings.dhcp_domain}"


def meta_data(view: InstanceView, settings: Settings, version: str) -> dict[str, Any]:
    """meta_data.json, with the keys nova adds at each version."""
    md: dict[str, Any] = {"uuid": view.id}
    if view.meta:
        md["meta"] = dict(view.meta)
    if view.ssh_keys:
        md["public_keys"] = dict(view.ssh_keys)
        md["keys"] = [{"name": name, "type": "ssh", "data": key} for name, key in view.ssh_keys]
    md["hostname"] = hostname(view, settings)
    md["name"] = view.name
    md["launch_index"] = 0
    md["availability_zone"] = view.availability_zone or settings.availability_zone
    if _since(GRIZZLY, version):
        md["random_seed"] = base64.b64encode(os.urandom(512)).decode()  # fresh each request, as nova does
    if _since(LIBERTY, version):
        md["project_id"] = view.project_id
    if _since(NEWTON_ONE, version):
        md["devices"] = []
    if _since(VICTORIA, version):
        md["dedicated_cpus"] = []
    return md


def network_data(view: InstanceView) -> dict[str, Any]:
    """network_data.json from the instance's ports and subnets.

    Every address is static (`ipv4`/`ipv6`, never `*_dhcp` or `ipv6_slaac`): cloudnet configures the addresses
    itself and runs no DHCP or router-advertisement service a guest could ask. The default route goes only
    through the first interface that has a gateway, as the Linux dataplane configures it."""
    links: list[dict[str, Any]] = []
    networks: list[dict[str, Any]] = []
    services: list[dict[str, str]] = []
    default_done: set[int] = set()
    metadata_route_done = False
    for port in view.ports:
        link_id = f"tap{port.id[:11]}"  # nova's device name; the whole id if two ports share a prefix
        if any(link["id"] == link_id for link in links):
            link_id = f"tap{port.id}"
        links.append(_link(port, link_id))
        for address, subnet_id in port.fixed_ips:
            subnet = view.subnets.get(subnet_id)
            if subnet is None:
                continue
            net_services = [{"type": "dns", "address": a} for a in subnet.dns_nameservers]
            for s in net_services:
                if s not in services:
                    services.append(s)
            first = port is view.ports[0]
            with_default = first and bool(subnet.gateway_ip) and subnet.ip_version not in default_done
            if with_default:
                default_done.add(subnet.ip_version)
            routes = _routes(subnet, with_default)
            if first and subnet.metadata_hop and not metadata_route_done:
                # The route the dataplane gives eth0 (neutron hands it out by DHCP option 121).
                routes.append(
                    {"network": "169.254.169.254", "netmask": "255.255.255.255", "gateway": subnet.metadata_hop}
                )
                metadata_route_done = True
            networks.append(
                {
                    "id": f"network{len(networks)}",
                    "type": f"ipv{subnet.ip_version}",
                    "link": link_id,
                    "ip_address": address,
                    "netmask": str(ipaddress.ip_network(subnet.cidr).netmask),
                    "routes": routes,
                    "network_id": port.network_id,
                    "services": net_services,
                }
            )
    return {"links": links, "networks": networks, "services": services}


def _link(port: Port, link_id: str) -> dict[str, Any]:
    return {
        "id": link_id,
        "vif_id": port.id,
        "type": "hw_veb" if port.vnic_type == "direct" else "phy",
        "mtu": port.mtu,
        "ethernet_mac_address": port.mac_address,
    }


def _routes(subnet: Subnet, with_default: bool) -> list[dict[str, str]]:
    routes = []
    if with_default and subnet.gateway_ip:
        any_net = "::" if subnet.ip_version == 6 else "0.0.0.0"
        routes.append({"network": any_net, "netmask": any_net, "gateway": subnet.gateway_ip})
    for destination, nexthop in subnet.host_routes:
        net = ipaddress.ip_network(destination, strict=False)
        routes.append({"network": str(net.network_address), "netmask": str(net.netmask), "gateway": nexthop})
    return routes


# -- EC2 ------------------------------------------------------------------------------------------


class _Named(dict[str, Any]):
    """A directory listed under another name: `public-keys/` shows `0=<keyname>`, not `0/`."""

    def __init__(self, listed_as: str, items: dict[str, Any]) -> None:
        super().__init__(items)
        self.listed_as = listed_as


def ec2_instance_id(instance_id: str) -> str:
    # EC2 style (nova: i-%08x of an integer id); ours are UUIDs, so eight hex digits of it.
    return "i-" + instance_id.replace("-", "")[:8]


def ec2_meta_data(view: InstanceView, settings: Settings, version: str, remote_ip: str | None) -> dict[str, Any]:
    """The meta-data tree of one EC2 version (nova's get_ec2_metadata)."""
    name = hostname(view, settings)

    def since(required: str) -> bool:
        return EC2_VERSIONS.index(version) >= EC2_VERSIONS.index(required)

    md: dict[str, Any] = {
        "ami-id": "ami-00000000",
        "ami-launch-index": "0",
        "ami-manifest-path": "FIXME",
        "instance-id": ec2_instance_id(view.id),
        "hostname": name,
        "local-ipv4": view.fixed_ipv4 or remote_ip or "",
        "reservation-id": "r-" + view.id.replace("-", "")[8:16],
        "security-groups": view.security_groups,
    }
    if view.ssh_keys:
        md["public-keys"] = {
            str(i): _Named(f"{i}={key_name}", {"openssh-key": key}) for i, (key_name, key) in enumerate(view.ssh_keys)
        }
    if since("2007-01-19"):
        md["local-hostname"] = name
        md["public-hostname"] = name
        md["public-ipv4"] = view.public_ipv4 or ""
    if since("2007-08-29"):
        md["instance-type"] = settings.instance_type
    if since("2007-12-15"):
        md["block-device-mapping"] = {"ami": "vda", "root": "/dev/vda"}
    if since("2008-02-01"):
        md["placement"] = {"availability-zone": view.availability_zone or settings.availability_zone}
    if since("2008-09-01"):
        md["instance-action"] = "none"
    return md


def _ec2(view: InstanceView, settings: Settings, parts: list[str], remote_ip: str | None) -> Reply:
    if not parts:
        return ec2_versions()
    version = EC2_VERSIONS[-1] if parts[0] == "latest" else parts[0]
    if version not in EC2_VERSIONS:
        return NOT_FOUND  # e.g. 2016-09-02: cloud-init then falls back to 2009-04-04
    tree: dict[str, Any] = {"meta-data": ec2_meta_data(view, settings, version, remote_ip)}
    if view.user_data is not None:
        tree["user-data"] = view.user_data
    node: Any = tree
    for part in parts[1:]:
        if not isinstance(node, dict) or part not in node:
            return NOT_FOUND
        node = node[part]
    # Only the caller-address fallback of local-ipv4 varies between two callers of one instance.
    cacheable = view.fixed_ipv4 is not None or parts[1:3] != ["meta-data", "local-ipv4"]
    return Reply(200, _ec2_print(node), TEXT, cacheable)


def _ec2_print(node: Any) -> bytes:
    """nova's ec2_md_print: sorted listing (directories as `name/`), newline-joined lists, raw leaves."""
    if isinstance(node, bytes):
        return node
    if isinstance(node, dict):
        lines = []
        for key in sorted(node):
            value = node[key]
            if isinstance(value, _Named):
                lines.append(value.listed_as)
            elif isinstance(value, dict):
                lines.append(key + "/")
            else:
                lines.append(key)
        return "\n".join(lines).encode()
    if isinstance(node, tuple | list):
        return "\n".join(node).encode()
    return str(node).encode()
