"""The agent and the Linux dataplane with real namespaces, veths, bridges and nftables (root)."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path

from cloudnet.agent.metadata.proxy import MetadataProxy
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux import names
from tests.support.cloud import Cloud, ns_run, ping

# A one-shot TCP server for the outside namespace: prints the address of the first client.
PEER_SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8080)); s.listen(1); print("listening", flush=True)
c, addr = s.accept(); print(addr[0], flush=True); c.close()
"""


def _host_links(cloud: Cloud) -> set[str]:
    out = ns_run(names.host_ns(cloud.host), "ip", "-o", "link", "show").stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}


def test_two_instances_on_one_network_ping_each_other(cloud: Cloud) -> None:
    cloud.start_agent()
    net, sub = cloud.network("n1", "10.61.0.0/24")
    a = cloud.instance("a", [{"network": net["id"]}])
    b = cloud.instance("b", [{"network": net["id"], "v4-fixed-ip": "10.61.0.50"}])
    a_ip = a["nets"][0]["fixed_ips"][0]["ip_address"]
    assert b["nets"][0]["fixed_ips"][0]["ip_address"] == "10.61.0.50"
    assert ping(a["netns"], "10.61.0.50") and ping(b["netns"], a_ip)
    link = ns_run(a["netns"], "ip", "-o", "link", "show", "eth0").stdout
    assert a["nets"][0]["mac_address"] in link and "mtu 1500" in link
    port = cloud.api.get(f"/ports/{a['nets'][0]['port_id']}").json()["port"]
    assert port["status"] == "ACTIVE" and port["binding:vif_type"] == "bridge"
    assert port["device_owner"] == "compute:cloudnet" and port["device_id"] == a["id"]
    assert sub["gateway_ip"] in ns_run(a["netns"], "ip", "route").stdout  # default route via the gateway
    # The network's metadata namespace sits on the bridge; instances route 169.254.169.254 to it.
    meta_port = cloud.api.get("/ports", params={"network_id": net["id"], "device_owner": "network:distributed"})
    (meta,) = meta_port.json()["ports"]
    meta_ip = meta["fixed_ips"][0]["ip_address"]
    assert f"169.254.169.254 via {meta_ip} dev eth0" in ns_run(a["netns"], "ip", "route").stdout
    assert ping(a["netns"], "169.254.169.254")
    assert netns.exists(names.metadata_ns(cloud.host, net["id"]))


def test_instance_with_two_nics_and_mtu(cloud: Cloud) -> None:
    cloud.start_agent()
    n1, _ = cloud.network("m1", "10.62.0.0/24", mtu=1400)
    n2, _ = cloud.network("m2", "10.63.0.0/24")
    inst = cloud.instance("two", [{"network": n1["id"]}, {"network": n2["id"]}])
    links = ns_run(inst["netns"], "ip", "-o", "link").stdout
    assert "eth0" in links and "eth1" in links
    assert "mtu 1400" in ns_run(inst["netns"], "ip", "-o", "link", "show", "eth0").stdout
    eth1 = ns_run(inst["netns"], "ip", "-o", "addr", "show", "eth1").stdout
    assert inst["nets"][1]["fixed_ips"][0]["ip_address"] in eth1


def test_router_connects_networks_and_snats_to_the_outside(cloud: Cloud) -> None:
    outside = cloud.outside("physnet1", "192.0.2.1/24")
    cloud.start_agent()
    pub = cloud.create("networks", "network", {"name": "pub", "router:external": True,
                                               "provider:network_type": "flat",
                                               "provider:physical_network": "physnet1"})  # fmt: skip
    cloud.create("subnets", "subnet", {"network_id": pub["id"], "cidr": "192.0.2.0/24", "gateway_ip": "192.0.2.1",
                                       "allocation_pools": [{"start": "192.0.2.10", "end": "192.0.2.99"}]})  # fmt: skip
    n1, s1 = cloud.network("left", "10.64.0.0/24")
    n2, s2 = cloud.network("right", "10.65.0.0/24")
    router = cloud.create("routers", "router", {"name": "r", "external_gateway_info": {"network_id": pub["id"]}})
    for sub in (s1, s2):
        r = cloud.api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]})
        assert r.status_code == 200, r.text
    left = cloud.instance("left", [{"network": n1["id"]}])
    right = cloud.instance("right", [{"network": n2["id"]}])
    right_ip = right["nets"][0]["fixed_ips"][0]["ip_address"]
    cloud.wait_for(lambda: ping(left["netns"], right_ip), what="left -> right through the router")
    external_ip = router["external_gateway_info"]["external_fixed_ips"][0]["ip_address"]
    server = subprocess.Popen(["ip", "netns", "exec", outside, sys.executable, "-c", PEER_SERVER],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "listening"
        cloud.wait_for(lambda: ping(left["netns"], "192.0.2.1"), what="instance -> outside")
        connect = ns_run(left["netns"], sys.executable, "-c",
                         "import socket; socket.create_connection(('192.0.2.1', 8080), timeout=5).close()")  # fmt: skip
        assert connect.returncode == 0, connect.stderr
        seen = server.stdout.readline().strip()
    finally:
        server.kill()
        server.wait()
    assert seen == external_ip  # the outside sees the router's external address, not 10.64.0.x


def test_delete_removes_every_kernel_object(cloud: Cloud) -> None:
    cloud.start_agent()
    net, sub = cloud.network("gone", "10.66.0.0/24")
    router = cloud.create("routers", "router", {"name": "gone-r"})
    cloud.api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]})
    inst = cloud.instance("gone", [{"network": net["id"]}])
    port_id = inst["nets"][0]["port_id"]
    assert names.tap(port_id) in _host_links(cloud)
    assert netns.exists(names.router_ns(cloud.host, router["id"]))
    assert cloud.api.delete(f"/instances/{inst['id']}").status_code == 204
    cloud.wait_for(lambda: names.tap(port_id) not in _host_links(cloud), what="the instance veth to go")
    assert "eth0" not in ns_run(inst["netns"], "ip", "-o", "link").stdout
    assert cloud.api.get(f"/ports/{port_id}").status_code == 404  # the port it created went with it
    # With no instance left on the network, the host needs neither its bridge nor the router.
    cloud.wait_for(lambda: not netns.exists(names.router_ns(cloud.host, router["id"])), what="router namespace")
    assert names.bridge(net["id"]) not in _host_links(cloud)
    assert not [n for n in _host_links(cloud) if names.is_ours(n)]


def test_agent_restart_keeps_traffic_and_removes_what_was_deleted_meanwhile(cloud: Cloud) -> None:
    cloud.start_agent()
    net, _ = cloud.network("keep", "10.67.0.0/24")
    a = cloud.instance("ka", [{"network": net["id"]}])
    b = cloud.instance("kb", [{"network": net["id"]}])
    doomed = cloud.instance("kc", [{"network": net["id"]}])
    b_ip = b["nets"][0]["fixed_ips"][0]["ip_address"]
    pinger = subprocess.Popen(["ip", "netns", "exec", a["netns"], "ping", "-n", "-i", "0.05", "-w", "6", b_ip],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert pinger.stdout is not None
        replies = 0
        while replies < 5:  # the traffic is flowing before the restart
            line = pinger.stdout.readline()
            assert line, "ping ended early"
            replies += "bytes from" in line
        cloud.stop_agent()
        assert cloud.api.delete(f"/instances/{doomed['id']}").status_code == 204  # while the agent is away
        cloud.start_agent()
        out, _ = pinger.communicate(timeout=30)
    finally:
        if pinger.poll() is None:
            pinger.kill()
    summary = next(line for line in out.splitlines() if "packets transmitted" in line)
    sent, received = (int(summary.split()[i]) for i in (0, 3))
    assert sent > 50 and sent - received <= 3, summary  # counted from after the first 5 replies
    doomed_tap = names.tap(doomed["nets"][0]["port_id"])
    assert doomed_tap not in _host_links(cloud)
    assert names.tap(a["nets"][0]["port_id"]) in _host_links(cloud)
    assert ping(a["netns"], b_ip)


def test_instance_bound_to_existing_port_keeps_it_on_delete(cloud: Cloud) -> None:
    cloud.start_agent()
    net, sub = cloud.network("given", "10.68.0.0/24")
    port = cloud.create("ports", "port", {"network_id": net["id"], "fixed_ips": [{"ip_address": "10.68.0.77"}]})
    inst = cloud.instance("given", [{"port": port["id"]}])
    assert "10.68.0.77" in ns_run(inst["netns"], "ip", "-o", "addr", "show", "eth0").stdout
    assert cloud.api.delete(f"/instances/{inst['id']}").status_code == 204
    kept = cloud.api.get(f"/ports/{port['id']}").json()["port"]
    assert kept["device_id"] == "" and kept["binding:host_id"] == "" and kept["status"] == "DOWN"
    cloud.wait_for(lambda: names.tap(port["id"]) not in _host_links(cloud), what="the veth to go")
    assert sub["id"] == kept["fixed_ips"][0]["subnet_id"]


def test_ports_of_a_dead_host_are_reported_down(cloud: Cloud) -> None:
    cloud.start_agent()
    net, _ = cloud.network("dead", "10.69.0.0/24")
    inst = cloud.instance("dead", [{"network": net["id"]}])
    port_id = inst["nets"][0]["port_id"]
    cloud.server.config.agent_down_time = 1.0
    cloud.stop_agent()  # no more heartbeats
    cloud.wait_for(
        lambda: cloud.api.get(f"/ports/{port_id}").json()["port"]["status"] == "DOWN", what="port DOWN", timeout=20
    )
    host = cloud.api.get(f"/hosts/{cloud.host}").json()["host"]
    assert host["alive"] is False
    cloud.start_agent()  # back: the agent reports the still plugged port ACTIVE again
    cloud.wait_active(inst["id"])


def test_reconciling_twice_changes_nothing(cloud: Cloud) -> None:
    cloud.start_agent()
    net, sub = cloud.network("same", "10.70.0.0/24")
    router = cloud.create("routers", "router", {"name": "same-r"})
    cloud.api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]})
    inst = cloud.instance("same", [{"network": net["id"]}])
    rns = names.router_ns(cloud.host, router["id"])

    def snapshot() -> tuple[str, str, str, str]:
        # A device's operational state is the kernel's reading of its carriers (a bridge's flips between UP and
        # UNKNOWN as linkwatch catches up, under load a second after its ports changed), not configuration.
        links = ns_run(names.host_ns(cloud.host), "ip", "-o", "link").stdout
        return (
            re.sub(r" state [A-Z]+ ", " ", links),
            ns_run(inst["netns"], "ip", "-o", "addr").stdout + ns_run(inst["netns"], "ip", "route").stdout,
            ns_run(rns, "ip", "-o", "addr").stdout,
            ns_run(rns, "nft", "list", "ruleset").stdout,
        )

    # The instance is ACTIVE before the router's leg may be: wait until the agent has realised every port of
    # the network (router interface and metadata port included), so that it has nothing left to change.
    def settled() -> bool:
        ports = cloud.api.get("/ports", params={"network_id": net["id"]}).json()["ports"]
        return len(ports) >= 3 and all(p["status"] == "ACTIVE" for p in ports)

    cloud.wait_for(settled, what="every port of the network ACTIVE")
    before = snapshot()
    assert cloud.agent is not None
    state = cloud.agent.client.desired_state()
    fresh = type(cloud.agent.dataplane)(cloud.host)  # no memory of earlier applies: checks the kernel itself
    reports = fresh.apply(state)
    assert [r.status for r in reports] == ["ACTIVE"]
    after = snapshot()
    for old, new in zip(before, after, strict=True):  # the lines that differ, if any
        assert set(old.splitlines()) ^ set(new.splitlines()) == set()


def test_ports_are_active_only_once_their_metadata_proxy_answers(cloud: Cloud, tmp_path: Path) -> None:
    # The proxy forwards to a metadata API that is not there: irrelevant here, only its listener counts.
    proxy = MetadataProxy(cloud.host, f"unix:{tmp_path / 'no-api.sock'}", "s3cret")
    try:
        cloud.start_agent(observers=[proxy])
        net, _ = cloud.network("gated", "10.72.0.0/24")
        inst = cloud.instance("gated", [{"network": net["id"]}])  # waits for ACTIVE
        assert proxy.serving(net["id"])
        assert (
            ns_run(
                inst["netns"],
                "curl",
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "-m",
                "3",
                "http://169.254.169.254/openstack",
            ).stdout
            == "503"
        )  # answered: the API is down
    finally:
        cloud.stop_agent()
    # An agent whose proxy cannot serve leaves new ports BUILD rather than reporting them ACTIVE.
    cloud.start_agent(observers=[proxy])  # `proxy` is closed now: it serves nothing
    net2, _ = cloud.network("gated2", "10.73.0.0/24")
    ns = cloud.namespace("gated2")
    inst2 = cloud.create("instances", "instance", {"name": "g2", "host": cloud.host, "netns": ns,
                                                   "nets": [{"network": net2["id"]}]})  # fmt: skip
    port_id = inst2["nets"][0]["port_id"]
    assert cloud.agent is not None
    cloud.wait_for(lambda: cloud.api.get(f"/ports/{port_id}").json()["port"]["status"] == "BUILD", what="BUILD")
    assert "eth0" in ns_run(ns, "ip", "-o", "link").stdout  # plugged, just not announced


def test_full_passes_repair_what_changed_behind_the_agents_back_even_under_steady_events(cloud: Cloud) -> None:
    cloud.start_agent(resync_interval=1.0)
    net, _ = cloud.network("repair", "10.68.0.0/24")
    a = cloud.instance("ra", [{"network": net["id"]}])
    b = cloud.instance("rb", [{"network": net["id"]}])
    tap = names.tap(a["nets"][0]["port_id"])
    ns_run(names.host_ns(cloud.host), "ip", "link", "del", tap, check=True)  # takes a's eth0 along
    assert "eth0" not in ns_run(a["netns"], "ip", "-o", "link").stdout
    stop = threading.Event()

    def churn() -> None:  # a change every 50 ms: incremental passes all the time, trusting what they applied
        i = 0
        while not stop.wait(0.05):
            cloud.api.put(f"/networks/{net['id']}", json={"network": {"description": f"churn {i}"}})
            i += 1

    worker = threading.Thread(target=churn, daemon=True)
    worker.start()
    try:
        cloud.wait_for(lambda: tap in _host_links(cloud), timeout=15, what="the periodic full pass to replug")
    finally:
        stop.set()
        worker.join(timeout=10)
    # The tap shows before the plug has finished (its peer moved and addressed): traffic is what says it has.
    b_ip = b["nets"][0]["fixed_ips"][0]["ip_address"]
    cloud.wait_for(lambda: ping(a["netns"], b_ip), timeout=15, what="a's traffic after the replug")


def test_a_plug_replaces_a_device_left_by_an_interrupted_one(cloud: Cloud) -> None:
    """A host end already named like the port's (a plug interrupted before it could finish): the fresh
    plug clears it and its peer, and the instance passes traffic."""
    cloud.start_agent()
    net, _ = cloud.network("stale", "10.69.0.0/24")
    port = cloud.create("ports", "port", {"network_id": net["id"]})
    host_ns, tap = names.host_ns(cloud.host), names.tap(port["id"])
    ns_run(host_ns, "ip", "link", "add", tap, "type", "veth", "peer", "name", "eth0", check=True)
    inst = cloud.instance("st", [{"port": port["id"]}])
    assert ping(inst["netns"], "169.254.169.254")
    assert port["mac_address"] in ns_run(inst["netns"], "ip", "-o", "link", "show", "eth0").stdout
    assert "eth0" not in _host_links(cloud)


def test_a_device_someone_else_put_on_a_bridge_is_left_alone(cloud: Cloud) -> None:
    """A device that is not cloudnet's (a VMM's tap on a network's bridge) survives full passes where it was, while
    the uplink --uplink gave the agent still goes back to the agent's namespace once nothing needs it."""
    cloud.outside("physnet1", "192.0.2.1/24")
    uplink = cloud.uplinks["physnet1"]
    cloud.start_agent(resync_interval=0.5)
    pub = cloud.create("networks", "network", {"name": "pub", "router:external": True,
                                               "provider:network_type": "flat",
                                               "provider:physical_network": "physnet1"})  # fmt: skip
    cloud.create("subnets", "subnet", {"network_id": pub["id"], "cidr": "192.0.2.0/24", "gateway_ip": "192.0.2.1"})
    net, sub = cloud.network("vmm", "10.71.0.0/24")
    router = cloud.create("routers", "router", {"name": "vmm-r", "external_gateway_info": {"network_id": pub["id"]}})
    assert cloud.api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]}).is_success
    inst = cloud.instance("vmm", [{"network": net["id"]}])
    cloud.wait_for(lambda: uplink in _host_links(cloud), what="the uplink moved onto its bridge")
    host_ns, foreign = names.host_ns(cloud.host), f"tapvmm{cloud.suffix}"[:15]
    ns_run(host_ns, "ip", "tuntap", "add", foreign, "mode", "tap", check=True)
    ns_run(host_ns, "ip", "link", "set", foreign, "master", names.bridge(net["id"]), "up", check=True)
    # Full passes every 0.5 s: the next instance going ACTIVE means passes ran with the tap on the bridge.
    cloud.instance("vmm2", [{"network": net["id"]}])
    cloud.wait_for(lambda: cloud.api.get(f"/instances/{inst['id']}").json()["instance"]["status"] == "ACTIVE",
                   what="a pass after the tap came")  # fmt: skip
    assert f"master {names.bridge(net['id'])}" in ns_run(host_ns, "ip", "-o", "link", "show", foreign).stdout
    # Nothing needs the external network on this host any more: the uplink goes home, the tap stays.
    assert cloud.api.put(f"/routers/{router['id']}", json={"router": {"external_gateway_info": {}}}).is_success
    cloud.wait_for(lambda: uplink not in _host_links(cloud), what="the uplink handed back")
    assert foreign in _host_links(cloud)
    ns_run(host_ns, "ip", "link", "del", foreign, check=True)
