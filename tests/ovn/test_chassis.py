"""A chassis' agent with the OVN driver against a real OVN sandbox (userspace datapath): instances plugged into
br-int talk through OVN, read their metadata through the network's localport, and go ACTIVE only once
ovn-controller has bound their ports; what is hostile fails alone."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from cloudnet.agent.agent import Agent
from cloudnet.agent.metadata.proxy import MetadataProxy
from cloudnet.dataplane.base import metadata_ns
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.ovn import names
from cloudnet.dataplane.ovn.driver import OvnDataplane
from cloudnet.metadata.model import Settings
from cloudnet.metadata.server import MetadataApp
from cloudnet.northbound.sync import NorthboundSync
from tests.support.cloud import Cloud, ns_run, ping, running_agent
from tests.support.metadata import RunningMetadata
from tests.support.ovn import OvnSandbox, ovn_sandbox
from tests.support.server import RunningServer

SECRET = "ovn-chassis-secret"


@pytest.fixture(scope="module")
def ovn() -> Iterator[OvnSandbox]:
    with ovn_sandbox() as sandbox:
        sandbox.add_chassis()
        yield sandbox


@dataclass
class Chassis:
    cloud: Cloud
    sync: NorthboundSync
    dataplane: OvnDataplane
    agent: Agent | None


@pytest.fixture
def chassis(server: RunningServer, api: httpx.Client, ovn: OvnSandbox) -> Iterator[Chassis]:
    ch = ovn.chassis[0]
    sync = NorthboundSync(server.store, ovn.nb_url, [ch.name], interval=0.1)
    sync.start()
    cloud = Cloud(api=api, server=server, host=ch.name, suffix=uuid.uuid4().hex[:6])
    metadata = RunningMetadata.start(MetadataApp(server.store, SECRET, Settings(), poll_interval=0.05))
    proxy = MetadataProxy(ch.name, metadata.url, SECRET, retry_interval=0.1, burst=200)
    dataplane = OvnDataplane(ch.name, ch.ovs_url, ovn.sb_url, host_ns=ch.netns)
    running = Chassis(cloud, sync, dataplane, None)
    try:
        with running_agent(server.url, ch.name, dataplane, observers=[proxy]) as agent:
            running.agent = agent
            yield running
            for inst in api.get("/instances").json()["instances"]:
                api.delete(f"/instances/{inst['id']}")
            cloud.wait_for(lambda: not dataplane.vswitch.ours(), what="br-int emptied of this host's ports")
    finally:
        proxy.close()
        metadata.stop()
        dataplane.close()
        running.sync.stop()  # (a test may have replaced it)
        cloud.remove_namespaces()
        for name in ovn.nbctl("--bare", "--columns=name", "list", "Logical_Switch").split():
            ovn.nbctl("ls-del", name)


def _binding(ovn: OvnSandbox, port_id: str) -> str:
    return ovn.sbctl("--bare", "--columns=chassis", "find", "Port_Binding", f"logical_port={port_id}").strip()


def _metadata_networks(ovn: OvnSandbox, chassis: str) -> str | None:
    """What this chassis' Chassis_Private row says it serves (None: no such key)."""
    out = json.loads(ovn.sbctl("--format=json", "--columns=external_ids", "find", "Chassis_Private", f"name={chassis}"))
    ids = dict(out["data"][0][0][1])
    return ids.get(names.METADATA_NETWORKS)


def test_two_instances_talk_through_ovn_and_read_metadata_through_the_localport(
    chassis: Chassis, ovn: OvnSandbox
) -> None:
    cloud = chassis.cloud
    net, _sub = cloud.network("ovn-net", "10.61.0.0/24")
    a = cloud.instance("a", [{"network": net["id"]}])
    b = cloud.instance("b", [{"network": net["id"]}])
    a_port, b_port = a["nets"][0]["port_id"], b["nets"][0]["port_id"]
    for port_id in (a_port, b_port):  # ACTIVE means bound by ovn-controller, here
        assert _binding(ovn, port_id), f"{port_id} ACTIVE but not bound in SB"
    b_ip = b["nets"][0]["fixed_ips"][0]["ip_address"]
    assert ping(a["netns"], b_ip, count=2, wait=2)

    # Metadata through the localport: the instance's request leaves by OVN to the namespace the proxy serves.
    meta = metadata_ns(cloud.host, net["id"])
    assert netns.exists(meta)
    got = ns_run(a["netns"], "curl", "-sS", "-m", "5", "http://169.254.169.254/openstack/latest/meta_data.json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["uuid"] == a["id"]
    assert _metadata_networks(ovn, cloud.host) == net["id"]

    # The last VIF of the network leaves: its metadata namespace and localport go, SB says so.
    for inst in (a, b):
        assert cloud.api.delete(f"/instances/{inst['id']}").status_code == 204
    cloud.wait_for(lambda: not netns.exists(meta), what="the metadata namespace removed")
    cloud.wait_for(lambda: not chassis.dataplane.vswitch.ours(), what="br-int ports removed")
    cloud.wait_for(lambda: _metadata_networks(ovn, cloud.host) == "", what="SB forgot the metadata network")


def test_a_port_goes_active_only_once_bound(chassis: Chassis, ovn: OvnSandbox) -> None:
    cloud = chassis.cloud
    net, _sub = cloud.network("ovn-unbound", "10.62.0.0/24")
    chassis.sync.wait_synced()
    chassis.sync.stop()  # NB will not know the port: ovn-controller cannot bind it
    ns = cloud.namespace("late")
    inst = cloud.create("instances", "instance", {"name": "late", "host": cloud.host, "netns": ns,
                                                  "nets": [{"network": net["id"]}]})  # fmt: skip
    port_id = inst["nets"][0]["port_id"]
    cloud.wait_for(lambda: names.tap(port_id) in chassis.dataplane.vswitch.ours(), what="the port plugged")
    cloud.wait_for(lambda: cloud.api.get(f"/ports/{port_id}").json()["port"]["status"] == "BUILD",
                   what="the plugged port reported BUILD")  # fmt: skip
    assert not _binding(ovn, port_id)
    chassis.sync = NorthboundSync(cloud.server.store, ovn.nb_url, [cloud.host], interval=0.1)
    chassis.sync.start()
    cloud.wait_active(inst["id"])
    assert _binding(ovn, port_id)


def test_a_refused_namespace_and_a_port_id_that_is_no_plain_name_fail_alone(chassis: Chassis, ovn: OvnSandbox) -> None:
    cloud = chassis.cloud
    net, _sub = cloud.network("ovn-hostile", "10.63.0.0/24")
    good = cloud.instance("good", [{"network": net["id"]}])
    # Another instance's namespace, spelled as a path: the guard refuses it; the instance fails alone, with why.
    bad = cloud.create("instances", "instance", {"name": "bad", "host": cloud.host,
                                                 "netns": netns.path_of(good["netns"]),
                                                 "nets": [{"network": net["id"]}]})  # fmt: skip
    bad_port = bad["nets"][0]["port_id"]
    cloud.wait_for(lambda: cloud.api.get(f"/ports/{bad_port}").json()["port"]["status"] == "ERROR", what="ERROR")
    reason = cloud.api.get(f"/ports/{bad_port}").json()["port"]["binding:vif_details"]["reason"]
    assert f"instance {good['id']}" in reason, reason
    assert cloud.api.get(f"/instances/{good['id']}").json()["instance"]["status"] == "ACTIVE"
    assert names.tap(bad_port) not in chassis.dataplane.vswitch.ours()

    # A port id that is not a plain token never reaches OVSDB (driver level: the API makes none such).
    hostile = 'p1",external_ids:iface-id="x'
    state = {"instances": [{"id": "i-hostile", "netns": good["netns"], "ports": [hostile]}],
             "ports": {hostile: {"id": hostile, "network_id": net["id"], "mac_address": "fa:16:3e:00:00:01",
                                 "fixed_ips": [], "admin_state_up": True}},
             "networks": {net["id"]: {"id": net["id"], "mtu": 1500}}, "subnets": {}, "routers": []}  # fmt: skip
    other = OvnDataplane(f"{cloud.host}-x", ovn.chassis[0].ovs_url, ovn.sb_url, chassis=cloud.host,
                         host_ns=ovn.chassis[0].netns)  # fmt: skip
    try:
        (report,) = other.apply(state)
        assert report.status == "ERROR" and "plain name" in report.vif_details["reason"]
        assert other.vswitch.ours() == {}
    finally:
        other.close()


def test_a_direct_port_handed_to_the_driver_fails_to_bind_with_why(chassis: Chassis, ovn: OvnSandbox) -> None:
    # Driver level (the server refuses to bind one on OVN: tests/api/test_sriov.py): nothing is plugged for it.
    net, _sub = chassis.cloud.network("ovn-direct", "10.64.0.0/24")
    port = chassis.cloud.create("ports", "port", {"network_id": net["id"], "binding:vnic_type": "direct"})
    state = {"instances": [{"id": "i-direct", "netns": chassis.cloud.namespace("direct"), "ports": [port["id"]]}],
             "ports": {port["id"]: port}, "networks": {net["id"]: {"id": net["id"], "mtu": 1500}}, "subnets": {},
             "routers": []}  # fmt: skip
    other = OvnDataplane(f"{chassis.cloud.host}-d", ovn.chassis[0].ovs_url, ovn.sb_url, chassis=chassis.cloud.host,
                         host_ns=ovn.chassis[0].netns)  # fmt: skip
    try:
        (report,) = other.apply(state)
        assert (report.status, report.vif_type) == ("ERROR", "binding_failed")
        assert "direct (SR-IOV) is not supported on the OVN dataplane" in report.vif_details["reason"]
        assert other.vswitch.ours() == {}
    finally:
        other.close()
