"""The site of the OVN VM tests (test_vm_taps.py, test_vm_guard.py, test_vm_guest.py; root): `cloudnet serve` and
`cloudnet agent --dataplane ovn` as processes on a sandbox chassis (userspace datapath, in a namespace of its own;
restart_rig.Rig, so that the agent can be killed -9), a network with IPv4 and SLAAC IPv6 behind a router (module
fixtures `vm_rig`, `vm_api`, `vm_net`, through tests/ovn/conftest.py), and API helpers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.ovn.restart_rig import Rig
from tests.support.ovn import ovn_sandbox

MTU = 1400


@pytest.fixture(scope="module")
def vm_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    tmp = tmp_path_factory.mktemp("vm-rig")
    (tmp / "state").mkdir()
    with ovn_sandbox() as sandbox:
        sandbox.add_chassis()
        rig = Rig(sandbox, tmp / "state", tmp)
        try:
            rig.start_server()
            rig.start_agent()
            yield rig
        finally:
            rig.stop()


@pytest.fixture(scope="module")
def vm_api(vm_rig: Rig) -> Iterator[httpx.Client]:
    """An admin client of the rig's API, once the agent has registered."""
    rig = vm_rig
    with httpx.Client(base_url=rig.url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=30) as api:
        deadline = time.monotonic() + 30
        while api.get(f"/hosts/{rig.host}").status_code != 200:
            assert time.monotonic() < deadline, f"the agent did not register: {rig.log('agent')}"
            time.sleep(0.05)  # (readiness: the agent's first heartbeat)
        yield api


@pytest.fixture(scope="module")
def vm_net(vm_api: httpx.Client) -> dict[str, Any]:
    """A network (MTU 1400) with an IPv4 subnet (DNS server, a host route) and an IPv6 SLAAC one behind a router."""
    api = vm_api
    network = create(api, "networks", "network", {"name": "vmnet", "mtu": MTU})
    v4 = create(api, "subnets", "subnet", {"network_id": network["id"], "cidr": "10.81.0.0/24",
                                            "dns_nameservers": ["192.0.2.53"],
                                            "host_routes": [{"destination": "10.99.0.0/16",
                                                             "nexthop": "10.81.0.254"}]})  # fmt: skip
    v6 = create(api, "subnets", "subnet", {"network_id": network["id"], "cidr": "fd00:81::/64", "ip_version": 6,
                                            "ipv6_ra_mode": "slaac", "ipv6_address_mode": "slaac",
                                            "dns_nameservers": ["fd00:53::53"]})  # fmt: skip
    router = create(api, "routers", "router", {"name": "vmr"})
    for s in (v4, v6):
        r = api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": s["id"]})
        assert r.status_code == 200, r.text
    return {**network, "v4": v4, "v6": v6}


def create(api: httpx.Client, collection: str, member: str, body: dict[str, Any]) -> dict[str, Any]:
    r = api.post(f"/{collection}", json={member: body})
    assert r.status_code == 201, r.text
    return dict(r.json()[member])


def until(check: Any, what: str, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return found


def launch(api: httpx.Client, rig: Rig, name: str, nets: list[dict[str, Any]]) -> dict[str, Any]:
    inst = create(api, "instances", "instance", {"name": name, "kind": "vm", "host": rig.host, "nets": nets})
    return dict(until(lambda: active(api, inst["id"]), f"{name} ACTIVE"))


def active(api: httpx.Client, instance_id: str) -> dict[str, Any] | None:
    inst = api.get(f"/instances/{instance_id}").json()["instance"]
    return inst if inst["status"] == "ACTIVE" else None


def port_of(api: httpx.Client, port_id: str) -> dict[str, Any]:
    return dict(api.get(f"/ports/{port_id}").json()["port"])


def v4(port: dict[str, Any]) -> str:
    return next(str(f["ip_address"]) for f in port["fixed_ips"] if "." in f["ip_address"])


def v6(port: dict[str, Any]) -> str:
    return next(str(f["ip_address"]) for f in port["fixed_ips"] if ":" in f["ip_address"])


def metadata_ip(api: httpx.Client, network_id: str) -> str:
    r = api.get("/ports", params={"network_id": network_id, "device_owner": "network:distributed"})
    (meta,) = r.json()["ports"]
    return v4(meta)
