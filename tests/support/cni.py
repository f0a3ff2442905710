"""cloudnet-cni run as a runtime runs it (a process with CNI_* variables and the configuration on stdin), against a
real server and this test's own agent (with its metadata proxy), whose token has the `service` role."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from cloudnet.config import ServerConfig
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux.driver import LinuxDataplane
from cloudnet.store.db import Store
from tests.support.cloud import Cloud
from tests.support.guest_metadata import READER, agent_with_proxy
from tests.support.installed import DEBIAN_PYTHON, require_cloud_init
from tests.support.server import RunningServer

PLUGIN = Path(sys.executable).with_name("cloudnet-cni")  # the console script `make deps` installs
SERVICE_TOKEN = "runtime-token"
Answer = tuple[int, dict[str, Any] | None]
Run = Callable[..., subprocess.CompletedProcess[str]]  # a command in a container, through its runtime
# An HTTP GET of the metadata service from a given source address, run with the host's Python in a container's
# namespace: the body, or why nothing came back.
FETCH = """
import socket, sys
s = socket.socket()
s.settimeout(2)
try:
    s.bind((sys.argv[1], 0))
    s.connect(("169.254.169.254", 80))
    s.sendall(b"GET /openstack/latest/meta_data.json HTTP/1.0\\r\\nHost: 169.254.169.254\\r\\n\\r\\n")
    print(s.recv(65536).decode(errors="replace"))
except OSError as exc:
    print("NOTHING", type(exc).__name__)
"""


@dataclass
class CniCloud:
    cloud: Cloud
    api: httpx.Client
    token_file: Path
    network: dict[str, Any]
    subnet: dict[str, Any]
    foreign: dict[str, Any]  # another project's network (bob's), never visible to the plugin's token

    def conf(self, **extra: Any) -> dict[str, Any]:
        """A plugin configuration as a runtime passes it (the conflist's name and cniVersion merged in)."""
        base = {"cniVersion": "1.1.0", "name": f"cni-{self.cloud.suffix}", "type": "cloudnet-cni",
                "network": self.network["name"], "url": self.cloud.server.url, "token_file": str(self.token_file),
                "host": self.cloud.host, "timeout": 20}  # fmt: skip
        return {**base, **extra}

    def instances(self) -> list[dict[str, Any]]:
        return list(self.api.get("/instances", params={"host": self.cloud.host}).json()["instances"])

    def instance_of(self, container_id: str) -> dict[str, Any] | None:
        """The instance cloudnet-cni made for a runtime's container (by the CNI_CONTAINERID it was given)."""
        found = [i for i in self.instances() if i["metadata"].get("cni_container_id") == container_id]
        return found[0] if found else None

    def add_router(self) -> dict[str, Any]:
        """A router of alice's on the subnet (10.77.0.1)."""
        router = self.cloud.create("routers", "router", {"name": f"r-{self.cloud.suffix}", "project_id": "alice"})
        r = self.api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": self.subnet["id"]})
        assert r.status_code == 200, r.text
        return router


def assert_on_network(rig: CniCloud, container_id: str, run: Run, neighbour: str) -> dict[str, Any]:
    """A container as cloudnet-cni attached it, seen from inside through its runtime (`run`): its instance is
    ACTIVE and alice's, eth0 has the instance's address, the routes are the subnet's (default, the metadata hop,
    the host route), and it reaches its neighbour's address, its router and its own metadata. Its instance."""
    inst = rig.instance_of(container_id)
    assert inst is not None and inst["status"] == "ACTIVE", inst
    assert str(inst["description"]).startswith("cloudnet-cni") and inst["project_id"] == "alice"
    (nic,) = inst["nets"]
    own = nic["fixed_ips"][0]["ip_address"]
    addr = run("ip", "-o", "-4", "addr", "show", "eth0")
    assert f" {own}/24 " in addr.stdout, addr
    routes = {line.split(" proto")[0].strip() for line in run("ip", "route").stdout.splitlines()}
    hop = nic["metadata_hops"][rig.subnet["id"]]
    assert {"default via 10.77.0.1 dev eth0", f"169.254.169.254 via {hop} dev eth0",
            "192.0.2.0/24 via 10.77.0.254 dev eth0"} <= routes, routes  # fmt: skip
    for peer in (neighbour, "10.77.0.1"):  # the neighbour, the router
        ping = run("ping", "-c1", "-W5", peer)
        assert ping.returncode == 0, (peer, ping.stdout, ping.stderr)
    meta = run("wget", "-qO-", "http://169.254.169.254/openstack/latest/meta_data.json")
    assert meta.returncode == 0, meta.stderr
    assert json.loads(meta.stdout)["uuid"] == inst["id"]
    return inst


def in_netns(sandbox: str, *cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nsenter", f"--net={sandbox}", *cmd], capture_output=True, text=True, timeout=60)


def assert_reads_only_its_own_metadata(
    sandbox: str, mine: dict[str, Any], theirs: dict[str, Any], own: str, neighbour: str
) -> None:
    """cloud-init's OpenStack reader in a container's namespace (`sandbox`) gets that container's instance
    (`mine`, address `own`); the container, claiming its neighbour's address as its source, gets nothing (port
    security drops it before the proxy)."""
    require_cloud_init()
    read = in_netns(sandbox, DEBIAN_PYTHON, READER, "http://169.254.169.254")
    assert read.returncode == 0, read.stderr
    got = json.loads(read.stdout)
    assert got["read_metadata_service_uuid"] == got["openstack"]["metadata"]["uuid"] == mine["id"]
    assert got["ec2_metadata"]["local-ipv4"] == own
    assert mine["id"] in in_netns(sandbox, DEBIAN_PYTHON, "-c", FETCH, own).stdout  # the probe works
    assert in_netns(sandbox, "ip", "addr", "add", f"{neighbour}/32", "dev", "eth0").returncode == 0
    spoofed = in_netns(sandbox, DEBIAN_PYTHON, "-c", FETCH, neighbour).stdout
    assert spoofed.startswith("NOTHING") and theirs["id"] not in spoofed, spoofed


def invoke(
    command: str,
    conf: dict[str, Any] | bytes,
    container_id: str = "",
    netns_path: str = "",
    ifname: str = "eth0",
    args: str = "",
) -> Answer:
    """(exit status, decoded stdout) of one run of the plugin."""
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": container_id, "CNI_NETNS": netns_path, "CNI_IFNAME": ifname,
           "CNI_ARGS": args, "CNI_PATH": str(PLUGIN.parent), "PATH": os.environ.get("PATH", "/bin")}  # fmt: skip
    data = conf if isinstance(conf, bytes) else json.dumps(conf).encode()
    proc = subprocess.run([str(PLUGIN)], input=data, capture_output=True, env=env, timeout=90)
    assert not proc.stderr.strip() or proc.returncode != 0, proc.stderr
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else None


@contextlib.contextmanager
def cni_cloud(
    work: Path,
    template: Path,
    instance_pools: bool = False,
    park: bool = False,
    pool_min: int = 2,
    pool_batch: int = 4,
    dataplane: Callable[[str], tuple[LinuxDataplane, dict[str, Any] | None]] | None = None,
    mdata_dir: Path | None = None,
) -> Iterator[CniCloud]:
    """A server (tokens: an admin, the runtime's service token in project `alice`, a member of `bob`), this
    test's agent with its metadata proxy, and a network of alice's with a subnet. `dataplane`: the agent's
    driver and report for a host name (default: the Linux driver alone); `mdata_dir`: the agent's state directory
    for SmartOS metadata sockets (none without)."""
    state = work / "state"
    state.mkdir(parents=True)
    shutil.copyfile(template, state / "cloudnet.db")
    config = ServerConfig(state_dir=state, instance_pools=instance_pools, pool_min=pool_min, pool_batch=pool_batch)
    config.tokens_file.write_text(json.dumps({"tokens": {
        "admin": {"project_id": "ops", "role": "admin"},  # the agent's (tests/support/cloud.py)
        SERVICE_TOKEN: {"project_id": "alice", "role": "service"},
        "bob-token": {"project_id": "bob", "role": "member"},
    }}))  # fmt: skip
    token_file = work / "cloudnet-cni.token"
    token_file.write_text(SERVICE_TOKEN + "\n")
    token_file.chmod(0o600)
    store = Store(f"sqlite:///{state / 'cloudnet.db'}")
    server = RunningServer.start(config, store)
    suffix = uuid.uuid4().hex[:6]
    api = httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=30)
    cloud = Cloud(api=api, server=server, host=f"h-{suffix}", suffix=suffix)
    try:
        driver, report = dataplane(cloud.host) if dataplane else (None, None)
        with agent_with_proxy(cloud, server, park=park, dataplane=driver, report=report, mdata_dir=mdata_dir):
            net = cloud.create("networks", "network", {"name": f"cni-net-{suffix}", "project_id": "alice"})
            sub = cloud.create(
                "subnets",
                "subnet",
                {
                    "network_id": net["id"],
                    "cidr": "10.77.0.0/24",
                    "project_id": "alice",
                    "dns_nameservers": ["10.77.0.53"],
                    "host_routes": [{"destination": "192.0.2.0/24", "nexthop": "10.77.0.254"}],
                },
            )
            foreign = cloud.create("networks", "network", {"name": f"cni-bob-{suffix}", "project_id": "bob"})
            cloud.create("subnets", "subnet", {"network_id": foreign["id"], "cidr": "10.78.0.0/24",
                                               "project_id": "bob"})  # fmt: skip
            yield CniCloud(cloud, api, token_file, net, sub, foreign)
    finally:
        LinuxDataplane(cloud.host).teardown()
        for name in cloud.namespaces:
            netns.remove(name)
        api.close()
        server.stop()
        store.dispose()
