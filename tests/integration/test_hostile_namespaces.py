"""Issue 15, case 1: instance namespaces that are not the instance's to have, against the real agent and kernel.

Each poisoned instance ends in ERROR with the reason in `instance show` (its port `binding_failed`), nothing it
named is touched, and an honest instance created after all of them still goes ACTIVE and reads its metadata.

The process runs in a throwaway namespace of the test's own (tests/support/process_netns.py), so "the agent's own
namespace" that one instance names is that throwaway namespace, never the machine's.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudnet.config import ServerConfig
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.kernel.ns_guard import InstanceNamespaces, NamespaceRefused
from cloudnet.dataplane.linux import names
from cloudnet.dataplane.linux.driver import LinuxDataplane
from tests.support.api import check_error
from tests.support.cloud import Cloud, ns_run
from tests.support.guest_metadata import agent_with_proxy, read_as_cloud_init
from tests.support.process_netns import process_in_throwaway_netns
from tests.support.server import RunningServer

TOKENS = {
    "admin": {"project_id": "ops", "role": "admin"},  # (the agent's and the `api` fixture's token)
    "svc-token": {"project_id": "services", "role": "service"},
    "bob-token": {"project_id": "bob", "role": "member"},
}


@pytest.fixture(autouse=True)
def own_process_ns() -> Iterator[str]:
    """Before the server and the agent start: their threads start in the throwaway namespace."""
    with process_in_throwaway_netns() as name:
        yield name


@pytest.fixture
def tokens(server_config: ServerConfig) -> dict[str, Any]:
    server_config.tokens_file.write_text(json.dumps({"tokens": TOKENS}))
    return TOKENS


@pytest.fixture
def clients(server: RunningServer, tokens: dict[str, Any]) -> Iterator[dict[str, httpx.Client]]:
    made = {who: httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": token}, timeout=30)
            for who, token in (("svc", "svc-token"), ("bob", "bob-token"))}  # fmt: skip
    yield made
    for client in made.values():
        client.close()


def links_of(ns: str) -> list[str]:
    out = ns_run(ns, "ip", "-o", "link", "show", check=True).stdout
    return sorted(line.split(": ")[1].split("@")[0] for line in out.splitlines())


def post_instance(client: httpx.Client, cloud: Cloud, name: str, net_id: str, ns: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "host": cloud.host, "nets": [{"network": net_id}]}
    if ns is not None:
        body["netns"] = ns
    r = client.post("/instances", json={"instance": body})
    assert r.status_code == 201, r.text
    return dict(r.json()["instance"])


def wait_error(cloud: Cloud, inst: dict[str, Any], why: str) -> dict[str, Any]:
    def shown() -> dict[str, Any]:
        return dict(cloud.api.get(f"/instances/{inst['id']}").json()["instance"])

    try:
        cloud.wait_for(lambda: shown()["status"] == "ERROR", what=f"instance {inst['name']} in ERROR")
    except AssertionError:
        raise AssertionError(f"expected ERROR ({why}): {shown()}") from None
    got = shown()
    assert why in (got["status_reason"] or ""), got
    port = cloud.api.get(f"/ports/{got['nets'][0]['port_id']}").json()["port"]
    assert port["binding:vif_type"] == "binding_failed" and why in port["binding:vif_details"]["reason"], port
    return got


def test_poisoned_namespaces_fail_alone(
    cloud: Cloud, server: RunningServer, clients: dict[str, httpx.Client], own_process_ns: str, tmp_path: Path
) -> None:
    svc = clients["svc"]  # the runtime that starts instances (as Nova/Zun to Neutron) may name namespaces
    with agent_with_proxy(cloud, server) as proxy:
        net, _sub = cloud.network("hostile", "10.95.0.0/24", shared=True)  # (the service project plugs into it)
        first = cloud.namespace("first")
        honest = cloud.wait_active(post_instance(svc, cloud, "first", net["id"], first)["id"])
        honest_link = ns_run(first, "ip", "-o", "link", "show", "eth0", check=True).stdout
        meta_ns = names.metadata_ns(cloud.host, net["id"])
        assert netns.exists(meta_ns)

        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        link = tmp_path / "link"
        link.symlink_to(netns.path_of(first))
        bound = tmp_path / "bound"  # cloudnet's metadata namespace, mounted under another name
        bound.touch()
        subprocess.run(["mount", "--bind", str(netns.path_of(meta_ns)), str(bound)], check=True)
        try:
            poisoned = {
                f"/proc/{os.getpid()}/ns/net": "the agent's own network namespace",
                str(netns.path_of(first)): f"network namespace of instance {honest['id']}",  # another's, as a path
                str(link): "symbolic link",
                str(bound): "a namespace cloudnet made",
                "/etc/hostname": "is not a namespace",
                str(fifo): "FIFO",
            }
            # The very spelling another instance of the host uses is refused at once; others are the agent's to find.
            r = svc.post("/instances", json={"instance": {"name": "same", "host": cloud.host, "netns": first}})
            check_error(r, 409, "NetnsInUse", "in use by another instance")
            made = {post_instance(svc, cloud, f"bad{i}", net["id"], ns)["id"]: why
                    for i, (ns, why) in enumerate(poisoned.items())}  # fmt: skip
            for iid, why in made.items():
                wait_error(cloud, {"id": iid, "name": iid}, why)
            # Created after all of them: ACTIVE, and it reads its own metadata.
            after = cloud.wait_active(post_instance(svc, cloud, "after", net["id"], None)["id"])
            cloud.wait_for(lambda: proxy.serving(net["id"]), what="the metadata proxy")
            read_as_cloud_init(after)
        finally:
            subprocess.run(["umount", str(bound)], check=False)
        # Nothing the poisoned ones named was touched: the first instance kept its own NIC, the process's
        # namespace (the agent's own) holds only `lo`, and the host reports each failure.
        assert ns_run(first, "ip", "-o", "link", "show", "eth0", check=True).stdout == honest_link
        assert links_of(own_process_ns) == ["lo"]
        failures = cloud.api.get(f"/hosts/{cloud.host}").json()["host"]["report"]["failures"]
        assert {f["object"] for f in failures} >= {f"instance:{iid}" for iid in made}
        # An instance deleted takes its failure with it.
        some = next(iter(made))
        assert cloud.api.delete(f"/instances/{some}").status_code == 204
        cloud.wait_for(lambda: f"instance:{some}" not in {
            f["object"] for f in cloud.api.get(f"/hosts/{cloud.host}").json()["host"]["report"]["failures"]
        }, what="the failure of a deleted instance forgotten")  # fmt: skip


def test_a_hung_step_holds_only_its_instance(cloud: Cloud, server: RunningServer) -> None:
    """An instance whose plug hangs (as a FIFO once made it) is timed out and failed; the host goes on."""
    release = threading.Event()
    dataplane = LinuxDataplane(cloud.host, step_timeout=1.0)
    plug = dataplane.ports._plug  # type: ignore[attr-defined]
    stuck: list[str] = []

    def hanging_plug(host: Any, links: Any, inst: dict[str, Any], *rest: Any) -> None:
        if inst["name"] == "stuck":
            stuck.append(inst["id"])
            release.wait(60)  # the fault injected: this object's kernel work never returns
        plug(host, links, inst, *rest)

    dataplane.ports._plug = hanging_plug  # type: ignore[attr-defined]
    try:
        with agent_with_proxy(cloud, server, dataplane=dataplane):
            net, _sub = cloud.network("hung", "10.96.0.0/24")
            inst = cloud.create("instances", "instance", {"name": "stuck", "host": cloud.host,
                                                          "nets": [{"network": net["id"]}]})  # fmt: skip
            wait_error(cloud, inst, "timed out after 1 s")
            after = cloud.instance("after", [{"network": net["id"]}])
            assert after["status"] == "ACTIVE"
            # The object's next attempt (after its backoff) goes through; with room for a busy machine, as the
            # bound that caught the hang (1 s) is tighter than a real plug may take there.
            dataplane.steps.timeout = 20.0
            release.set()
            # (its backoff grows with every failed attempt, one already under way at the release too: the wait
            # follows the object's next retry as the agent schedules it)
            key = f"instance:{inst['id']}"
            deadline, limit = time.monotonic() + 30, time.monotonic() + 180  # (a plug that keeps failing: failed)
            while (now := cloud.api.get(f"/instances/{inst['id']}").json()["instance"])["status"] != "ACTIVE":
                failure = dataplane.steps.failed(key)
                if failure is not None:
                    deadline = max(deadline, time.monotonic() + failure.retry_at - dataplane.steps.clock() + 30)
                assert time.monotonic() < min(deadline, limit), f"not ACTIVE 30 s after its retry: {now}"
                time.sleep(0.05)
    finally:
        release.set()


def test_only_admin_and_the_service_role_name_namespaces(cloud: Cloud, clients: dict[str, httpx.Client]) -> None:
    assert cloud.api.put(f"/hosts/{cloud.host}", json={"host": {"agent_version": "test"}}).status_code == 200
    body = {"name": "x", "host": cloud.host, "netns": "some-netns"}
    check_error(clients["bob"].post("/instances", json={"instance": body}), 403, "PolicyNotAuthorized", "service role")
    r = clients["bob"].post("/instances", json={"instance": {"name": "x"}})  # a namespace cloudnet makes
    assert r.status_code == 201 and r.json()["instance"]["netns"].startswith(names.MANAGED_NS_PREFIX), r.text
    for i, client in enumerate((clients["svc"], cloud.api)):
        r = client.post("/instances", json={"instance": {**body, "netns": f"some-netns-{i}"}})
        assert r.status_code == 201 and r.json()["instance"]["netns"] == f"some-netns-{i}", r.text


def test_the_guard_refuses_the_hosts_namespace(own_process_ns: str) -> None:
    """PID 1's namespace is the machine's own: checked at the guard itself, with no agent that could plug into it."""
    guard = InstanceNamespaces("h-guard", [])
    # (Where PID 1 is out of this process's reach, as in some sandboxes, the refusal says it cannot be opened.)
    with pytest.raises(NamespaceRefused, match=r"host's network namespace \(PID 1's\)|cannot be opened"):
        guard.open({"id": "i1", "netns": "/proc/1/ns/net"})
    with pytest.raises(NamespaceRefused, match="agent's own"):
        guard.open({"id": "i2", "netns": f"/proc/{os.getpid()}/ns/net"})
    with pytest.raises(NamespaceRefused, match="symbolic link"):
        guard.open({"id": "i3", "netns": "/proc/self/ns/net"})  # (/proc/self is a link: only /proc/<pid> is read)
