"""cloudnet-cni against the CNI spec's expectations, run as a runtime runs it (tests/support/cni.py): ADD then
CHECK then DEL, DEL twice, VERSION, GC, and the errors a runtime (or a hostile configuration) gets."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cloud import ns_run
from tests.support.cni import FETCH, CniCloud, cni_cloud, in_netns, invoke
from tests.support.installed import DEBIAN_PYTHON


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[CniCloud]:
    with cni_cloud(tmp_path_factory.mktemp("cni"), sqlite_template) as c:
        yield c


def container(rig: CniCloud, label: str) -> tuple[str, str]:
    """A container id and the path of a namespace of its own (as a runtime makes one)."""
    name = rig.cloud.namespace(label)
    return uuid.uuid4().hex + uuid.uuid4().hex, f"/run/netns/{name}"


def test_add_check_del(rig: CniCloud) -> None:
    cid, path = container(rig, "acd")
    conf = rig.conf()
    code, res = invoke("ADD", conf, cid, path)
    assert code == 0, res
    assert res is not None and res["cniVersion"] == "1.1.0"
    (iface,) = res["interfaces"]
    assert iface["name"] == "eth0" and iface["sandbox"] == path and iface["mtu"] == 1500
    (ip,) = res["ips"]
    assert ip["interface"] == 0 and ip["address"].startswith("10.77.0.") and ip["address"].endswith("/24")
    assert ip["gateway"] == "10.77.0.1"
    assert res["dns"] == {"nameservers": ["10.77.0.53"]}
    # the kernel agrees: the port's MAC and address on eth0 of the container's namespace, and the routes the
    # result lists (default, the metadata hop, the subnet's host route) are those the agent configured there
    name = path.rsplit("/", 1)[1]
    assert ip["address"] in ns_run(name, "ip", "-o", "addr", "show", "eth0").stdout
    hop = res["routes"][1]["gw"]
    assert res["routes"] == [{"dst": "0.0.0.0/0", "gw": "10.77.0.1"}, {"dst": "169.254.169.254/32", "gw": hop},
                             {"dst": "192.0.2.0/24", "gw": "10.77.0.254"}]  # fmt: skip
    assert hop.startswith("10.77.0.") and hop != ip["address"].split("/")[0]
    kernel = {(r["dst"], r.get("gateway")) for r in json.loads(ns_run(name, "ip", "-j", "route", "show").stdout)}
    for route in res["routes"]:
        assert (route["dst"].replace("0.0.0.0/0", "default").removesuffix("/32"), route["gw"]) in kernel, kernel
    (inst,) = [i for i in rig.instances() if i["netns"] == path]
    assert inst["status"] == "ACTIVE" and inst["project_id"] == "alice"
    assert inst["metadata"]["cni_container_id"] == cid

    assert invoke("CHECK", {**conf, "prevResult": res}, cid, path) == (0, None)
    wrong = {**res, "interfaces": [{**iface, "mac": "02:00:00:00:00:01"}]}
    code, err = invoke("CHECK", {**conf, "prevResult": wrong}, cid, path)
    assert code == 1 and err is not None and err["code"] == 102, err

    assert invoke("DEL", {**conf, "prevResult": res}, cid, path) == (0, None)
    assert not [i for i in rig.instances() if i["netns"] == path]
    assert invoke("DEL", conf, cid, path) == (0, None)  # a second DEL
    assert invoke("DEL", conf, cid, "") == (0, None)  # and one without a namespace (it is gone already)
    code, err = invoke("CHECK", {**conf, "prevResult": res}, cid, path)
    assert code == 1 and err is not None and err["code"] == 102


def test_runtime_chosen_ifname(rig: CniCloud) -> None:
    """CNI_IFNAME is the runtime's: the device inside gets that name, the result says so, and CHECK and DEL find
    the attachment by it (another name is another attachment)."""
    cid, path = container(rig, "ifname")
    name = path.rsplit("/", 1)[1]
    code, res = invoke("ADD", rig.conf(), cid, path, ifname="net1")
    assert code == 0, res
    assert res is not None and [i["name"] for i in res["interfaces"]] == ["net1"]
    links = {link["ifname"]: link for link in json.loads(ns_run(name, "ip", "-j", "link", "show").stdout)}
    assert set(links) == {"lo", "net1"} and links["net1"]["address"] == res["interfaces"][0]["mac"]
    assert res["ips"][0]["address"] in ns_run(name, "ip", "-o", "addr", "show", "net1").stdout
    assert "dev net1" in ns_run(name, "ip", "route", "show", "default").stdout
    (inst,) = [i for i in rig.instances() if i["netns"] == path]
    assert inst["nets"][0]["ifname"] == "net1"
    assert invoke("CHECK", {**rig.conf(), "prevResult": res}, cid, path, ifname="net1") == (0, None)
    code, err = invoke("CHECK", {**rig.conf(), "prevResult": res}, cid, path, ifname="eth0")
    assert code == 1 and err is not None and err["code"] == 102, err
    assert invoke("DEL", rig.conf(), cid, path, ifname="eth0") == (0, None)  # not this attachment: it stays
    assert [i["id"] for i in rig.instances() if i["netns"] == path] == [inst["id"]]
    assert invoke("DEL", rig.conf(), cid, path, ifname="net1") == (0, None)
    assert not [i for i in rig.instances() if i["netns"] == path]
    code, err = invoke("ADD", rig.conf(), cid, path, ifname="lo")  # the namespace's loopback is never a port's
    assert code == 1 and err is not None and err["code"] == 4, err


def test_add_in_a_chain_keeps_prev_result(rig: CniCloud) -> None:
    cid, path = container(rig, "chain")
    prev = {"cniVersion": "1.0.0", "interfaces": [{"name": "lo0", "sandbox": path}],
            "ips": [{"address": "192.0.2.9/32", "interface": 0}], "dns": {"search": ["example.org"]}}  # fmt: skip
    code, res = invoke("ADD", rig.conf(cniVersion="1.0.0", prevResult=prev), cid, path)
    assert code == 0, res
    assert res is not None and [i["name"] for i in res["interfaces"]] == ["lo0", "eth0"]
    assert "mtu" not in res["interfaces"][1]  # a 1.1 field, not in a 1.0 result
    assert res["ips"][0] == prev["ips"][0] and res["ips"][1]["interface"] == 1
    assert res["dns"] == {"search": ["example.org"], "nameservers": ["10.77.0.53"]}
    assert invoke("DEL", rig.conf(), cid, path) == (0, None)


def test_version_status_and_errors(rig: CniCloud) -> None:
    code, res = invoke("VERSION", {"cniVersion": "1.0.0"})
    assert code == 0 and res == {"cniVersion": "1.0.0", "supportedVersions": ["1.0.0", "1.1.0"]}
    assert invoke("STATUS", rig.conf()) == (0, None)
    cid, path = container(rig, "err")
    cases = [
        ({"CNI_COMMAND": "ADD"}, rig.conf(cniVersion="0.2.0"), 1),  # wrong cniVersion
        ({"CNI_COMMAND": "ADD"}, rig.conf(network=None), 7),  # bad config
        ({"CNI_COMMAND": "ADD"}, b"{not json", 7),
        ({"CNI_COMMAND": "ADD"}, rig.conf(timeout="soon"), 7),
        ({"CNI_COMMAND": "ADD", "container_id": ""}, rig.conf(), 4),  # bad env
        ({"CNI_COMMAND": "ADD", "container_id": "../x"}, rig.conf(), 4),
        ({"CNI_COMMAND": "ADD", "ifname": "eth0/x"}, rig.conf(), 4),
        ({"CNI_COMMAND": "ADD", "args": "TOKEN=admin"}, rig.conf(), 4),  # never a token in CNI_ARGS
        ({"CNI_COMMAND": "ADD", "args": "IgnoreUnknown=1;IP=10.77.0.300"}, rig.conf(), 7),  # podman 4's --ip
        ({"CNI_COMMAND": "ADD", "args": "IP=10.77.0.5,10.77.0.6,10.77.0.7"}, rig.conf(), 7),  # at most 2
        ({"CNI_COMMAND": "BOGUS"}, rig.conf(), 4),
        ({"CNI_COMMAND": "STATUS"}, rig.conf(url="http://127.0.0.1:9"), 50),  # nothing listens there
    ]
    for env, conf, expected in cases:
        kw = {"container_id": env.get("container_id", cid), "netns_path": path, "ifname": env.get("ifname", "eth0"),
              "args": env.get("args", "")}  # fmt: skip
        if conf is not None and not isinstance(conf, bytes):
            conf = {k: v for k, v in conf.items() if v is not None}
        code, err = invoke(env["CNI_COMMAND"], conf, **kw)
        assert code == 1 and err is not None, (env, err)
        assert err["code"] == expected and set(err) <= {"cniVersion", "code", "msg", "details"}, (env, err)
    assert not [i for i in rig.instances() if i["netns"] == path]


def test_hostile_configs(rig: CniCloud, tmp_path: Path) -> None:
    cid, path = container(rig, "hostile")
    code, err = invoke("ADD", rig.conf(network=rig.foreign["id"]), cid, path)  # bob's network, by id
    assert code == 1 and err is not None and err["code"] == 7, err
    code, err = invoke("ADD", rig.conf(network=rig.foreign["name"]), cid, path)  # and by name
    assert code == 1 and err is not None and err["code"] == 7, err
    code, err = invoke("ADD", rig.conf(project="bob"), cid, path)  # a service token of alice's naming bob
    assert code == 1 and err is not None and err["code"] == 100 and "403" in err["msg"], err
    for bad in ("/etc/hostname", "/dev/null", "/run/netns/no-such-ns", str(tmp_path)):
        code, err = invoke("ADD", rig.conf(), cid, bad)
        assert code == 1 and err is not None and err["code"] == 4, (bad, err)
    code, err = invoke("ADD", b'{"cniVersion": "1.1.0", "pad": "' + b"x" * (2 << 20) + b'"}', cid, path)
    assert code == 1 and err is not None and err["code"] == 7 and "bytes" in err["msg"], err
    code, err = invoke("ADD", ("[" * 100_000).encode(), cid, path)
    assert code == 1 and err is not None and err["code"] == 7, err
    leaky = tmp_path / "leaky.token"
    leaky.write_text("runtime-token\n")
    leaky.chmod(0o644)
    code, err = invoke("ADD", rig.conf(token_file=str(leaky)), cid, path)
    assert code == 1 and err is not None and err["code"] == 7 and "owner only" in err["msg"], err
    assert not [i for i in rig.instances() if i["netns"] == path]


def test_gc_removes_what_the_runtime_no_longer_lists(rig: CniCloud) -> None:
    conf = rig.conf(name=f"gc-{rig.cloud.suffix}")
    kept, dropped = container(rig, "gc1"), container(rig, "gc2")
    for cid, path in (kept, dropped):
        assert invoke("ADD", conf, cid, path)[0] == 0
    other_cid, other_path = container(rig, "gc3")  # another configuration's: GC of `conf` leaves it alone
    assert invoke("ADD", rig.conf(), other_cid, other_path)[0] == 0
    valid = [{"containerID": kept[0], "ifname": "eth0"}]
    assert invoke("GC", {**conf, "cni.dev/valid-attachments": valid}) == (0, None)
    left = {i["netns"] for i in rig.instances()}
    assert kept[1] in left and other_path in left and dropped[1] not in left
    assert invoke("DEL", conf, *kept) == (0, None)
    assert invoke("DEL", rig.conf(), other_cid, other_path) == (0, None)


def test_failed_add_leaves_nothing(rig: CniCloud) -> None:
    """The agent refuses a namespace that is a namespace but not a container's (its own, the host's): ADD fails
    with the agent's reason, the instance goes, and DEL after it succeeds."""
    cid, host_ns = uuid.uuid4().hex, f"/proc/{os.getpid()}/ns/net"
    code, err = invoke("ADD", rig.conf(), cid, host_ns)
    assert code == 1 and err is not None and err["code"] == 101, err
    assert not [i for i in rig.instances() if i["netns"] == host_ns]
    assert invoke("DEL", rig.conf(), cid, host_ns) == (0, None)


def test_first_container_on_a_network_without_a_router_gets_the_metadata_route(rig: CniCloud) -> None:
    """Issue 30's report: the first container cloudnet-cni plugs on a new network with no router must get the route
    to 169.254.169.254 (through the network's metadata port, made by that very ADD) besides `default via` the
    gateway nobody answers, as an instance made through the API on that network gets, and read its metadata."""
    net = rig.cloud.create("networks", "network", {"name": f"cni-first-{rig.cloud.suffix}", "project_id": "alice"})
    rig.cloud.create("subnets", "subnet", {"network_id": net["id"], "cidr": "10.79.0.0/24", "project_id": "alice"})
    cid, path = container(rig, "first")
    code, res = invoke("ADD", rig.conf(network=net["name"]), cid, path)
    assert code == 0, res
    inst = rig.instance_of(cid)
    assert inst is not None
    (nic,) = inst["nets"]
    (hop,) = nic["metadata_hops"].values()
    assert res is not None and res["routes"] == [{"dst": "0.0.0.0/0", "gw": "10.79.0.1"},
                                                 {"dst": "169.254.169.254/32", "gw": hop}]  # fmt: skip

    def routes(ns: str) -> set[tuple[str, str | None]]:
        return {(r["dst"], r.get("gateway")) for r in json.loads(ns_run(ns, "ip", "-j", "route", "show").stdout)
                if r.get("gateway")}  # fmt: skip

    plugged = routes(path.rsplit("/", 1)[1])
    assert plugged == {("default", "10.79.0.1"), ("169.254.169.254", hop)}, plugged
    by_api = rig.cloud.instance("first-api", [{"network": net["id"]}])
    assert routes(by_api["netns"]) == plugged  # the same rule for both
    own = nic["fixed_ips"][0]["ip_address"]
    assert inst["id"] in in_netns(path, DEBIAN_PYTHON, "-c", FETCH, own).stdout  # and the proxy answers there
    assert invoke("DEL", rig.conf(network=net["name"]), cid, path) == (0, None)
