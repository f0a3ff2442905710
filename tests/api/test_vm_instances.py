"""VM instances (`kind: vm`) and VMs a compute service plugs with plain Neutron ports (Nova's way), as the control
plane sees them: the API shape, the refusals, the host's desired state, and the metadata view of a Nova-style port.
The host's agent is not running here: its side is tests/integration/test_vm_*.py."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from cloudnet.metadata.view import load_view
from cloudnet.store.db import Store
from tests.support.api import create, error

Json = dict[str, Any]


@pytest.fixture
def host(api: httpx.Client) -> str:
    r = api.put("/hosts/vm-host-1", json={"host": {"agent_version": "test"}})
    assert r.status_code == 200, r.text
    return "vm-host-1"


@pytest.fixture
def net(api: httpx.Client) -> Json:
    network = create(api, "networks", "network", name="vm-net", mtu=1400, shared=True)
    create(api, "subnets", "subnet", network_id=network["id"], cidr="10.81.0.0/24")
    return network


def desired(api: httpx.Client, host: str) -> Json:
    r = api.get(f"/hosts/{host}/state")
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_a_vm_has_taps_named_as_nova_names_them_and_no_namespace(api: httpx.Client, host: str, net: Json) -> None:
    vm = create(api, "instances", "instance", name="vm1", kind="vm", host=host,
                nets=[{"network": net["id"]}, {"network": net["id"]}])  # fmt: skip
    assert vm["kind"] == "vm" and vm["netns"] is None
    assert [n["device"] for n in vm["nets"]] == [("tap" + n["port_id"])[:14] for n in vm["nets"]]
    assert all(len(n["device"]) == 14 for n in vm["nets"])
    shown = api.get(f"/instances/{vm['id']}").json()["instance"]
    assert shown["kind"] == "vm" and shown["nets"][1]["device"] == vm["nets"][1]["device"]
    container = create(api, "instances", "instance", name="c1", host=host, nets=[{"network": net["id"]}])
    assert container["kind"] == "container" and container["netns"] and container["nets"][0]["device"] is None
    state = desired(api, host)
    kinds = {i["id"]: (i["kind"], i["netns"]) for i in state["instances"]}
    assert kinds[vm["id"]] == ("vm", None) and kinds[container["id"]][0] == "container"
    assert [i["id"] for i in api.get("/instances", params={"kind": "vm"}).json()["instances"]] == [vm["id"]]


@pytest.mark.parametrize("extra", [{"netns": "somewhere"}, {"handoff": True}, {"kind": "bare-metal"}])
def test_what_a_vm_cannot_have_is_refused(api: httpx.Client, host: str, net: Json, extra: Json) -> None:
    body = {"name": "bad", "kind": "vm", "host": host, "nets": [{"network": net["id"]}], **extra}
    r = api.post("/instances", json={"instance": body})
    assert r.status_code == 400, r.text
    assert api.get("/ports", params={"network_id": net["id"]}).json()["ports"] == []


def test_a_vm_nic_has_no_name_inside(api: httpx.Client, host: str, net: Json) -> None:
    r = api.post("/instances", json={"instance": {"name": "bad", "kind": "vm", "host": host,
                                                  "nets": [{"network": net["id"], "ifname": "ens3"}]}})  # fmt: skip
    assert "namespace" in error(r, 400)


def nova_port(api: httpx.Client, net: Json, host: str, device: str, **extra: Any) -> Json:
    return create(api, "ports", "port", network_id=net["id"], device_owner="compute:nova", device_id=device,
                  **{"binding:host_id": host}, **extra)  # fmt: skip


def test_nova_style_ports_are_a_vm_of_their_device(api: httpx.Client, host: str, net: Json, store: Store) -> None:
    server = str(uuid.uuid4())
    first = nova_port(api, net, host, server)
    second = nova_port(api, net, host, server)
    elsewhere = nova_port(api, net, "another-host", str(uuid.uuid4()))
    unbound = create(api, "ports", "port", network_id=net["id"], device_owner="compute:nova", device_id="x")
    state = desired(api, host)
    (vm,) = [i for i in state["instances"] if i["id"] == server]
    assert vm["kind"] == "vm" and vm["compute_service"] and vm["netns"] is None
    # (in creation order; ports of one second by id: Neutron does not know the order of a server's NICs either)
    assert sorted(vm["ports"]) == sorted([first["id"], second["id"]]) and set(vm["ports"]) <= set(state["ports"])
    assert elsewhere["id"] not in state["ports"] and unbound["id"] not in state["ports"]
    # The metadata service answers its guest: the device id is the instance.
    with store.read() as conn:
        loaded = load_view(conn, server)
    assert loaded is not None
    view, depends_on = loaded
    assert view.id == server and [p.id for p in view.ports] == vm["ports"]
    assert first["id"] in depends_on
    with store.read() as conn:
        assert load_view(conn, str(uuid.uuid4())) is None


def test_what_is_not_a_compute_services_vm(api: httpx.Client, host: str, net: Json, store: Store) -> None:
    """An instance's own ports, a direct port, a port whose device id names a cloudnet instance: none is a
    Nova-style VM of its own."""
    inst = create(api, "instances", "instance", name="c2", host=host, nets=[{"network": net["id"]}])
    hijack = nova_port(api, net, host, inst["id"])  # claims to be the instance's device
    direct = nova_port(api, net, host, str(uuid.uuid4()), **{"binding:vnic_type": "direct"})
    state = desired(api, host)
    assert [i["id"] for i in state["instances"]] == [inst["id"]]
    assert state["instances"][0]["ports"] == [inst["nets"][0]["port_id"]]
    assert hijack["id"] not in state["ports"] and direct["id"] not in state["ports"]
    with store.read() as conn:
        loaded = load_view(conn, inst["id"])
    assert loaded is not None and [p.id for p in loaded[0].ports] == [inst["nets"][0]["port_id"]]


def test_a_member_cannot_bind_a_port_to_a_host(users: dict[str, httpx.Client]) -> None:
    alice, host = users["alice"], "vm-host-2"
    assert users["admin"].put(f"/hosts/{host}", json={"host": {"agent_version": "test"}}).status_code == 200
    network = create(alice, "networks", "network", name="alice-net")
    create(alice, "subnets", "subnet", network_id=network["id"], cidr="10.82.0.0/24")
    r = alice.post("/ports", json={"port": {"network_id": network["id"], "device_owner": "compute:nova",
                                            "device_id": str(uuid.uuid4()), "binding:host_id": host}})  # fmt: skip
    assert r.status_code == 403, r.text
