"""Security groups and port security end to end: the API, the real agent and the Linux dataplane, real traffic and
the real metadata proxy (root)."""

from __future__ import annotations

import json
import socket
import subprocess
from typing import Any

import pytest

from cloudnet.dataplane.kernel import netns
from tests.support.cloud import Cloud, ns_run
from tests.support.guest_metadata import agent_with_proxy
from tests.support.netserve import Responder, tcp_ask
from tests.support.server import RunningServer

BLOCKED = 0.4


def _ip(inst: dict[str, Any]) -> str:
    return str(inst["nets"][0]["fixed_ips"][0]["ip_address"])


def _rule(cloud: Cloud, group: dict[str, Any], **body: Any) -> dict[str, Any]:
    body = {"security_group_id": group["id"], "direction": "ingress", "ethertype": "IPv4", **body}
    return cloud.create("security-group-rules", "security_group_rule", body)


def _port(cloud: Cloud, net: dict[str, Any], groups: list[dict[str, Any]]) -> dict[str, Any]:
    return cloud.create("ports", "port", {"network_id": net["id"], "security_groups": [g["id"] for g in groups]})


def test_groups_made_through_the_api_filter_real_traffic(cloud: Cloud) -> None:
    cloud.start_agent()
    net, _sub = cloud.network("sg-e2e", "10.97.0.0/24")
    web = cloud.create("security-groups", "security_group", {"name": "web"})
    http = _rule(cloud, web, protocol="tcp", port_range_min=8080, port_range_max=8080)
    a = cloud.instance("sga", [{"network": net["id"]}])  # the project's default group
    b = cloud.instance("sgb", [{"port": _port(cloud, net, [web])["id"]}])
    port_b = cloud.api.get(f"/ports/{b['nets'][0]['port_id']}").json()["port"]
    assert port_b["binding:vif_details"]["port_filter"] is True
    servers = [Responder.start(b["netns"], "B", tcp=(8080, 8081)), Responder.start(a["netns"], "A", tcp=(8080,))]
    try:
        cloud.wait_for(lambda: tcp_ask(a["netns"], _ip(b), 8080, 1).startswith("B "), what="a -> b:8080")
        assert tcp_ask(a["netns"], _ip(b), 8081, BLOCKED) == ""
        assert tcp_ask(b["netns"], _ip(a), 8080, BLOCKED) == ""  # b is not in a's default group
        _rule(cloud, web, protocol="tcp", port_range_min=8081, port_range_max=8081)
        cloud.wait_for(lambda: tcp_ask(a["netns"], _ip(b), 8081, 1).startswith("B "), what="the new rule")
        assert cloud.api.delete(f"/security-group-rules/{http['id']}").status_code == 204
        cloud.wait_for(lambda: tcp_ask(a["netns"], _ip(b), 8080, BLOCKED) == "", what="the rule gone")
    finally:
        for s in servers:
            s.stop()


def _connects(ns: str, address: str, port: int, timeout: float) -> bool:
    with netns.entered(ns):
        sock = socket.socket()
    sock.settimeout(timeout)
    try:
        sock.connect((address, port))
        return True
    except OSError:
        return False
    finally:
        sock.close()


def test_a_rule_deleted_through_the_api_cuts_an_open_connection(cloud: Cloud) -> None:
    cloud.start_agent()
    net, _sub = cloud.network("sg-cut", "10.96.0.0/24")
    held = cloud.create("security-groups", "security_group", {"name": "held"})
    rule = _rule(cloud, held, protocol="tcp", port_range_min=8090, port_range_max=8090)
    a = cloud.instance("cuta", [{"network": net["id"]}])
    b = cloud.instance("cutb", [{"port": _port(cloud, net, [held])["id"]}])
    with netns.entered(b["netns"]):
        listener = socket.socket()
    with netns.entered(a["netns"]):
        client = socket.socket()
    try:
        listener.bind((_ip(b), 8090))
        listener.listen(8)
        client.settimeout(3)
        client.connect((_ip(b), 8090))
        server, _peer = listener.accept()
        server.sendall(b"before")
        assert client.recv(100) == b"before"
        assert cloud.api.delete(f"/security-group-rules/{rule['id']}").status_code == 204
        cloud.wait_for(lambda: not _connects(a["netns"], _ip(b), 8090, BLOCKED), what="8090 closed")
        server.sendall(b"after")  # the open connection is cut too: a's side never gets it
        client.settimeout(BLOCKED)
        with pytest.raises(TimeoutError):
            client.recv(100)
        server.close()
    finally:
        client.close()
        listener.close()


def test_remote_group_membership_follows_port_updates(cloud: Cloud) -> None:
    cloud.start_agent()
    net, _sub = cloud.network("sg-members", "10.98.0.0/24")
    clients = cloud.create("security-groups", "security_group", {"name": "clients"})
    db = cloud.create("security-groups", "security_group", {"name": "db"})
    _rule(cloud, db, protocol="tcp", port_range_min=5432, port_range_max=5432, remote_group_id=clients["id"])
    a = cloud.instance("mema", [{"network": net["id"]}])
    b = cloud.instance("memb", [{"port": _port(cloud, net, [db])["id"]}])
    port_a = cloud.api.get(f"/ports/{a['nets'][0]['port_id']}").json()["port"]
    server = Responder.start(b["netns"], "B", tcp=(5432,))
    try:
        assert tcp_ask(a["netns"], _ip(b), 5432, BLOCKED) == ""
        joined = port_a["security_groups"] + [clients["id"]]
        assert cloud.api.put(f"/ports/{port_a['id']}", json={"port": {"security_groups": joined}}).status_code == 200
        cloud.wait_for(lambda: tcp_ask(a["netns"], _ip(b), 5432, 1).startswith("B "), what="a joined clients")
        left = {"port": {"security_groups": port_a["security_groups"]}}
        assert cloud.api.put(f"/ports/{port_a['id']}", json=left).status_code == 200
        cloud.wait_for(lambda: tcp_ask(a["netns"], _ip(b), 5432, BLOCKED) == "", what="a left clients")
    finally:
        server.stop()


def _metadata_uuid(ns: str, source: str, timeout: float) -> str | None:
    """The uuid the metadata service answers to a request from `source` inside `ns` (None: no answer)."""
    with netns.entered(ns):
        sock = socket.socket()
    sock.settimeout(timeout)
    try:
        sock.bind((source, 0))
        sock.connect(("169.254.169.254", 80))
        sock.sendall(b"GET /openstack/latest/meta_data.json HTTP/1.0\r\nHost: 169.254.169.254\r\n\r\n")
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    except OSError:
        return None
    finally:
        sock.close()
    head, _, body = reply.partition(b"\r\n\r\n")
    if b" 200 " not in head.split(b"\r\n")[0]:
        return None
    return str(json.loads(body)["uuid"])


def test_a_guest_that_takes_its_neighbours_address_reads_no_metadata_but_its_own(
    cloud: Cloud, server: RunningServer
) -> None:
    with agent_with_proxy(cloud, server) as proxy:
        net, _sub = cloud.network("md-spoof", "10.99.0.0/24")
        victim = cloud.instance("victim", [{"network": net["id"]}])
        thief = cloud.instance("thief", [{"network": net["id"]}])
        cloud.wait_for(lambda: proxy.serving(net["id"]), what="the proxy")
        assert _metadata_uuid(thief["netns"], _ip(thief), 5) == thief["id"]
        ns_run(thief["netns"], "ip", "addr", "add", f"{_ip(victim)}/32", "dev", "eth0", check=True)
        assert _metadata_uuid(thief["netns"], _ip(victim), 2) is None  # dropped on its way out
        ns_run(thief["netns"], "ip", "addr", "del", f"{_ip(thief)}/24", "dev", "eth0", check=True)
        subprocess.run(["ip", "-n", thief["netns"], "route", "add", "169.254.169.254/32", "dev", "eth0"],
                       capture_output=True)  # fmt: skip
        assert _metadata_uuid(thief["netns"], _ip(victim), 2) is None  # even as its only address
        assert _metadata_uuid(victim["netns"], _ip(victim), 5) == victim["id"]


def test_address_pairs_and_port_security_set_through_the_api(cloud: Cloud) -> None:
    """An allowed address pair lets exactly that address out; a port without port security is not filtered."""
    cloud.start_agent()
    net, _sub = cloud.network("sg-pairs", "10.95.0.0/24")
    anyone = cloud.create("security-groups", "security_group", {"name": "anyone"})
    _rule(cloud, anyone)  # ingress from anywhere, any protocol
    pair = cloud.create("ports", "port", {"network_id": net["id"], "security_groups": [anyone["id"]],
                                          "allowed_address_pairs": [{"ip_address": "10.95.0.200"}]})  # fmt: skip
    open_port = cloud.create("ports", "port", {"network_id": net["id"], "port_security_enabled": False})
    a = cloud.instance("paira", [{"port": pair["id"]}])
    b = cloud.instance("pairb", [{"port": _port(cloud, net, [anyone])["id"]}])
    c = cloud.instance("pairc", [{"port": open_port["id"]}])
    assert cloud.api.get(f"/ports/{open_port['id']}").json()["port"]["binding:vif_details"]["port_filter"] is False
    server = Responder.start(b["netns"], "B", tcp=(7600,))
    try:
        for address in ("10.95.0.200", "10.95.0.201"):
            ns_run(a["netns"], "ip", "addr", "add", f"{address}/32", "dev", "eth0", check=True)
        ns_run(c["netns"], "ip", "addr", "add", "10.95.0.202/32", "dev", "eth0", check=True)
        assert tcp_ask(a["netns"], _ip(b), 7600, source="10.95.0.200").startswith("B 10.95.0.200 ")
        assert tcp_ask(a["netns"], _ip(b), 7600, BLOCKED, source="10.95.0.201") == ""
        assert tcp_ask(c["netns"], _ip(b), 7600, source="10.95.0.202").startswith("B 10.95.0.202 ")  # unchecked
    finally:
        server.stop()


def test_no_address_pair_and_no_port_without_port_security_borrows_a_metadata_identity(
    cloud: Cloud, server: RunningServer
) -> None:
    """The metadata service knows a caller by its source address: a pair naming a neighbour's address (which a
    network's owner may give) or a port without port security must not make a guest that neighbour."""
    with agent_with_proxy(cloud, server) as proxy:
        net, _sub = cloud.network("md-pairs", "10.98.0.0/24")
        victim = cloud.instance("victim", [{"network": net["id"]}])
        paired = cloud.create("ports", "port", {"network_id": net["id"],
                                                "allowed_address_pairs": [{"ip_address": _ip(victim)}]})  # fmt: skip
        open_port = cloud.create("ports", "port", {"network_id": net["id"], "port_security_enabled": False})
        thieves = [
            cloud.instance("paired", [{"port": paired["id"]}]),
            cloud.instance("open", [{"port": open_port["id"]}]),
        ]
        cloud.wait_for(lambda: proxy.serving(net["id"]), what="the proxy")
        for thief in thieves:
            assert _metadata_uuid(thief["netns"], _ip(thief), 5) == thief["id"]
            ns_run(thief["netns"], "ip", "addr", "add", f"{_ip(victim)}/32", "dev", "eth0", check=True)
            assert _metadata_uuid(thief["netns"], _ip(victim), 2) is None
            assert _metadata_uuid(thief["netns"], _ip(thief), 5) == thief["id"]  # its own still answers
        assert _metadata_uuid(victim["netns"], _ip(victim), 5) == victim["id"]
