"""One cloud over two OVN chassis (each in its own network namespace with its own ovs-vswitchd and ovn-controller,
userspace datapath), Geneve between them over an underlay of their own: one server and its northbound writer, one
agent (OVN driver) and metadata proxy per chassis. Instances on different chassis talk on one network and across a
router, each reads its metadata with cloud-init's own reader through the localport of its own chassis, and what
is hostile (a spoofed source, a port plugged on a chassis it is not bound to) gets nothing."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from cloudnet.agent.metadata.proxy import MetadataProxy
from cloudnet.config import ServerConfig
from cloudnet.dataplane.base import metadata_ns
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.ovn import names
from cloudnet.dataplane.ovn.driver import OvnDataplane
from cloudnet.metadata.model import Settings
from cloudnet.metadata.server import MetadataApp
from cloudnet.northbound.sync import NorthboundSync
from cloudnet.ovn import daemons
from cloudnet.store.db import Store
from tests.conftest import new_db_url
from tests.support.cloud import Cloud, ns_run, ping, running_agent
from tests.support.guest_metadata import SECRET, read_as_cloud_init
from tests.support.metadata import RunningMetadata
from tests.support.netserve import Responder, tcp_ask
from tests.support.ovn import UNDERLAY, OvnSandbox, ovn_sandbox
from tests.support.server import RunningServer

GENEVE_MTU = 1500 - 58  # the underlay's MTU (the server's default) less Geneve's (outer IPv4, UDP, OVN's option)
METADATA_URL = "http://169.254.169.254/openstack/latest/meta_data.json"


@dataclass
class Rig:
    ovn: OvnSandbox
    clouds: list[Cloud]  # one per chassis: its host is the chassis' name
    dataplanes: list[OvnDataplane]

    @property
    def api(self) -> httpx.Client:
        return self.clouds[0].api


@pytest.fixture(scope="module")
def rig(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    tmp = tmp_path_factory.mktemp("two-chassis")
    config = ServerConfig(state_dir=tmp / "state")
    config.state_dir.mkdir()
    config.dataplane = "ovn"  # (a network may span hosts)
    with contextlib.ExitStack() as stack:
        ovn = stack.enter_context(ovn_sandbox())
        chassis = [ovn.add_chassis(geneve=True) for _ in range(2)]
        store = Store(new_db_url("sqlite", request, tmp))
        stack.callback(store.dispose)
        server = RunningServer.start(config, store)
        stack.callback(server.stop)
        api = stack.enter_context(httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": "admin"},
                                               timeout=30))  # fmt: skip
        sync = NorthboundSync(store, ovn.nb_url, [ch.name for ch in chassis], interval=0.1)
        sync.start()
        stack.callback(sync.stop)
        metadata = RunningMetadata.start(MetadataApp(store, SECRET, Settings(), poll_interval=0.05))
        stack.callback(metadata.stop)
        rig = Rig(ovn, [], [])
        for ch in chassis:
            cloud = Cloud(api=api, server=server, host=ch.name, suffix=uuid.uuid4().hex[:6])
            stack.callback(cloud.remove_namespaces)
            proxy = MetadataProxy(ch.name, metadata.url, SECRET, retry_interval=0.1, burst=200)
            stack.callback(proxy.close)
            dataplane = OvnDataplane(ch.name, ch.ovs_url, ovn.sb_url, host_ns=ch.netns)
            stack.callback(dataplane.close)
            cloud.agent = stack.enter_context(running_agent(server.url, ch.name, dataplane, observers=[proxy]))
            rig.clouds.append(cloud)
            rig.dataplanes.append(dataplane)
        yield rig
        for inst in api.get("/instances").json()["instances"]:
            api.delete(f"/instances/{inst['id']}")
        for cloud, dataplane in zip(rig.clouds, rig.dataplanes, strict=True):
            cloud.wait_for(lambda d=dataplane: not d.vswitch.ours(), what="br-int emptied of the agent's ports")


def _vsctl(ch: daemons.Chassis, *args: str) -> str:
    return daemons.run(ch.rundir, ["ovs-vsctl", f"--db={ch.ovs_url}", "--timeout=10", *args])


def _bound_to(ovn: OvnSandbox, port_id: str) -> str:
    """The name of the chassis SB has the port bound to ('' if none)."""
    uuid_ = ovn.sbctl("--bare", "--columns=chassis", "find", "Port_Binding", f"logical_port={port_id}").strip()
    return ovn.sbctl("--bare", "--columns=name", "list", "Chassis", uuid_).strip() if uuid_ else ""


def _metadata_networks(ovn: OvnSandbox, chassis: str) -> set[str]:
    out = json.loads(ovn.sbctl("--format=json", "--columns=external_ids", "find", "Chassis_Private", f"name={chassis}"))
    return set(filter(None, dict(out["data"][0][0][1]).get(names.METADATA_NETWORKS, "").split(",")))


def _ip(inst: dict[str, Any]) -> str:
    return str(inst["nets"][0]["fixed_ips"][0]["ip_address"])


def test_the_chassis_tunnel_to_each_other_with_geneve(rig: Rig) -> None:
    one, two = rig.ovn.chassis
    encaps = json.loads(rig.ovn.sbctl("--format=json", "--columns=chassis_name,type,ip", "list", "Encap"))["data"]
    assert sorted(map(tuple, encaps)) == [
        (one.name, "geneve", str(UNDERLAY[1])),
        (two.name, "geneve", str(UNDERLAY[2])),
    ]
    for ch, remote in ((one, UNDERLAY[2]), (two, UNDERLAY[1])):  # ovn-controller made br-int's tunnel to the other
        options = _vsctl(ch, "--bare", "--columns=options", "find", "Interface", "type=geneve")
        assert f"remote_ip={remote}" in options, options


def test_instances_on_two_chassis_talk_and_read_metadata_through_their_own_localports(rig: Rig) -> None:
    one, two = rig.clouds
    net, _sub = one.network("geneve-net", "10.71.0.0/24")
    one.create("subnets", "subnet", {"network_id": net["id"], "cidr": "fd71::/64", "ip_version": 6})
    a = one.instance("a", [{"network": net["id"]}])
    b = two.instance("b", [{"network": net["id"]}])
    a_port, b_port = a["nets"][0]["port_id"], b["nets"][0]["port_id"]
    assert (_bound_to(rig.ovn, a_port), _bound_to(rig.ovn, b_port)) == (one.host, two.host)
    # (bound in SB is not yet flows on the other chassis: under load its ovn-controller may lag a moment)
    one.wait_for(lambda: ping(a["netns"], _ip(b), count=1, wait=1), timeout=30, what="a -> b across the tunnel")
    assert ping(b["netns"], _ip(a))
    b_v6 = next(f["ip_address"] for f in b["nets"][0]["fixed_ips"] if ":" in f["ip_address"])
    assert ping(a["netns"], b_v6, count=2, wait=2)  # IPv6 over Geneve too
    # A full-sized frame with DF set fits the tunnel: the network's default MTU leaves room for Geneve.
    assert net["mtu"] == GENEVE_MTU
    assert ns_run(a["netns"], "ping", "-n", "-c", "1", "-W", "2", "-M", "do", "-s", str(GENEVE_MTU - 28), _ip(b)
                  ).returncode == 0  # fmt: skip
    responder = Responder.start(b["netns"], "b", tcp=(8080,))
    try:
        assert tcp_ask(a["netns"], _ip(b), 8080) == f"b {_ip(a)} 8080"
    finally:
        responder.stop()

    # Each chassis serves the network's metadata through its own localport namespace, and says so in SB.
    for cloud in (one, two):
        assert netns.exists(metadata_ns(cloud.host, net["id"]))
        assert net["id"] in _metadata_networks(rig.ovn, cloud.host)
    for inst in (a, b):
        got = read_as_cloud_init(inst)  # (checks its uuid and address are its own)
        assert got["openstack"]["networkdata"]["links"][0]["ethernet_mac_address"] == inst["nets"][0]["mac_address"]

    # The network's last VIF leaves chassis two: its localport there goes; chassis one keeps serving a.
    assert rig.api.delete(f"/instances/{b['id']}").status_code == 204
    two.wait_for(lambda: not netns.exists(metadata_ns(two.host, net["id"])), what="chassis two's localport removed")
    two.wait_for(lambda: net["id"] not in _metadata_networks(rig.ovn, two.host), what="SB: two serves it no more")
    assert net["id"] in _metadata_networks(rig.ovn, one.host)
    got = ns_run(a["netns"], "curl", "-sS", "-m", "5", METADATA_URL)
    assert json.loads(got.stdout or "{}").get("uuid") == a["id"], got.stderr


def test_instances_on_two_chassis_talk_across_a_router(rig: Rig) -> None:
    one, two = rig.clouds
    left, left_sub = one.network("geneve-left", "10.72.0.0/24")
    right, right_sub = one.network("geneve-right", "10.73.0.0/24")
    router = one.create("routers", "router", {"name": "geneve-r"})
    for sub in (left_sub, right_sub):
        r = rig.api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]})
        assert r.status_code == 200, r.text
    c = one.instance("c", [{"network": left["id"]}])
    d = two.instance("d", [{"network": right["id"]}])
    assert ping(c["netns"], _ip(d), count=2, wait=2) and ping(d["netns"], _ip(c))
    # Each chassis serves the metadata of the network it has a VIF of, only.
    served = [_metadata_networks(rig.ovn, cloud.host) & {left["id"], right["id"]} for cloud in (one, two)]
    assert served == [{left["id"]}, {right["id"]}]
    assert not netns.exists(metadata_ns(one.host, right["id"])) and not netns.exists(metadata_ns(two.host, left["id"]))
    responder = Responder.start(c["netns"], "c", tcp=(8080,))
    try:
        assert tcp_ask(d["netns"], _ip(c), 8080) == f"c {_ip(d)} 8080"  # routed, not NATed: d's own address
    finally:
        responder.stop()


def test_a_spoofed_source_from_the_other_chassis_gets_nothing(rig: Rig) -> None:
    one, two = rig.clouds
    net, _sub = one.network("geneve-spoof", "10.74.0.0/24")
    victim = one.instance("spoofed", [{"network": net["id"]}])
    peer = one.instance("peer", [{"network": net["id"]}])
    liar = two.instance("liar", [{"network": net["id"]}])
    responder = Responder.start(peer["netns"], "peer", tcp=(8080,))
    try:
        # Happy first, as itself: this also leaves the peer's and the metadata port's MACs in the liar's neighbour
        # table, so what is dropped below is the spoofed IP source itself (not an ARP request carrying it).
        assert tcp_ask(liar["netns"], _ip(peer), 8080) == f"peer {_ip(liar)} 8080"
        own = ns_run(liar["netns"], "curl", "-sS", "-m", "5", METADATA_URL)
        assert json.loads(own.stdout or "{}").get("uuid") == liar["id"], own.stderr
        ns_run(liar["netns"], "ip", "addr", "add", f"{_ip(victim)}/32", "dev", "eth0", check=True)
        assert tcp_ask(liar["netns"], _ip(peer), 8080, timeout=1.0, source=_ip(victim)) == ""
    finally:
        responder.stop()
    # As the victim: no metadata at all (never the victim's).
    spoofed = ns_run(liar["netns"], "curl", "-sS", "-m", "1", "--interface", _ip(victim), METADATA_URL)
    assert spoofed.returncode != 0 and victim["id"] not in spoofed.stdout


def test_a_port_plugged_on_a_chassis_it_is_not_bound_to_stays_with_its_own(rig: Rig) -> None:
    one, two = rig.clouds
    net, _sub = one.network("geneve-claim", "10.75.0.0/24")
    victim = one.instance("claimed", [{"network": net["id"]}])
    witness = two.instance("witness", [{"network": net["id"]}])
    port_id = victim["nets"][0]["port_id"]
    port = rig.api.get(f"/ports/{port_id}").json()["port"]
    # Chassis two's driver is handed the port (a state no server sends: the port's host is chassis one) and plugs it.
    ns = two.namespace("claim")
    state: dict[str, Any] = {
        "instances": [{"id": "i-claim", "netns": ns, "ports": [port_id]}],
        "ports": {port_id: {**port, "fixed_ips": []}},
        "networks": {net["id"]: {"id": net["id"], "mtu": GENEVE_MTU}}, "subnets": {}, "routers": [],
    }  # fmt: skip
    ch2 = rig.ovn.chassis[1]
    rogue = OvnDataplane(f"{two.host}-rogue", ch2.ovs_url, rig.ovn.sb_url, chassis=two.host, host_ns=ch2.netns)
    try:
        (report,) = rogue.apply(state)
        assert names.tap(port_id) in rogue.vswitch.ours()
        rig.ovn.nbctl("--wait=hv", "sync")  # every ovn-controller has caught up since the plug
        assert report.status == "BUILD" and _bound_to(rig.ovn, port_id) == one.host
        (report,) = rogue.apply(state)
        assert report.status == "BUILD"
        # The port still lives on chassis one: its instance is ACTIVE and reachable across the tunnel.
        assert rig.api.get(f"/ports/{port_id}").json()["port"]["status"] == "ACTIVE"
        assert ping(witness["netns"], _ip(victim), count=2, wait=2)
    finally:
        rogue.apply({"instances": [], "ports": {}, "networks": {}, "subnets": {}, "routers": []})
        rogue.close()
