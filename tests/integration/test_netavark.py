"""cloudnet-netavark against netavark's plugin API, run as netavark runs it (tests/support/netavark.py), with a
namespace the test made (no podman: this runs on both releases): create, setup then teardown twice, static IPs,
info, gc, and the errors netavark (or a hostile network or container) gets. The same cloud as cloudnet-cni's tests,
and the same rules: the plugin shares cloudnet-cni's attachments."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudnet.dataplane.linux.driver import LinuxDataplane
from tests.support.cloud import ns_run, running_agent
from tests.support.cni import CniCloud, cni_cloud, invoke
from tests.support.netavark import network, request, run_plugin


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[CniCloud]:
    with cni_cloud(tmp_path_factory.mktemp("netavark"), sqlite_template) as c:
        yield c


def container(rig: CniCloud, label: str) -> tuple[str, str]:
    """A container id and the path of a namespace of its own (as podman makes one)."""
    return uuid.uuid4().hex + uuid.uuid4().hex, f"/run/netns/{rig.cloud.namespace(label)}"


def on(rig: CniCloud, path: str) -> list[dict[str, object]]:
    return [i for i in rig.instances() if i["netns"] == path]


def test_info_and_create() -> None:
    code, info = run_plugin(b"", "info")
    assert code == 0 and info["api_version"] == "1.0.0" and info["version"], info
    given = {"name": "n1", "id": "a" * 64, "driver": "cloudnet-netavark", "options": {"network": "x", "url":
             "http://127.0.0.1:9"}, "ipam_options": {"driver": "host-local"}}  # fmt: skip
    code, made = run_plugin(given, "create")  # no token file: the open mode's (as cloudnet-cni)
    assert code == 0, made
    assert made["name"] == "n1" and made["id"] == "a" * 64 and made["driver"] == "cloudnet-netavark"
    assert made["ipam_options"] == {"driver": "none"} and made["subnets"] == [] and made["options"] == given["options"]


def test_setup_teardown(rig: CniCloud) -> None:
    cid, path = container(rig, "nvst")
    net = network(rig)
    code, status = run_plugin(request(net, cid), "setup", path)
    assert code == 0, status
    (iface,) = status["interfaces"].values()
    assert list(status["interfaces"]) == ["eth0"]
    (sub,) = iface["subnets"]
    assert sub["ipnet"].startswith("10.77.0.") and sub["ipnet"].endswith("/24") and sub["gateway"] == "10.77.0.1"
    assert status["dns_server_ips"] == ["10.77.0.53"] and status["dns_search_domains"] == []
    # the kernel agrees: the port's MAC and address on eth0, and the routes cloudnet-cni's result lists (default,
    # the network's metadata hop for 169.254.169.254, the subnet's host route) are there
    name = path.rsplit("/", 1)[1]
    link = json.loads(ns_run(name, "ip", "-j", "link", "show", "eth0").stdout)[0]
    assert link["address"] == iface["mac_address"]
    assert sub["ipnet"] in ns_run(name, "ip", "-o", "addr", "show", "eth0").stdout
    kernel = {(r["dst"], r.get("gateway")) for r in json.loads(ns_run(name, "ip", "-j", "route", "show").stdout)}
    hop = next(gw for dst, gw in kernel if dst == "169.254.169.254")
    assert hop and hop.startswith("10.77.0.") and hop != sub["ipnet"].split("/")[0]
    assert {("default", "10.77.0.1"), ("192.0.2.0/24", "10.77.0.254")} <= kernel, kernel
    (inst,) = on(rig, path)
    assert inst["status"] == "ACTIVE" and inst["project_id"] == "alice"
    assert str(inst["description"]).startswith("cloudnet-netavark") and str(inst["name"]).startswith("netavark-")
    assert inst["metadata"]["cni_container_id"] == cid  # (what the OCI hook and the tests read, as cloudnet-cni's)

    assert run_plugin(request(net, cid), "teardown", path) == (0, None)
    assert not on(rig, path)
    assert run_plugin(request(net, cid), "teardown", path) == (0, None)  # a second teardown
    assert run_plugin(request(net, cid), "teardown", "/run/netns/gone-already") == (0, None)


def test_static_ips_and_interface_name(rig: CniCloud) -> None:
    """`podman run --ip` (static_ips) asks cloudnet for that address; the interface is the one podman names."""
    cid, path = container(rig, "nvip")
    net = network(rig)
    code, status = run_plugin(request(net, cid, "net1", static_ips=["10.77.0.77"]), "setup", path)
    assert code == 0, status
    assert status["interfaces"]["net1"]["subnets"][0]["ipnet"] == "10.77.0.77/24"
    assert "10.77.0.77/24" in ns_run(path.rsplit("/", 1)[1], "ip", "-o", "addr", "show", "net1").stdout
    other_cid, other_path = container(rig, "nvip2")  # the address is taken: cloudnet says so, nothing is left
    code, err = run_plugin(request(net, other_cid, static_ips=["10.77.0.77"]), "setup", other_path)
    assert code == 1 and set(err) == {"error"} and "10.77.0.77" in err["error"], err
    assert not on(rig, other_path)
    assert run_plugin(request(net, cid, "net1"), "teardown", path) == (0, None)
    assert not on(rig, path)


def test_errors(rig: CniCloud, tmp_path: Path) -> None:
    """Every failure is {"error": ...} with exit status 1, and leaves no instance."""
    cid, path = container(rig, "nverr")
    net = network(rig)
    leaky = tmp_path / "leaky.token"
    leaky.write_text("runtime-token\n")
    leaky.chmod(0o644)
    bob_port = rig.cloud.create("ports", "port", {"network_id": rig.foreign["id"], "project_id": "bob"})
    cases: list[tuple[object, tuple[str, ...], str]] = [
        (b"{not json", ("setup", path), "not JSON"),
        (b'{"pad": "' + b"x" * (2 << 20) + b'"}', ("setup", path), "bytes"),  # oversize stdin, refused unread
        (("[" * 100_000).encode(), ("setup", path), "JSON"),
        (request(net, cid), ("setup",), "usage"),
        (request(net, cid), ("bogus", path), "usage"),
        (request(network(rig, network=rig.foreign["id"]), cid), ("setup", path), "visible"),  # bob's, by id
        (request(network(rig, network=rig.foreign["name"]), cid), ("setup", path), "visible"),  # and by name
        (request(network(rig, port=bob_port["id"]), cid), ("setup", path), "port"),  # bob's port
        (request(network(rig, project="bob"), cid), ("setup", path), "403"),  # alice's service token naming bob
        (request(network(rig, token_file=str(leaky)), cid), ("setup", path), "owner only"),
        (request({**net, "options": {**net["options"], "token": "admin"}}, cid), ("setup", path), "token_file"),
        (request({**net, "options": {**net["options"], "colour": "red"}}, cid), ("setup", path), "unknown option"),
        (request(network(rig, timeout="soon"), cid), ("setup", path), "timeout"),
        (request(net, cid, options={"TOKEN": "admin"}), ("setup", path), "token"),  # never from the container
        (request(net, cid, static_mac="02:00:00:00:00:01"), ("setup", path), "static_mac"),
        (request(net, cid, static_ips="10.77.0.9"), ("setup", path), "static_ips"),
        (request(net, cid, static_ips=["10.77.0.9", 7]), ("setup", path), "runtimeConfig.ips"),
        (request(net, cid, static_ips=["10.77.0.300"]), ("setup", path), "not an IP address"),
        ({**request(net, cid), "port_mappings": [{"container_port": 80, "host_port": 8080}]}, ("setup", path),
         "port mappings"),
        (request(net, "../x"), ("setup", path), "container_id"),
        (request(net, cid, "eth0/x"), ("setup", path), "interface_name"),
        (request(net, cid, "lo"), ("setup", path), "loopback"),
        (request(network(rig, url="http://127.0.0.1:9"), cid), ("setup", path), "cannot reach"),
    ]  # fmt: skip
    for bad in ("/etc/hostname", "/dev/null", "/run/netns/no-such-ns", str(tmp_path), "relative"):
        cases.append((request(net, cid), ("setup", bad), "namespace"))
    for stdin, args, needle in cases:
        code, err = run_plugin(stdin, *args)
        assert code == 1 and isinstance(err, dict) and set(err) == {"error"}, (args, err)
        assert needle in err["error"], (needle, err)
    code, err = run_plugin({**net, "subnets": [{"subnet": "10.1.0.0/24"}]}, "create")  # subnets are cloudnet's
    assert code == 1 and "--subnet" in err["error"], err
    code, err = run_plugin({**net, "options": {"url": "http://127.0.0.1:9"}}, "create")
    assert code == 1 and "option network" in err["error"], err
    assert not on(rig, path)


def test_failures_leave_nothing(rig: CniCloud) -> None:
    """The agent refuses a namespace that is not a container's (the host's): setup fails with its reason and the
    instance goes; on a host whose agent has stopped, the timeout takes the instance away. Teardown after either
    works."""
    cid, host_ns = uuid.uuid4().hex, f"/proc/{os.getpid()}/ns/net"
    code, err = run_plugin(request(network(rig), cid), "setup", host_ns)
    assert code == 1 and "could not plug" in err["error"], err
    assert not on(rig, host_ns)
    assert run_plugin(request(network(rig), cid), "teardown", host_ns) == (0, None)
    cid, path = container(rig, "nvtime")
    gone = f"gone-{rig.cloud.suffix}"
    try:
        with running_agent(rig.cloud.server.url, gone, LinuxDataplane(gone)):
            pass  # the host is registered, and then no agent serves it
    finally:
        LinuxDataplane(gone).teardown()
    lonely = network(rig, host=gone, timeout=1)
    code, err = run_plugin(request(lonely, cid), "setup", path)
    assert code == 1 and "not ACTIVE within 1 s" in err["error"], err
    assert not [i for i in rig.api.get("/instances").json()["instances"] if i["netns"] == path]
    assert run_plugin(request(lonely, cid), "teardown", path) == (0, None)


def test_gc_keeps_listed_containers_and_other_networks(rig: CniCloud) -> None:
    """gc with a network's JSON (podman network inspect) and the containers podman runs removes that network's
    other instances of this host; another netavark network's, and a CNI configuration's of the same name, stay."""
    net, other = network(rig, name=f"gc-{rig.cloud.suffix}"), network(rig)
    kept, dropped, elsewhere = container(rig, "nvgc1"), container(rig, "nvgc2"), container(rig, "nvgc3")
    for cid, path in (kept, dropped):
        assert run_plugin(request(net, cid), "setup", path)[0] == 0
    assert run_plugin(request(other, elsewhere[0]), "setup", elsewhere[1])[0] == 0
    cni_cid, cni_path = container(rig, "nvgc4")
    assert invoke("ADD", rig.conf(name=net["name"]), cni_cid, cni_path)[0] == 0
    assert run_plugin({**net, "containers": {}}, "gc", kept[0]) == (0, None)
    left = {i["netns"] for i in rig.instances()}
    assert {kept[1], elsewhere[1], cni_path} <= left and dropped[1] not in left
    code, err = run_plugin(net, "gc", "../../x")
    assert code == 1 and "container_id" in err["error"], err
    for cid, path, n in ((kept[0], kept[1], net), (elsewhere[0], elsewhere[1], other)):
        assert run_plugin(request(n, cid), "teardown", path) == (0, None)
    assert invoke("DEL", rig.conf(name=net["name"]), cni_cid, cni_path) == (0, None)
