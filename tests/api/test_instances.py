"""/v2.0/instances: CRUD, Zun-style `nets` (new ports and given ports, with Zun's errors), the default host,
status from the ports' status, and visibility between projects. The host agent is simulated via /v2.0/hosts."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import update

from cloudnet.store import tables as t
from cloudnet.store.db import Store
from tests.support.api import create, error
from tests.support.server import RunningServer

Json = dict[str, Any]
OWNER = "compute:cloudnet"
MISSING = "5f0e3f2c-0d7e-4c39-9a3e-2b8f8a0c9d11"


def register(api: httpx.Client, name: str) -> None:
    r = api.put(f"/hosts/{name}", json={"host": {"agent_version": "test"}})
    assert r.status_code == 200, r.text


def network_with_subnet(api: httpx.Client, cidr: str) -> tuple[Json, Json]:
    net = create(api, "networks", "network", name=f"net-{cidr}")
    sub = create(api, "subnets", "subnet", network_id=net["id"], cidr=cidr)
    return net, sub


def post_instance(api: httpx.Client, name: str = "vm", **body: Any) -> httpx.Response:
    return api.post("/instances", json={"instance": {"name": name, "netns": f"ns-{name}", **body}})


def new_instance(api: httpx.Client, name: str = "vm", **body: Any) -> Json:
    r = post_instance(api, name, **body)
    assert r.status_code == 201, r.text
    return dict(r.json()["instance"])


def get(api: httpx.Client, collection: str, member: str, ident: str) -> Json:
    r = api.get(f"/{collection}/{ident}")
    assert r.status_code == 200, r.text
    return dict(r.json()[member])


def listed(api: httpx.Client, collection: str, **params: str) -> list[Json]:
    r = api.get(f"/{collection}", params=params)
    assert r.status_code == 200, r.text
    return list(r.json()[collection])


def port_ids(inst: Json) -> list[str]:
    return [n["port_id"] for n in inst["nets"]]


def report(api: httpx.Client, host: str, port_id: str, status: str) -> None:
    r = api.put(f"/hosts/{host}/ports", json={"ports": [{"id": port_id, "status": status}]})
    assert r.status_code == 200, r.text
    assert r.json()["updated"] == [port_id]


@pytest.fixture
def host(api: httpx.Client) -> str:
    register(api, "node-1")
    return "node-1"


@pytest.fixture
def net(api: httpx.Client) -> tuple[Json, Json]:
    return network_with_subnet(api, "10.0.0.0/24")


# -- CRUD ---------------------------------------------------------------------------------------


def test_instance_crud(api: httpx.Client, host: str, net: tuple[Json, Json]) -> None:
    network, subnet = net
    body = {
        "hostname": "web-1.example", "project_id": "admin", "host": host, "netns": "/proc/4242/ns/net",
        "user_data": "#cloud-config\n", "metadata": {"role": "web", "tier": "1"},
        "ssh_keys": [{"name": "k1", "key": "ssh-ed25519 AAAA k1"}], "nets": [{"network": network["id"]}],
    }  # fmt: skip
    r = api.post("/instances", json={"instance": {"name": "web", **body}})
    assert r.status_code == 201, r.text
    inst = r.json()["instance"]
    assert inst["name"] == "web"
    assert inst["hostname"] == "web-1.example"
    assert inst["project_id"] == inst["tenant_id"] == "admin"
    assert inst["host"] == host
    assert inst["netns"] == "/proc/4242/ns/net"
    assert inst["user_data"] == "#cloud-config\n"
    assert inst["metadata"] == {"role": "web", "tier": "1"}
    assert inst["ssh_keys"] == [{"name": "k1", "key": "ssh-ed25519 AAAA k1"}]
    assert inst["status"] == "BUILD"
    assert inst["revision_number"] == 0
    (nic,) = inst["nets"]
    assert nic["network_id"] == network["id"]
    assert nic["status"] == "DOWN"
    (ip,) = nic["fixed_ips"]
    assert ip["subnet_id"] == subnet["id"] and ip["ip_address"].startswith("10.0.0.")

    port = get(api, "ports", "port", nic["port_id"])
    assert port["device_id"] == inst["id"]
    assert port["device_owner"] == OWNER
    assert port["binding:host_id"] == host
    assert port["project_id"] == "admin"
    assert port["mac_address"] == nic["mac_address"]
    assert port["fixed_ips"] == nic["fixed_ips"]

    assert get(api, "instances", "instance", inst["id"]) == inst
    assert [i["id"] for i in listed(api, "instances")] == [inst["id"]]

    r = api.put(f"/instances/{inst['id']}",
                json={"instance": {"name": "web2", "metadata": {"role": "db"}, "user_data": "echo hi"}})  # fmt: skip
    assert r.status_code == 200, r.text
    updated = r.json()["instance"]
    assert updated["name"] == "web2"
    assert updated["metadata"] == {"role": "db"}
    assert updated["user_data"] == "echo hi"
    assert updated["revision_number"] == 1
    assert (updated["hostname"], updated["host"], updated["netns"]) == (inst["hostname"], host, inst["netns"])
    assert updated["nets"] == inst["nets"]
    assert get(api, "instances", "instance", inst["id"]) == updated
    # user_data can be cleared; what is not given is kept.
    r = api.put(f"/instances/{inst['id']}", json={"instance": {"user_data": None}})
    assert r.status_code == 200, r.text
    assert r.json()["instance"]["user_data"] is None
    assert r.json()["instance"]["name"] == "web2"
    error(api.put(f"/instances/{inst['id']}", json={"instance": {"host": "node-2"}}), 400)
    error(api.put(f"/instances/{inst['id']}", json={"instance": {"metadata": {"n": 1}}}), 400)

    assert api.delete(f"/instances/{inst['id']}").status_code == 204
    error(api.get(f"/instances/{inst['id']}"), 404, "InstanceNotFound")
    error(api.delete(f"/instances/{inst['id']}"), 404, "InstanceNotFound")
    error(api.put(f"/instances/{inst['id']}", json={"instance": {"name": "x"}}), 404, "InstanceNotFound")
    assert listed(api, "instances") == []
    # The port the instance created goes with it, and its address is free again.
    error(api.get(f"/ports/{nic['port_id']}"), 404, "PortNotFound")
    again = create(api, "ports", "port", network_id=network["id"], fixed_ips=[{"ip_address": ip["ip_address"]}])
    assert again["fixed_ips"] == [ip]


def test_create_defaults_and_validation(api: httpx.Client, host: str) -> None:
    inst = new_instance(api, "plain")
    assert inst["hostname"] == "plain"
    assert inst["host"] == host
    assert inst["nets"] == []
    assert (inst["metadata"], inst["ssh_keys"], inst["user_data"]) == ({}, [], None)
    # No ports: nothing to wait for.
    assert inst["status"] == "ACTIVE"

    error(api.post("/instances", json={"instance": {"name": "x", "netns": ""}}), 400)  # (left out: one is made)
    error(post_instance(api, "x", metadata={"a": 1}), 400)
    error(post_instance(api, "x", ssh_keys=[{"name": "k"}]), 400)
    error(post_instance(api, "x", bogus=True), 400)
    error(post_instance(api, "x", nets=[{}]), 400)
    error(post_instance(api, "x", nets=[{"network": MISSING, "v4-fixed-ip": "not-an-ip"}]), 400)
    error(post_instance(api, "x", nets=[{"network": MISSING}]), 404, "NetworkNotFound")
    assert [i["id"] for i in listed(api, "instances")] == [inst["id"]]


def test_list_filters(api: httpx.Client, net: tuple[Json, Json]) -> None:
    register(api, "node-1")
    register(api, "node-2")
    a = new_instance(api, "a", host="node-1")
    b = new_instance(api, "b", host="node-2")
    c = new_instance(api, "c", host="node-2")
    assert {i["id"] for i in listed(api, "instances")} == {a["id"], b["id"], c["id"]}
    assert [i["id"] for i in listed(api, "instances", host="node-1")] == [a["id"]]
    assert {i["id"] for i in listed(api, "instances", host="node-2")} == {b["id"], c["id"]}
    assert [i["id"] for i in listed(api, "instances", name="c")] == [c["id"]]
    assert [i["id"] for i in listed(api, "instances", name="c", host="node-1")] == []
    assert listed(api, "instances", host="node-3") == []


# -- nets: new ports ----------------------------------------------------------------------------


def test_fixed_ip_is_honoured(api: httpx.Client, host: str, net: tuple[Json, Json]) -> None:
    network, subnet = net
    inst = new_instance(api, nets=[{"network": network["id"], "v4-fixed-ip": "10.0.0.50"}])
    (nic,) = inst["nets"]
    assert nic["fixed_ips"] == [{"subnet_id": subnet["id"], "ip_address": "10.0.0.50"}]
    assert get(api, "ports", "port", nic["port_id"])["fixed_ips"] == nic["fixed_ips"]


def test_taken_fixed_ip_creates_nothing(api: httpx.Client, host: str, net: tuple[Json, Json]) -> None:
    network, _ = net
    holder = create(api, "ports", "port", network_id=network["id"], fixed_ips=[{"ip_address": "10.0.0.50"}])
    before = {p["id"] for p in listed(api, "ports")}
    r = post_instance(api, nets=[{"network": network["id"]}, {"network": network["id"], "v4-fixed-ip": "10.0.0.50"}])
    error(r, 409, "IpAddressAlreadyAllocated")
    assert listed(api, "instances") == []
    assert {p["id"] for p in listed(api, "ports")} == before
    assert listed(api, "ports", device_owner=OWNER) == []
    # The same address twice in one request is refused just the same.
    r = post_instance(api, nets=[{"network": network["id"], "v4-fixed-ip": "10.0.0.60"},
                                 {"network": network["id"], "v4-fixed-ip": "10.0.0.60"}])  # fmt: skip
    error(r, 409, "IpAddressAlreadyAllocated")
    assert listed(api, "instances") == []
    assert {p["id"] for p in listed(api, "ports")} == before
    assert get(api, "ports", "port", holder["id"])["device_id"] == ""


def test_nets_order_is_kept(api: httpx.Client, host: str) -> None:
    nets = [network_with_subnet(api, f"10.{i}.0.0/24")[0] for i in range(3)]
    given = create(api, "ports", "port", network_id=nets[0]["id"], name="given")
    spec = [{"network": nets[2]["id"]}, {"port": given["id"]}, {"network": nets[1]["id"]}, {"network": nets[2]["id"]}]
    inst = new_instance(api, nets=spec)
    order = [nets[2]["id"], nets[0]["id"], nets[1]["id"], nets[2]["id"]]
    assert [n["network_id"] for n in inst["nets"]] == order
    assert port_ids(inst)[1] == given["id"]
    assert len(set(port_ids(inst))) == 4
    shown = get(api, "instances", "instance", inst["id"])
    assert shown == inst  # the create's answer (built from what it wrote) is what a read gives
    assert port_ids(listed(api, "instances")[0]) == port_ids(inst)
    # Ports the instance created are named after its interfaces.
    assert [get(api, "ports", "port", p)["name"] for p in port_ids(inst)] == ["vm-eth0", "given", "vm-eth2", "vm-eth3"]


def test_interface_names(api: httpx.Client, host: str) -> None:
    """A runtime names an interface (CNI_IFNAME): the name is kept, shown, and in the host's desired state; an
    unnamed one keeps eth<position>; a name the kernel would refuse, loopback's, or a clash is refused."""
    nets = [network_with_subnet(api, f"10.{i}.0.0/24")[0] for i in range(2)]
    given = create(api, "ports", "port", network_id=nets[1]["id"], name="given")
    inst = new_instance(api, host=host, nets=[{"network": nets[0]["id"], "ifname": "net1"},
                                              {"port": given["id"], "ifname": "cni.data-0"}])  # fmt: skip
    assert [n["ifname"] for n in inst["nets"]] == ["net1", "cni.data-0"]
    assert get(api, "instances", "instance", inst["id"]) == inst
    assert get(api, "ports", "port", port_ids(inst)[0])["name"] == "vm-net1"
    r = api.get(f"/hosts/{host}/state")
    assert r.status_code == 200, r.text
    (desired,) = [i for i in r.json()["instances"] if i["id"] == inst["id"]]
    assert desired["ifnames"] == ["net1", "cni.data-0"] and desired["ports"] == port_ids(inst)
    plain = new_instance(api, "plain", nets=[{"network": nets[0]["id"]}, {"network": nets[1]["id"], "ifname": "x"}])
    assert [n["ifname"] for n in plain["nets"]] == ["eth0", "x"]
    bad = ["lo", "a" * 16, "eth0/x", "..", "", "eth 0", "net:1", "\u00e9th0", 7]
    for i, name in enumerate(bad):
        error(post_instance(api, f"bad{i}", nets=[{"network": nets[0]["id"], "ifname": name}]), 400)
    clash = [{"network": nets[0]["id"]}, {"network": nets[1]["id"], "ifname": "eth0"}]  # eth0 is position 0's
    assert "interface name" in error(post_instance(api, "clash", nets=clash), 400)
    assert sorted(i["name"] for i in listed(api, "instances")) == ["plain", "vm"]  # nothing of the refused ones


# -- nets: given ports --------------------------------------------------------------------------


def test_given_port_is_bound_then_released(api: httpx.Client, host: str, net: tuple[Json, Json]) -> None:
    network, _ = net
    given = create(api, "ports", "port", network_id=network["id"], name="mine")
    inst = new_instance(api, nets=[{"port": given["id"]}, {"network": network["id"]}])
    assert port_ids(inst)[0] == given["id"]
    created_port = port_ids(inst)[1]
    bound = get(api, "ports", "port", given["id"])
    assert (bound["device_id"], bound["device_owner"], bound["binding:host_id"]) == (inst["id"], OWNER, host)
    assert bound["fixed_ips"] == given["fixed_ips"]
    assert bound["mac_address"] == given["mac_address"]

    # The agent plugs both ports: the instance goes ACTIVE only when the last one is.
    assert inst["status"] == "BUILD"
    report(api, host, given["id"], "ACTIVE")
    assert get(api, "instances", "instance", inst["id"])["status"] == "BUILD"
    report(api, host, created_port, "ACTIVE")
    shown = get(api, "instances", "instance", inst["id"])
    assert shown["status"] == "ACTIVE"
    assert [n["status"] for n in shown["nets"]] == ["ACTIVE", "ACTIVE"]
    report(api, host, created_port, "ERROR")
    assert get(api, "instances", "instance", inst["id"])["status"] == "ERROR"  # one port failed: the instance did

    # Already bound: a second instance cannot take it.
    error(post_instance(api, "vm2", nets=[{"port": given["id"]}]), 409, "PortInUse")

    assert api.delete(f"/instances/{inst['id']}").status_code == 204
    kept = get(api, "ports", "port", given["id"])
    assert (kept["device_id"], kept["device_owner"], kept["binding:host_id"]) == ("", "", "")
    assert kept["status"] == "DOWN"
    assert kept["binding:vif_type"] == "unbound"
    assert kept["fixed_ips"] == given["fixed_ips"]
    error(api.get(f"/ports/{created_port}"), 404, "PortNotFound")

    # Released, it can be given to another instance.
    again = new_instance(api, "vm3", nets=[{"port": given["id"]}])
    assert port_ids(again) == [given["id"]]


def test_given_port_errors(api: httpx.Client, host: str, net: tuple[Json, Json]) -> None:
    network, _ = net
    free = create(api, "ports", "port", network_id=network["id"], name="free")
    foreign = create(api, "ports", "port", network_id=network["id"], project_id="other-project")
    used = create(api, "ports", "port", network_id=network["id"], device_id="some-vm", device_owner="compute:nova")
    on_this_host = create(api, "ports", "port", network_id=network["id"], **{"binding:host_id": host})
    # (on the single-host Linux dataplane a port bound to a second host fails to bind: services/networks/single_host.py)
    elsewhere = create(api, "ports", "port", network_id=network["id"], **{"binding:host_id": "node-2"})
    assert elsewhere["binding:vif_type"] == "binding_failed"

    msg = error(post_instance(api, nets=[{"port": MISSING}]), 404, "PortNotFound")
    assert MISSING in msg
    error(post_instance(api, nets=[{"port": foreign["id"]}]), 409, "PortNotUsable")
    error(post_instance(api, nets=[{"port": used["id"]}]), 409, "PortInUse")
    error(post_instance(api, nets=[{"port": free["id"]}, {"port": free["id"]}]), 409, "PortInUse")
    error(post_instance(api, nets=[{"port": elsewhere["id"]}]), 409, "PortNotUsable")
    error(post_instance(api, nets=[{"port": free["id"], "network": network["id"]}]), 400)
    error(post_instance(api, nets=[{"port": free["id"], "v4-fixed-ip": "10.0.0.9"}]), 400)
    # A failing net after good ones leaves nothing behind: no instance, no new port, no binding.
    error(post_instance(api, nets=[{"network": network["id"]}, {"port": free["id"]}, {"port": MISSING}]), 404)

    assert listed(api, "instances") == []
    assert listed(api, "ports", device_owner=OWNER) == []
    assert len(listed(api, "ports")) == 5
    for p in (free, foreign, used, elsewhere):
        assert get(api, "ports", "port", p["id"]) == p

    # A port already bound to the instance's own host is fine.
    inst = new_instance(api, nets=[{"port": on_this_host["id"]}])
    assert get(api, "ports", "port", on_this_host["id"])["device_id"] == inst["id"]


# -- default host -------------------------------------------------------------------------------


def test_default_host(api: httpx.Client) -> None:
    msg = error(post_instance(api, "a"), 400)
    assert "host" in msg
    assert listed(api, "instances") == []
    register(api, "only")
    assert new_instance(api, "b")["host"] == "only"
    register(api, "second")
    error(post_instance(api, "c"), 400)
    assert new_instance(api, "d", host="second")["host"] == "second"
    assert {i["name"] for i in listed(api, "instances")} == {"b", "d"}


# -- projects -----------------------------------------------------------------------------------


def client(server: RunningServer, token: str) -> httpx.Client:
    return httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": token}, timeout=30)


def test_visibility_between_projects(users: dict[str, httpx.Client]) -> None:
    admin, alice, bob = users["admin"], users["alice"], users["bob"]
    register(admin, "node-1")
    a_net, _ = network_with_subnet(alice, "10.0.0.0/24")
    b_net, _ = network_with_subnet(bob, "10.1.0.0/24")
    a_port = create(alice, "ports", "port", network_id=a_net["id"])
    b_port = create(bob, "ports", "port", network_id=b_net["id"])

    # (members name no namespace: cloudnet makes one)
    a = new_instance(alice, "a", netns=None, nets=[{"network": a_net["id"]}, {"port": a_port["id"]}])
    b = new_instance(bob, "b", netns=None, nets=[{"port": b_port["id"]}])
    assert a["project_id"] == "alice" and b["project_id"] == "bob"
    assert a["host"] == "node-1"
    assert all(get(alice, "ports", "port", p)["project_id"] == "alice" for p in port_ids(a))

    assert [i["id"] for i in listed(alice, "instances")] == [a["id"]]
    assert [i["id"] for i in listed(bob, "instances")] == [b["id"]]
    assert {i["id"] for i in listed(admin, "instances")} == {a["id"], b["id"]}
    assert get(admin, "instances", "instance", a["id"]) == get(alice, "instances", "instance", a["id"])

    error(alice.get(f"/instances/{b['id']}"), 404, "InstanceNotFound")
    error(alice.put(f"/instances/{b['id']}", json={"instance": {"name": "mine"}}), 404, "InstanceNotFound")
    error(alice.delete(f"/instances/{b['id']}"), 404, "InstanceNotFound")
    assert get(bob, "instances", "instance", b["id"])["name"] == "b"

    # Another project's port or network is not visible to alice; nor may she create for bob.
    c_port = create(bob, "ports", "port", network_id=b_net["id"])
    error(post_instance(alice, "x", netns=None, nets=[{"port": c_port["id"]}]), 404, "PortNotFound")
    error(post_instance(alice, "x", netns=None, nets=[{"network": b_net["id"]}]), 404, "NetworkNotFound")
    error(post_instance(alice, "x", netns=None, project_id="bob"), 403)
    assert get(bob, "ports", "port", c_port["id"])["device_id"] == ""
    # An admin creating an instance for alice cannot hand it bob's port.
    error(post_instance(admin, "x", project_id="alice", nets=[{"port": c_port["id"]}]), 409, "PortNotUsable")
    by_admin = new_instance(admin, "for-alice", project_id="alice", nets=[{"network": a_net["id"]}])
    assert by_admin["project_id"] == "alice"
    assert get(alice, "ports", "port", port_ids(by_admin)[0])["project_id"] == "alice"
    assert {i["id"] for i in listed(alice, "instances")} == {a["id"], by_admin["id"]}

    # Non-admins cannot pretend to be the agent.
    r = alice.put("/hosts/node-1/ports", json={"ports": [{"id": port_ids(a)[0], "status": "ACTIVE"}]})
    error(r, 403)

    assert alice.delete(f"/instances/{a['id']}").status_code == 204
    assert get(alice, "ports", "port", a_port["id"])["device_id"] == ""
    assert [i["id"] for i in listed(bob, "instances")] == [b["id"]]


def test_zun_refuses_ports_that_are_active_or_failed(api: httpx.Client, store: Store) -> None:
    net = create(api, "networks", "network", name="z")
    create(api, "subnets", "subnet", network_id=net["id"], cidr="10.77.0.0/24")
    api.put("/hosts/zh", json={"host": {"agent_version": "1"}})
    active = create(api, "ports", "port", network_id=net["id"], **{"binding:host_id": "zh"})
    failed = create(api, "ports", "port", network_id=net["id"])
    with store.write() as tx:  # what an agent report / a failed binding leaves behind
        tx.conn.execute(update(t.ports).where(t.ports.c.id == active["id"]).values(status="ACTIVE"))
        tx.conn.execute(update(t.ports).where(t.ports.c.id == failed["id"]).values(vif_type="binding_failed"))
    for port, kind in ((active, "PortNotUsable"), (failed, "PortBindingFailed")):
        r = api.post("/instances", json={"instance": {"name": "z", "host": "zh", "netns": "z",
                                                      "nets": [{"port": port["id"]}]}})  # fmt: skip
        assert error(r, 409, kind)
    assert api.get("/instances").json()["instances"] == []


def test_metadata_hops_are_shown_to_the_instances_owner_on_anothers_shared_network(
    users: dict[str, httpx.Client],
) -> None:
    """The next hop towards 169.254.169.254 is what the guest is given: its owner sees it on the instance even where
    the network's metadata port is another project's and hidden (cloudnet-cni reports it in its result)."""
    admin, bob = users["admin"], users["bob"]
    assert admin.put("/hosts/node-m", json={"host": {"agent_version": "test"}}).status_code == 200
    net = admin.post("/networks", json={"network": {"name": "shared", "shared": True}}).json()["network"]
    for cidr in ("10.44.0.0/24", "fd44::/64"):
        assert admin.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": cidr}}).status_code == 201
    r = bob.post("/instances", json={"instance": {"name": "b", "host": "node-m", "nets": [{"network": net["id"]}]}})
    assert r.status_code == 201, r.text
    created = r.json()["instance"]
    (meta,) = admin.get("/ports", params={"network_id": net["id"], "device_owner": "network:distributed"}).json()[
        "ports"]  # fmt: skip
    v4 = [f for f in meta["fixed_ips"] if ":" not in f["ip_address"]]
    expected = {f["subnet_id"]: f["ip_address"] for f in v4}
    assert len(expected) == 1
    assert bob.get("/ports", params={"device_owner": "network:distributed"}).json()["ports"] == []  # hidden
    assert created["nets"][0]["metadata_hops"] == expected
    shown = bob.get(f"/instances/{created['id']}").json()["instance"]
    assert shown["nets"][0]["metadata_hops"] == expected
    listed = bob.get("/instances").json()["instances"]
    assert [i["nets"][0]["metadata_hops"] for i in listed] == [expected]
