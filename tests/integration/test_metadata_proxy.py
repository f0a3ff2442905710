"""The metadata proxy in real namespaces, in front of a real metadata API, read by cloud-init's own code.

Topology per network (built here; in production the dataplane driver builds it):

    instance ns: eth0 10.x.0.N/24, route 169.254.169.254/32 via 10.x.0.2
        | veth
    metadata ns (names.metadata_ns): br0 with 10.x.0.2/24, 169.254.169.254/32, fe80::a9fe:a9fe/64
        -> the proxy (this process, listening inside the namespace) -> the metadata API on loopback
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudnet.agent.client import ApiClient
from cloudnet.agent.metadata.proxy import MetadataProxy
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux import names
from cloudnet.metadata.model import Settings
from cloudnet.metadata.server import MetadataApp
from cloudnet.wire import signing
from tests.support.cloud import Cloud
from tests.support.guest_metadata import READER, SECRET, agent_with_proxy, read_as_cloud_init
from tests.support.installed import DEBIAN_PYTHON, require_cloud_init
from tests.support.metadata import RunningMetadata
from tests.support.server import RunningServer

USER_DATA = "#cloud-config\nruncmd: [echo hello]\n"
KEY = {"name": "k1", "key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIProxyTest test@example"}


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True)


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def guest_request(
    ns: str,
    path: str,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
    source: str | None = None,
    address: str = "169.254.169.254",
) -> Reply:
    """An HTTP request from inside the instance namespace (the socket is made there; I/O works from anywhere)."""
    with netns.entered(ns):
        if ":" in address:
            sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            sock.settimeout(10)
            try:
                sock.connect((address, 80, 0, socket.if_nametoindex("eth0")))
            except OSError:
                sock.close()
                raise
        else:
            sock = socket.create_connection((address, 80), timeout=10, source_address=(source, 0) if source else None)
    conn = http.client.HTTPConnection(address, 80, timeout=10)
    conn.sock = sock
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    finally:
        conn.close()


@dataclass
class Env:
    api: httpx.Client
    server: RunningServer
    metadata: RunningMetadata
    host: str
    suffix: str
    namespaces: list[str] = field(default_factory=list)
    proxies: list[MetadataProxy] = field(default_factory=list)
    _n: int = 0

    def network(self, cidr: str, name: str = "net") -> tuple[dict[str, Any], dict[str, Any]]:
        r = self.api.post("/networks", json={"network": {"name": name}})
        assert r.status_code == 201, r.text
        net = r.json()["network"]
        r = self.api.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": cidr,
                                                       "dns_nameservers": ["10.9.9.9"]}})  # fmt: skip
        assert r.status_code == 201, r.text
        return net, r.json()["subnet"]

    def instance(self, net: dict[str, Any], ip: str, name: str, **body: Any) -> dict[str, Any]:
        self._n += 1
        ns = f"cnmd-{self._n}-{self.suffix}"
        r = self.api.post("/instances", json={"instance": {
            "name": name, "hostname": name, "netns": ns, "host": self.host, "user_data": USER_DATA,
            "ssh_keys": [KEY], "nets": [{"network": net["id"], "v4-fixed-ip": ip}], **body,
        }})  # fmt: skip
        assert r.status_code == 201, r.text
        inst = dict(r.json()["instance"])
        self.plumb(inst, net, ip)
        return inst

    def metadata_ns(self, net: dict[str, Any], sub: dict[str, Any] | None = None) -> str:
        """The network's metadata namespace with its bridge and addresses, as the driver will build it."""
        ns = names.metadata_ns(self.host, net["id"])
        if ns not in self.namespaces:
            netns.ensure(ns)
            self.namespaces.append(ns)
            sh("ip", "-n", ns, "link", "add", "br0", "type", "bridge")
            sh("ip", "-n", ns, "link", "set", "br0", "up")
            sh("ip", "-n", ns, "addr", "add", "169.254.169.254/32", "dev", "br0")
            sh("ip", "-n", ns, "addr", "add", "fe80::a9fe:a9fe/64", "dev", "br0", "nodad")
            if sub is not None:
                sh("ip", "-n", ns, "addr", "add", _port_ip(sub["cidr"]), "dev", "br0")
        return ns

    def plumb(self, inst: dict[str, Any], net: dict[str, Any], ip: str) -> None:
        sub = self.api.get(f"/subnets/{inst['nets'][0]['fixed_ips'][0]['subnet_id']}").json()["subnet"]
        meta = self.metadata_ns(net, sub)
        ns = inst["netns"]
        netns.ensure(ns)
        self.namespaces.append(ns)
        sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0")
        peer = f"v{self._n}{self.suffix}"
        sh("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", peer, "netns", meta)
        sh("ip", "-n", ns, "link", "set", "eth0", "address", inst["nets"][0]["mac_address"], "up")
        sh("ip", "-n", ns, "addr", "add", f"{ip}/{sub['cidr'].split('/')[1]}", "dev", "eth0")
        sh("ip", "-n", ns, "route", "add", "169.254.169.254/32", "via", _port_ip(sub["cidr"]).split("/")[0])
        sh("ip", "-n", meta, "link", "set", peer, "master", "br0", "up")

    def state(self) -> dict[str, Any]:
        client = ApiClient(self.server.url, self.host, "admin")
        try:
            return client.desired_state()
        finally:
            client.close()

    def proxy(self, secret: str = SECRET, upstream: str | None = None, **options: Any) -> MetadataProxy:
        proxy = MetadataProxy(self.host, upstream or self.metadata.url, secret, **options)
        self.proxies.append(proxy)
        proxy.update(self.state())
        return proxy


def _port_ip(cidr: str) -> str:
    """The metadata port's address in the test subnet (.2: the gateway keeps .1)."""
    base, length = cidr.split("/")
    a, b, c, _d = base.split(".")
    return f"{a}.{b}.{c}.2/{length}"


@pytest.fixture
def env(server: RunningServer, api: httpx.Client) -> Iterator[Env]:
    suffix = uuid.uuid4().hex[:6]
    host = f"h-{suffix}"
    assert api.put(f"/hosts/{host}", json={"host": {"agent_version": "test"}}).status_code == 200
    app = MetadataApp(server.store, SECRET, Settings(vendor_data={"site": "lab"}), poll_interval=0.05)
    metadata = RunningMetadata.start(app)
    e = Env(api, server, metadata, host, suffix)
    try:
        yield e
    finally:
        for proxy in e.proxies:
            proxy.close()
        metadata.stop()
        for ns in e.namespaces:
            netns.remove(ns)


# -- cloud-init ------------------------------------------------------------------------------------


def test_cloud_init_reads_its_own_metadata_through_the_proxy(env: Env) -> None:
    require_cloud_init()
    net, _sub = env.network("10.81.0.0/24")
    inst = env.instance(net, "10.81.0.10", "web-1", metadata={"role": "web"})
    env.proxy(burst=200)  # the reader below does three whole boots' worth of reads
    run = subprocess.run(["ip", "netns", "exec", inst["netns"], DEBIAN_PYTHON, READER, "http://169.254.169.254"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    os_md = got["openstack"]
    assert os_md["metadata"]["uuid"] == inst["id"]
    assert os_md["metadata"]["hostname"] == "web-1.novalocal"
    assert os_md["metadata"]["public_keys"] == {"k1": KEY["key"]}
    assert os_md["metadata"]["meta"] == {"role": "web"}
    assert os_md["userdata"] == USER_DATA
    assert os_md["vendordata"] == {"site": "lab"}
    links = os_md["networkdata"]["links"]
    assert [link["ethernet_mac_address"] for link in links] == [inst["nets"][0]["mac_address"]]
    assert os_md["networkdata"]["networks"][0]["ip_address"] == "10.81.0.10"
    config = got["network_config"]["config"]  # cloud-init turned network_data.json into its own config
    assert config[0]["mac_address"] == inst["nets"][0]["mac_address"]
    assert config[0]["subnets"][0]["address"] == "10.81.0.10"
    assert os_md["ec2-metadata"]["instance-id"] == "i-" + inst["id"].replace("-", "")[:8]
    assert got["read_metadata_service_uuid"] == inst["id"]
    ec2 = got["ec2_metadata"]
    assert ec2["local-hostname"] == "web-1.novalocal" and ec2["local-ipv4"] == "10.81.0.10"
    assert ec2["public-keys"] == {"k1": [KEY["key"]]} or ec2["public-keys"]["k1"] in (KEY["key"], [KEY["key"]])
    assert ec2["placement"] == {"availability-zone": "nova"}
    assert got["ec2_userdata"] == USER_DATA


# -- identity ----------------------------------------------------------------------------------------


def test_spoofed_identity_headers_are_ignored(env: Env) -> None:
    net, _sub = env.network("10.82.0.0/24")
    me = env.instance(net, "10.82.0.10", "me")
    other = env.instance(net, "10.82.0.11", "other")
    env.proxy()
    forged = {
        "X-Forwarded-For": "10.82.0.11",
        "X-Instance-ID": other["id"],
        "X-Instance-ID-Signature": signing.sign(SECRET, other["id"]),  # even a correct signature of another
        "X-Tenant-ID": other["project_id"],
        "X-Network-ID": "forged",
        "X-OVN-Network-ID": "forged",
        "X_Instance_ID": other["id"],
        "X-Instance-Id-Signature-Extra": "x",
        "Forwarded": "for=10.82.0.11",
    }
    r = guest_request(me["netns"], "/openstack/latest/meta_data.json", headers=forged)
    assert r.status == 200 and r.json()["uuid"] == me["id"]
    r = guest_request(me["netns"], "/latest/meta-data/local-ipv4", headers=forged)
    assert r.body == b"10.82.0.10"


def test_a_proxy_with_the_wrong_secret_gets_403(env: Env) -> None:
    net, _sub = env.network("10.83.0.0/24")
    inst = env.instance(net, "10.83.0.10", "vm")
    env.proxy(secret="not-the-api-secret")
    r = guest_request(inst["netns"], "/openstack/latest/meta_data.json")
    assert r.status == 403 and r.body == b"Invalid proxy request signature."


def test_same_address_on_two_networks_gets_two_answers(env: Env) -> None:
    left, _ = env.network("10.84.0.0/24", "left")
    right, _ = env.network("10.84.0.0/24", "right")
    a = env.instance(left, "10.84.0.10", "on-left")
    b = env.instance(right, "10.84.0.10", "on-right")
    proxy = env.proxy()
    assert proxy.serving(left["id"]) and proxy.serving(right["id"])
    for inst in (a, b):
        r = guest_request(inst["netns"], "/openstack/latest/meta_data.json")
        assert r.status == 200 and r.json()["uuid"] == inst["id"], inst["name"]
        assert guest_request(inst["netns"], "/latest/meta-data/hostname").body == f"{inst['name']}.novalocal".encode()


def test_unknown_caller_is_a_404(env: Env) -> None:
    net, _sub = env.network("10.85.0.0/24")
    inst = env.instance(net, "10.85.0.10", "vm")
    env.proxy(miss_wait=0.2)
    sh("ip", "-n", inst["netns"], "addr", "add", "10.85.0.99/24", "dev", "eth0")
    r = guest_request(inst["netns"], "/openstack/latest/meta_data.json", source="10.85.0.99")
    assert r.status == 404 and f"Instance was not found on network {net['id']}".encode() in r.body


def test_a_caller_not_synced_yet_is_answered_once_the_state_knows_it(env: Env) -> None:
    """An instance that takes over a parked namespace can ask before the agent's state has its claim: the
    request waits for the next state instead of getting a 404."""
    net, _sub = env.network("10.89.0.0/24")
    first = env.instance(net, "10.89.0.10", "known")
    proxy = env.proxy(miss_wait=30)
    late = env.instance(net, "10.89.0.11", "late")  # not in the state the proxy has
    answers: list[Any] = []
    asking = threading.Thread(
        target=lambda: answers.append(guest_request(late["netns"], "/openstack/latest/meta_data.json"))
    )
    asking.start()
    deadline = time.monotonic() + 10
    while not proxy._relay._updates:  # the request is waiting for a newer state
        assert time.monotonic() < deadline and asking.is_alive(), answers
        time.sleep(0.01)
    proxy.update(env.state())
    asking.join(timeout=20)
    (r,) = answers
    assert r.status == 200 and r.json()["uuid"] == late["id"]
    assert guest_request(first["netns"], "/openstack/latest/meta_data.json").json()["uuid"] == first["id"]


def test_ipv6_link_local_callers_are_found_by_their_mac(env: Env) -> None:
    net, _sub = env.network("10.86.0.0/24")
    inst = env.instance(net, "10.86.0.10", "vm6")
    proxy = env.proxy(retry_interval=0.1)
    deadline = time.monotonic() + 10
    while True:  # the v6 listener needs the namespace's fe80::a9fe:a9fe, which is there; allow a retry tick
        try:
            r = guest_request(inst["netns"], "/openstack/latest/meta_data.json", address="fe80::a9fe:a9fe")
            break
        except OSError:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    assert r.status == 200 and r.json()["uuid"] == inst["id"]
    assert proxy.serving(net["id"])


# -- robustness --------------------------------------------------------------------------------------


def test_rate_limit_answers_429_with_retry_after(env: Env) -> None:
    net, _sub = env.network("10.87.0.0/24")
    inst = env.instance(net, "10.87.0.10", "chatty")
    calm = env.instance(net, "10.87.0.11", "calm")
    env.proxy(burst=5, rate=0.2)
    statuses = [guest_request(inst["netns"], "/latest/meta-data/instance-id").status for _ in range(5)]
    assert statuses == [200] * 5
    r = guest_request(inst["netns"], "/latest/meta-data/instance-id")
    assert r.status == 429 and int(r.headers["retry-after"]) >= 1
    # Per instance: the neighbour is not punished for it.
    assert guest_request(calm["netns"], "/latest/meta-data/instance-id").status == 200


def test_api_down_answers_503_with_retry_after(env: Env, tmp_path: Path) -> None:
    net, _sub = env.network("10.88.0.0/24")
    inst = env.instance(net, "10.88.0.10", "vm")
    env.proxy(upstream=f"unix:{tmp_path / 'nothing-listens-here.sock'}")
    r = guest_request(inst["netns"], "/openstack/latest/meta_data.json")
    assert r.status == 503 and r.headers["retry-after"].isdigit()


def test_unix_socket_upstream_and_keep_alive(env: Env, tmp_path: Path) -> None:
    from cloudnet.metadata import service

    net, _sub = env.network("10.89.0.0/24")
    inst = env.instance(net, "10.89.0.10", "vm")
    sock_path = tmp_path / "metadata.sock"
    app = MetadataApp(env.server.store, SECRET, Settings())
    unix = RunningMetadata.start(app, service.bind(service.parse_listen(f"unix:{sock_path}")))  # type: ignore[arg-type]
    try:
        env.proxy(upstream=f"unix:{sock_path}")
        with netns.entered(inst["netns"]):
            sock = socket.create_connection(("169.254.169.254", 80), timeout=10)
        conn = http.client.HTTPConnection("169.254.169.254", 80, timeout=10)
        conn.sock = sock
        for path in ("/openstack", "/openstack/latest/meta_data.json", "/latest/meta-data/instance-id"):
            conn.request("GET", path)  # one connection, several requests
            r = conn.getresponse()
            assert r.status == 200, path
            r.read()
        conn.request("HEAD", "/openstack/latest/user_data")
        r = conn.getresponse()
        assert r.status == 200 and int(r.getheader("content-length") or 0) == len(USER_DATA) and r.read() == b""
        conn.request("GET", "/latest/meta-data/instance-id")  # still in step after a HEAD
        assert conn.getresponse().read() == b"i-" + inst["id"].replace("-", "")[:8].encode()
        conn.close()
    finally:
        unix.stop()


def test_large_heads_and_bodies_are_read_whole(env: Env) -> None:
    net, _sub = env.network("10.90.0.0/24")
    inst = env.instance(net, "10.90.0.10", "vm")
    env.proxy()
    padding = {f"X-Padding-{i}": "a" * 1000 for i in range(30)}  # a 30 kB head: far beyond one recv(4096)
    r = guest_request(inst["netns"], "/openstack/latest/meta_data.json", headers=padding)
    assert r.status == 200 and r.json()["uuid"] == inst["id"]
    password = b"p" * 1000
    run = subprocess.run(
        ["ip", "netns", "exec", inst["netns"], "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
         "-H", "Transfer-Encoding: chunked", "-H", "Expect: 100-continue", "--data-binary", "@-",
         "http://169.254.169.254/openstack/latest/password"],
        input=password, capture_output=True, timeout=30,
    )  # fmt: skip
    assert run.stdout == b"200", run.stderr
    assert guest_request(inst["netns"], "/openstack/latest/password").body == password
    huge = {f"X-Padding-{i}": "a" * 1000 for i in range(70)}
    assert guest_request(inst["netns"], "/openstack/latest/meta_data.json", headers=huge).status == 431


def test_imdsv2_session_through_the_proxy(env: Env) -> None:
    net, _sub = env.network("10.91.0.0/24")
    inst = env.instance(net, "10.91.0.10", "v2only", metadata_tokens="required")
    env.proxy()
    assert guest_request(inst["netns"], "/latest/meta-data/instance-id").status == 401
    r = guest_request(inst["netns"], "/latest/api/token", "PUT",
                      headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})  # fmt: skip
    assert r.status == 200 and r.headers["x-aws-ec2-metadata-token-ttl-seconds"] == "60"
    token = r.body.decode()
    r = guest_request(inst["netns"], "/latest/meta-data/instance-id", headers={"X-aws-ec2-metadata-token": token})
    assert r.status == 200
    # A token request that went through a forwarding proxy in the guest is refused (AWS's SSRF hardening).
    forwarded = {"X-aws-ec2-metadata-token-ttl-seconds": "60", "X-Forwarded-For": "10.91.0.10"}
    r = guest_request(inst["netns"], "/latest/api/token", "PUT", headers=forwarded)
    assert r.status == 403
    # Also when the path is spelled with percent-escapes the API would decode.
    assert guest_request(inst["netns"], "/latest/api/%74oken", "PUT", headers=forwarded).status == 403


def test_serving_follows_the_state_and_the_namespaces(env: Env) -> None:
    net, _sub = env.network("10.92.0.0/24")
    other, other_sub = env.network("10.93.0.0/24")
    inst = env.instance(net, "10.92.0.10", "vm")
    # An instance whose network's namespace does not exist yet: not served, until the driver makes it.
    r = env.api.post("/instances", json={"instance": {"name": "later", "netns": "cnmd-none", "host": env.host,
                                                      "nets": [{"network": other["id"]}]}})  # fmt: skip
    assert r.status_code == 201, r.text
    later = r.json()["instance"]
    proxy = env.proxy(retry_interval=0.1)
    assert proxy.serving(net["id"]) and not proxy.serving(other["id"]) and not proxy.serving("no-such-network")
    env.metadata_ns(other, other_sub)
    deadline = time.monotonic() + 10
    while not proxy.serving(other["id"]):
        assert time.monotonic() < deadline, "the proxy did not pick up the new namespace"
        time.sleep(0.05)
    # The instance leaves the host: its network is no longer served, and nothing listens any more.
    assert env.api.delete(f"/instances/{inst['id']}").status_code == 204
    proxy.update(env.state())
    assert not proxy.serving(net["id"]) and proxy.serving(other["id"])
    with pytest.raises(OSError):
        guest_request(inst["netns"], "/openstack")
    assert later["id"]
    proxy.close()
    assert not proxy.serving(other["id"])


# -- with the real agent and dataplane --------------------------------------------------------------


def test_behind_the_agent_and_the_linux_dataplane(cloud: Cloud, server: RunningServer) -> None:
    """The proxy as the agent will run it: an observer of the desired state, in the namespaces the driver builds."""
    with agent_with_proxy(cloud, server) as proxy:
        net, _sub = cloud.network("dp", "10.94.0.0/24")
        inst = cloud.instance("dp-vm", [{"network": net["id"]}])
        cloud.wait_for(lambda: proxy.serving(net["id"]), what="the proxy in the driver's metadata namespace")
        read_as_cloud_init(inst)


def test_a_taken_over_parked_namespace_reads_its_metadata_at_once(cloud: Cloud, server: RunningServer) -> None:
    """--park-pool-devices: an instance created without a namespace takes over a parked one and boots at once;
    cloud-init's reader, started as the API answers, gets the instance's own metadata."""
    with agent_with_proxy(cloud, server, park=True):
        net, _sub = cloud.network("ho", "10.96.0.0/24")
        r = cloud.api.post("/port-pools/claim", json={"claim": {"host": cloud.host, "network_id": net["id"]}})
        assert r.status_code == 201, r.text
        ready = {"network_id": net["id"], "device_owner": "compute:cloudnet-pool"}

        def parked() -> bool:  # every ready port offered with its namespace, ACTIVE (the proxy serves)
            found = cloud.api.get("/ports", params=ready).json()["ports"]
            return bool(found) and all(p["status"] == "ACTIVE" and p["binding:vif_details"].get("prepared_netns")
                                       for p in found)  # fmt: skip

        cloud.wait_for(parked, what="parked ready ports")
        r = cloud.api.post("/instances", json={"instance": {"name": "ho-vm", "hostname": "ho-vm", "host": cloud.host,
                                                            "nets": [{"network": net["id"]}]}})  # fmt: skip
        assert r.status_code == 201, r.text
        inst = r.json()["instance"]
        assert inst["status"] == "ACTIVE" and names.is_managed_ns(cloud.host, inst["netns"])
        read_as_cloud_init(inst)


def test_slow_guests_and_a_silent_api_are_cut_off(env: Env) -> None:
    net, _sub = env.network("10.95.0.0/24")
    inst = env.instance(net, "10.95.0.10", "vm")
    silent = socket.socket()  # accepts connections (backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    try:
        env.proxy(upstream=f"http://127.0.0.1:{silent.getsockname()[1]}", retry_interval=0.1, idle_timeout=0.5,
                  answer_timeout=0.5)  # fmt: skip
        started = time.monotonic()
        r = guest_request(inst["netns"], "/openstack/latest/meta_data.json")
        assert r.status == 503 and r.headers["retry-after"].isdigit()
        assert time.monotonic() - started < 5
        # A guest that starts a request and never finishes it is disconnected.
        with netns.entered(inst["netns"]):
            slow = socket.create_connection(("169.254.169.254", 80), timeout=10)
        slow.sendall(b"GET /openstack HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        # Closed by the proxy, no answer (or dropped with a reset, the HTTP server's way with a request it gave
        # up on: no answer either); a proxy still waiting would let recv time out.
        with contextlib.suppress(ConnectionResetError):
            assert slow.recv(1024) == b""
        assert time.monotonic() - started < 5
        slow.close()
    finally:
        silent.close()
