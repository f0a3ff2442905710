"""SR-IOV reservations on the control plane: validation, lowest free VF, binding profile, release, the
host view, and concurrency (parallel reserves never share a VF) on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from cloudnet.errors import CloudnetError
from cloudnet.services.ports import sriov
from cloudnet.store.db import Store
from tests.support.api import check_error, create
from tests.support.server import RunningServer
from tests.support.sriov_cloud import bind, direct_port, register_host, release, vlan_network
from tests.support.sriov_tree import add_pf


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    add_pf(root, "pf0", ["pf0v0", "pf0v1", None, "pf0v3"])
    add_pf(root, "pf1", ["pf1v0"], bus=0x0B)
    return root


def _error(exc: pytest.ExceptionInfo[CloudnetError]) -> tuple[int, str]:
    return exc.value.status, exc.value.message


def test_reserve_binds_lowest_free_vf_and_release_keeps_port(api: httpx.Client, store: Store, sysfs: Path) -> None:
    register_host(api, "h1", sysfs, {"physnet2": ["pf0"], "physnet3": ["pf1"]}, {"pf0": {"0000:0a:00.2"}})
    net = vlan_network(api, vlan=100)
    p1, p2, p3 = (direct_port(api, net) for _ in range(3))
    b1 = bind(store, p1["id"], "h1")
    assert b1 == {
        "binding:host_id": "h1",
        "binding:profile": {"pci_vendor_info": "8086:154c", "pci_slot": "0000:0a:00.1", "physical_network": "physnet2"},
        "binding:vif_type": "hw_veb",
        "binding:vif_details": {"vlan": "100"},
    }
    shown = api.get(f"/ports/{p1['id']}").json()["port"]
    assert {k: shown[k] for k in b1} == b1
    # VF 1 is excluded, VF 2 has no netdev on the host (in use outside cloudnet): VF 3 is next.
    assert bind(store, p2["id"], "h1")["binding:profile"]["pci_slot"] == "0000:0a:00.4"
    with pytest.raises(CloudnetError) as exc:
        bind(store, p3["id"], "h1")
    assert _error(exc) == (409, "No free VF for physical network physnet2 on host h1")
    host = api.get("/hosts/h1").json()["host"]["sriov"]
    states = {vf["pci_slot"]: vf["state"] for pf in host["pfs"] for vf in pf["vfs"]}
    assert states == {"0000:0a:00.1": "reserved", "0000:0a:00.2": "excluded", "0000:0a:00.3": "in-use",
                      "0000:0a:00.4": "reserved", "0000:0b:00.1": "free"}  # fmt: skip
    assert host["physical_networks"] == {"physnet2": ["pf0"], "physnet3": ["pf1"]}
    assert release(store, p1["id"]) is True
    kept = api.get(f"/ports/{p1['id']}").json()["port"]
    assert kept["binding:profile"] == {"physical_network": "physnet2"}
    assert (kept["binding:host_id"], kept["device_id"], kept["binding:vif_type"]) == ("", "", "unbound")
    assert bind(store, p3["id"], "h1")["binding:profile"]["pci_slot"] == "0000:0a:00.1"  # freed VF reused
    with store.read() as conn:
        assert [r["pci_slot"] for r in sriov.desired(conn, "h1")] == ["0000:0a:00.1", "0000:0a:00.4"]
        assert sriov.desired(conn, "h1")[0]["vlan"] == 100


def test_flat_network_vlan_zero(api: httpx.Client, store: Store, sysfs: Path) -> None:
    register_host(api, "h1", sysfs, {"physnet3": ["pf1"]})
    port = direct_port(api, vlan_network(api, "physnet3", vlan=0))
    assert bind(store, port["id"], "h1")["binding:vif_details"] == {"vlan": "0"}


def test_validation_errors(api: httpx.Client, store: Store, sysfs: Path) -> None:
    register_host(api, "h1", sysfs, {"physnet2": ["pf0"]})
    local = create(api, "networks", "network", name="local")
    with pytest.raises(CloudnetError) as exc:
        bind(store, direct_port(api, local["id"])["id"], "h1")
    status, message = _error(exc)
    assert status == 400 and "no provider:physical_network" in message
    net = vlan_network(api)
    with_sg = create(api, "ports", "port", network_id=net, **{"binding:vnic_type": "direct"})  # default group
    with pytest.raises(CloudnetError) as exc:
        bind(store, with_sg["id"], "h1")
    status, message = _error(exc)
    assert status == 400 and "security groups, which are not enforced on SR-IOV VFs" in message
    other = vlan_network(api, "physnet9", vlan=5, cidr="10.8.0.0/24")
    with pytest.raises(CloudnetError) as exc:
        bind(store, direct_port(api, other)["id"], "h1")
    assert _error(exc) == (409, "No free VF for physical network physnet9 on host h1")
    normal = create(api, "ports", "port", network_id=net)
    with pytest.raises(CloudnetError) as exc:
        bind(store, normal["id"], "h1")
    assert _error(exc)[0] == 400


def test_parallel_reserves_never_share_a_vf(api: httpx.Client, store: Store, tmp_path: Path) -> None:
    root = tmp_path / "big"
    add_pf(root, "pf0", [f"v{i}" for i in range(12)])
    register_host(api, "h1", root, {"physnet2": ["pf0"]})
    net = vlan_network(api)
    port_ids = [direct_port(api, net)["id"] for _ in range(16)]
    got: dict[str, str] = {}
    failed: list[tuple[int, str]] = []
    lock = threading.Lock()

    def one(pid: str) -> None:
        try:
            slot = bind(store, pid, "h1")["binding:profile"]["pci_slot"]
            with lock:
                got[pid] = slot
        except CloudnetError as exc:
            with lock:
                failed.append((exc.status, exc.message))

    threads = [threading.Thread(target=one, args=(pid,)) for pid in port_ids]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(got) == 12 and len(set(got.values())) == 12
    assert failed == [(409, "No free VF for physical network physnet2 on host h1")] * 4


def test_parallel_instance_creates_never_share_a_vf(api: httpx.Client, server: RunningServer, tmp_path: Path) -> None:
    """Through POST /v2.0/instances, as a runtime would: 10 instances, 6 VFs."""
    root = tmp_path / "inst"
    add_pf(root, "pf0", [f"v{i}" for i in range(6)])
    register_host(api, "h1", root, {"physnet2": ["pf0"]})
    net = vlan_network(api)
    port_ids = [direct_port(api, net)["id"] for _ in range(10)]

    def create_instance(i: int) -> httpx.Response:
        with httpx.Client(base_url=server.url + "/v2.0", timeout=30) as c:
            body = {"name": f"i{i}", "host": "h1", "netns": f"ns{i}", "nets": [{"port": port_ids[i]}]}
            return c.post("/instances", json={"instance": body})

    with ThreadPoolExecutor(max_workers=10) as pool:
        answers = list(pool.map(create_instance, range(10)))
    ok = [r for r in answers if r.status_code == 201]
    assert len(ok) == 6, [r.text for r in answers if r.status_code != 201]
    assert all(r.status_code == 409 and "No free VF" in r.text for r in answers if r.status_code != 201)
    slots = set()
    for r in ok:
        port = api.get(f"/ports/{r.json()['instance']['nets'][0]['port_id']}").json()["port"]
        assert port["binding:vif_type"] == "hw_veb" and port["binding:host_id"] == "h1"
        assert port["device_id"] == r.json()["instance"]["id"]
        slots.add(port["binding:profile"]["pci_slot"])
    assert len(slots) == 6
    # Deleting one frees its VF and keeps the port, unbound.
    victim = ok[0].json()["instance"]
    assert api.delete(f"/instances/{victim['id']}").status_code == 204
    kept = api.get(f"/ports/{victim['nets'][0]['port_id']}").json()["port"]
    assert kept["device_id"] == "" and kept["binding:host_id"] == "" and "pci_slot" not in kept["binding:profile"]


@pytest.mark.ovn_dataplane
def test_on_ovn_a_direct_port_fails_to_bind_and_says_why(api: httpx.Client, sysfs: Path) -> None:
    register_host(api, "h1", sysfs, {"physnet2": ["pf0"]})  # (free VFs reported: only the dataplane refuses)
    port = direct_port(api, vlan_network(api))
    body = {"name": "vf", "host": "h1", "netns": "ns-vf", "nets": [{"port": port["id"]}]}
    check_error(api.post("/instances", json={"instance": body}), 409, "PortBindingFailed",
                "binding:vnic_type direct (SR-IOV) is not supported on the OVN dataplane")  # fmt: skip
    shown = api.get(f"/ports/{port['id']}").json()["port"]
    assert (shown["binding:host_id"], shown["device_id"], shown["binding:vif_type"]) == ("", "", "unbound")
    states = {vf["state"] for pf in api.get("/hosts/h1").json()["host"]["sriov"]["pfs"] for vf in pf["vfs"]}
    assert "free" in states and "reserved" not in states  # no VF held for it
    assert api.get("/instances").json()["instances"] == []
