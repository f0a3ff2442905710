"""A guest behind the agent's metadata relay, plumbed as a driver does it: the guest's namespace (eth0, a route to
169.254.169.254 via the network's metadata port) on a veth to the network's metadata namespace (a bridge with the
metadata address), where the relay (agent/metadata/proxy.py) listens; and a guest's GET of the metadata address."""

from __future__ import annotations

import http.client
import socket
import subprocess

from cloudnet.dataplane.base import metadata_ns
from cloudnet.dataplane.kernel import netns


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def plumb_guest(host: str, network_id: str, guest_ns: str, mac: str, guest_cidr: str, port_cidr: str,
                veth: str) -> list[str]:  # fmt: skip
    """Make the guest's namespace and the network's metadata namespace (`veth`: the host end's name, unique per
    run); the namespaces made, for the caller to remove (also when this fails half-way)."""
    meta = metadata_ns(host, network_id)
    made: list[str] = []
    try:
        for name in (meta, guest_ns):
            netns.ensure(name)
            made.append(name)
        _ip("-n", meta, "link", "add", "br0", "type", "bridge")
        _ip("-n", meta, "link", "set", "br0", "up")
        _ip("-n", meta, "addr", "add", "169.254.169.254/32", "dev", "br0")
        _ip("-n", meta, "addr", "add", port_cidr, "dev", "br0")
        _ip("-n", guest_ns, "link", "add", "eth0", "type", "veth", "peer", "name", veth, "netns", meta)
        _ip("-n", guest_ns, "link", "set", "eth0", "address", mac, "up")
        _ip("-n", guest_ns, "addr", "add", guest_cidr, "dev", "eth0")
        _ip("-n", guest_ns, "route", "add", "169.254.169.254/32", "via", port_cidr.split("/")[0])
        _ip("-n", meta, "link", "set", veth, "master", "br0", "up")
    except BaseException:
        for name in made:
            netns.remove(name)
        raise
    return made


def guest_get(ns: str, path: str) -> tuple[int, bytes]:
    """A guest's GET of the metadata address on a connection of its own, from inside its namespace."""
    with netns.entered(ns):
        sock = socket.create_connection(("169.254.169.254", 80), timeout=15)
    conn = http.client.HTTPConnection("169.254.169.254", 80, timeout=15)
    conn.sock = sock
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()
