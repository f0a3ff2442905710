"""Debian's dockerd (docker.io 20.10), private to the test (its own data/exec root, socket, no iptables, vfs),
with the driver as network and IPAM driver: `docker network create`, `docker run` on it, two containers talking,
Zun's pre-created port, and nothing left in cloudnet once the containers and the network are gone; a container's
NIC (handed off to dockerd) kept across an agent restart and a port change."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cloudnet.dataplane.linux import names
from tests.support.cloud import Cloud, ping
from tests.support.docker_driver import driver_for
from tests.support.installed import require_commands

__all__ = ["driver_for"]

RUN = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]  # the hard limits of these machines
IMAGE = "cloudnet-test/busybox:1"


@pytest.fixture(scope="module")
def dockerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    if os.geteuid() != 0:
        pytest.skip("needs root (starts dockerd)")
    require_commands("docker.io (and docker-cli on Debian 13)", "dockerd", "docker")
    root = tmp_path_factory.mktemp("dockerd")
    env = {**os.environ, "DOCKER_HOST": f"unix://{root}/docker.sock"}
    cmd = ["dockerd", "--data-root", f"{root}/data", "--exec-root", f"{root}/exec", "--pidfile", f"{root}/pid",
           "-H", env["DOCKER_HOST"], "--iptables=false", "--ip6tables=false", "--ip-forward=false", "--ip-masq=false",
           "--bridge=none", "--storage-driver=vfs", "--exec-opt", "native.cgroupdriver=cgroupfs"]  # fmt: skip
    with open(root / "log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while subprocess.run(["docker", "version"], env=env, capture_output=True).returncode != 0:
            assert proc.poll() is None and time.monotonic() < deadline, (root / "log").read_text()[-2000:]
            time.sleep(0.1)
        rootfs = root / "rootfs"
        (rootfs / "bin").mkdir(parents=True)
        shutil.copy("/bin/busybox", rootfs / "bin")
        for tool in ("sh", "ip", "ping", "sleep"):
            (rootfs / "bin" / tool).symlink_to("busybox")
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(root / "rootfs.tar"), "."], check=True)
        subprocess.run(["docker", "import", str(root / "rootfs.tar"), IMAGE], env=env, check=True, capture_output=True)
        yield env
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def docker(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(["docker", *args], env=env, capture_output=True, text=True, timeout=120)
    assert not check or r.returncode == 0, f"docker {' '.join(args)}: {r.stdout}{r.stderr}"
    return r


def test_docker_network_and_containers(dockerd: dict[str, str], cloud: Cloud, driver_for: Any,
                                       api: httpx.Client) -> None:  # fmt: skip
    cloud.start_agent()
    d = driver_for("admin", cloud.host)
    name = f"cnt-{uuid.uuid4().hex[:6]}"
    docker(dockerd, "network", "create", "-d", d.name, "--ipam-driver", d.name, "--subnet", "10.93.0.0/24", name)
    docker_id = docker(dockerd, "network", "inspect", "-f", "{{.Id}}", name).stdout.strip()
    network = api.get("/networks", params={"name": f"docker-{docker_id[:12]}"}).json()["networks"]
    assert len(network) == 1
    first = f"{name}-a"
    try:
        docker(dockerd, "run", "-d", *RUN, "--network", name, "--name", first, IMAGE, "sleep", "300")
        info = json.loads(docker(dockerd, "inspect", first).stdout)[0]["NetworkSettings"]["Networks"][name]
        ports = api.get("/ports", params={"network_id": network[0]["id"], "device_owner": "compute:cloudnet"})
        (port,) = ports.json()["ports"]
        assert port["status"] == "ACTIVE" and port["fixed_ips"][0]["ip_address"] == info["IPAddress"]
        assert port["mac_address"] == info["MacAddress"]
        # a second container reaches the first over cloudnet's network
        out = docker(dockerd, "run", "--rm", *RUN, "--network", name, IMAGE, "ping", "-c", "1", "-W", "5",
                     info["IPAddress"], check=False)  # fmt: skip
        assert out.returncode == 0, out.stdout + out.stderr
        # Zun's case: a pre-created port, connected by its address, keeps its MAC and survives the container
        pre = cloud.create(
            "ports", "port", {"network_id": network[0]["id"], "fixed_ips": [{"ip_address": "10.93.0.50"}]}
        )
        link = docker(dockerd, "run", "--rm", *RUN, "--network", name, "--ip", "10.93.0.50", IMAGE, "ip", "link",
                      "show", "eth0").stdout  # fmt: skip
        assert pre["mac_address"] in link
        after = api.get(f"/ports/{pre['id']}").json()["port"]
        assert after["device_id"] == "" and after["status"] == "DOWN"
        assert api.delete(f"/ports/{pre['id']}").status_code == 204  # the user's port: theirs to delete
    finally:
        docker(dockerd, "rm", "-f", first, check=False)
    docker(dockerd, "network", "rm", name)
    assert api.get(f"/networks/{network[0]['id']}").status_code == 404  # its ports went with the containers
    assert api.get("/instances").json()["instances"] == []


def docker_network(dockerd: dict[str, str], d: Any, api: httpx.Client, cidr: str) -> tuple[str, dict[str, Any]]:
    """A docker network of the driver's on `cidr`: its docker name and the cloudnet network behind it."""
    name = f"cnt-{uuid.uuid4().hex[:6]}"
    docker(dockerd, "network", "create", "-d", d.name, "--ipam-driver", d.name, "--subnet", cidr, name)
    docker_id = docker(dockerd, "network", "inspect", "-f", "{{.Id}}", name).stdout.strip()
    (network,) = api.get("/networks", params={"name": f"docker-{docker_id[:12]}"}).json()["networks"]
    return name, network


def link_index(ns: str | None, dev: str) -> int | None:
    """The ifindex of `dev` (in namespace `ns`, or this one), None if it is not there."""
    r = subprocess.run(["ip", *(["-n", ns] if ns else []), "-o", "link", "show", dev], capture_output=True, text=True)
    return int(r.stdout.split(":")[0]) if r.returncode == 0 else None


def host_end_mtu(ns: str, dev: str) -> int:
    r = subprocess.run(["ip", "-n", ns, "-j", "link", "show", dev], capture_output=True, text=True, check=True)
    return int(json.loads(r.stdout)[0]["mtu"])


def test_handed_off_nic_survives_agent_restart_and_port_change(dockerd: dict[str, str], cloud: Cloud,
                                                               driver_for: Any, api: httpx.Client) -> None:  # fmt: skip
    cloud.start_agent()
    name, network = docker_network(dockerd, driver_for("admin", cloud.host), api, "10.94.0.0/24")
    box = f"{name}-a"
    try:
        docker(dockerd, "run", "-d", *RUN, "--network", name, "--name", box, IMAGE, "sleep", "300")
        address = json.loads(docker(dockerd, "inspect", box).stdout)[0]["NetworkSettings"]["Networks"][name][
            "IPAddress"
        ]
        (port,) = api.get("/ports", params={"network_id": network["id"], "device_owner": "compute:cloudnet"}).json()[
            "ports"
        ]
        assert api.get(f"/instances/{port['device_id']}").json()["instance"]["handoff"] is True
        peer = cloud.instance("peer", [{"network": network["id"]}])
        host_ns, tap = names.host_ns(cloud.host), names.tap(port["id"])

        def nic() -> str:  # "N: eth0@ifM": the container's device and its peer, the host end
            return docker(dockerd, "exec", box, "ip", "-o", "link", "show", "eth0").stdout.split("<")[0]

        before, tap_index = nic(), link_index(host_ns, tap)
        assert tap_index is not None and f"@if{tap_index}" in before
        assert ping(peer["netns"], address, count=2)
        # A restarted agent (its dataplane remembers nothing) finds the handed-off port plugged as it is.
        cloud.stop_agent()
        cloud.start_agent()
        assert nic() == before and link_index(host_ns, tap) == tap_index
        assert api.get(f"/ports/{port['id']}").json()["port"]["status"] == "ACTIVE"
        assert ping(peer["netns"], address, count=2)
        # A port change (another address, the network's MTU): the host end follows, the container's NIC stays.
        fixed = [*port["fixed_ips"], {"subnet_id": port["fixed_ips"][0]["subnet_id"], "ip_address": "10.94.0.77"}]
        assert api.put(f"/ports/{port['id']}", json={"port": {"fixed_ips": fixed}}).status_code == 200
        assert api.put(f"/networks/{network['id']}", json={"network": {"mtu": 1400}}).status_code == 200
        cloud.wait_for(lambda: host_end_mtu(host_ns, tap) == 1400, what="the host end's new MTU")
        assert nic() == before and link_index(host_ns, tap) == tap_index
        assert ping(peer["netns"], address, count=2)
        assert api.get(f"/ports/{port['id']}").json()["port"]["status"] == "ACTIVE"
    finally:
        docker(dockerd, "rm", "-f", box, check=False)
    # the container gone (Leave: its instance deleted), the host end goes too
    cloud.wait_for(lambda: link_index(host_ns, tap) is None, what="the host end removed")
    docker(dockerd, "network", "rm", name)


def test_a_container_on_a_network_without_a_router_gets_the_metadata_route(
    dockerd: dict[str, str], cloud: Cloud, driver_for: Any, api: httpx.Client
) -> None:
    # Issue 30's papercut: the device is handed from the namespace the agent routed to dockerd's sandbox, and its
    # routes stayed behind; dockerd made only the default route, via a gateway nobody answers without a router.
    cloud.start_agent()
    name, network = docker_network(dockerd, driver_for("admin", cloud.host), api, "10.94.0.0/24")
    (subnet,) = api.get("/subnets", params={"network_id": network["id"]}).json()["subnets"]
    routes = [{"destination": "192.0.2.0/24", "nexthop": "10.94.0.254"}]
    assert api.put(f"/subnets/{subnet['id']}", json={"subnet": {"host_routes": routes}}).status_code == 200
    try:
        shown = docker(dockerd, "run", "--rm", *RUN, "--network", name, IMAGE, "ip", "route").stdout
        (meta,) = api.get("/ports", params={"network_id": network["id"], "device_owner": "network:distributed"}).json()[
            "ports"
        ]
        hop = meta["fixed_ips"][0]["ip_address"]
        lines = {line.split(" proto")[0].strip() for line in shown.splitlines()}
        assert {f"default via {subnet['gateway_ip']} dev eth0", f"169.254.169.254 via {hop} dev eth0",
                "192.0.2.0/24 via 10.94.0.254 dev eth0"} <= lines, shown  # fmt: skip
    finally:
        docker(dockerd, "network", "rm", name)


def test_a_second_network_of_a_container_adds_no_second_metadata_route(
    dockerd: dict[str, str], cloud: Cloud, driver_for: Any, api: httpx.Client
) -> None:
    # dockerd fails a sandbox whose static route it cannot add: only the sandbox's first endpoint of ours carries the
    # metadata hop, so a container on two cloudnet networks starts and keeps the first network's.
    cloud.start_agent()
    d = driver_for("admin", cloud.host)  # (one driver, as a host runs it, for both networks)
    first, _net = docker_network(dockerd, d, api, "10.95.0.0/24")
    second, _other = docker_network(dockerd, d, api, "10.96.0.0/24")
    box = f"{first}-two"
    try:
        docker(dockerd, "run", "-d", *RUN, "--network", first, "--name", box, IMAGE, "sleep", "300")
        docker(dockerd, "network", "connect", second, box)  # (a clash would fail this, and the container's start)
        shown = docker(dockerd, "exec", box, "ip", "route").stdout
        metadata = [line for line in shown.splitlines() if line.startswith("169.254.169.254 ")]
        assert len(metadata) == 1 and "10.95.0." in metadata[0], shown
    finally:
        docker(dockerd, "rm", "-f", box, check=False)
        docker(dockerd, "network", "rm", first, second)
