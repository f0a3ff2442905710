"""Restarts on OVN (root): during churn of networks, subnets, ports, instances, routers, security groups, forwards and
floating IPs, the server (`cloudnet serve --dataplane ovn`), the chassis' agent (`cloudnet agent --dataplane ovn`),
ovn-northd and ovn-controller are each killed -9 in turn and restarted; after each, NB equals what the database
implies row by row, and SB, br-int and the chassis' namespaces what the host's desired state implies
(tests/ovn/converged.py), though NB was changed behind the server's back and ports and namespaces were leaked on the
chassis while they were away. The seed is printed; CHURN_SEED=<n> replays a run."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from cloudnet.store.db import Store
from tests.ovn.converged import chassis_differences, nb_differences
from tests.ovn.restart_rig import Rig
from tests.support.churn import Churn, Json
from tests.support.ovn import OvnSandbox, ovn_sandbox

VICTIMS = ("server", "agent", "ovn-northd", "ovn-controller")
OPS_BEFORE, OPS_AWAY, OPS_AFTER = 20, 8, 8  # per victim: before the kill, while it is away, after its restart
MAX_GROUPS, MAX_PORTS = 3, 4


@pytest.fixture(scope="module")
def ovn() -> Iterator[OvnSandbox]:
    with ovn_sandbox() as sandbox:
        sandbox.add_chassis()
        yield sandbox


@pytest.fixture
def rig(ovn: OvnSandbox, tmp_path: Path) -> Iterator[Rig]:
    (tmp_path / "state").mkdir()
    running = Rig(ovn, tmp_path / "state", tmp_path)
    try:
        running.start_server()
        running.start_agent()
        deadline = time.monotonic() + 30
        host = f"{running.url}/v2.0/hosts/{running.host}"
        while httpx.get(host, headers={"X-Auth-Token": "admin"}).status_code != 200:
            assert time.monotonic() < deadline, f"the agent did not register: {running.log('agent')}"
            time.sleep(0.05)  # (readiness: the agent's first heartbeat)
        yield running
    finally:
        running.stop()


class OvnChurn(Churn):
    """The Linux churn's operations plus what OVN realises as NB rows of their own: security groups and their rules
    (Port_Group, ACL, Address_Set), ports without an instance (with allowed address pairs), and floating IPs."""

    def groups(self) -> list[Json]:
        return [g for g in self.list("security-groups", key="security_groups") if g["name"] != "default"]

    def sg_create(self) -> None:
        if len(self.groups()) >= MAX_GROUPS:
            return self.sg_delete()
        self.counter += 1
        self.call("sg create", "POST", "/security-groups", {"security_group": {"name": f"sg{self.counter}"}})
        return None

    def sg_delete(self) -> None:
        if group := self.pick(self.groups()):
            self.call("sg delete", "DELETE", f"/security-groups/{group['id']}")

    def rule_create(self) -> None:
        if group := self.pick(self.groups()):
            first = self.rng.randint(1, 60000)
            rule: Json = {"security_group_id": group["id"], "direction": self.rng.choice(("ingress", "egress")),
                          "ethertype": "IPv4", "protocol": self.rng.choice(("tcp", "udp")), "port_range_min": first,
                          "port_range_max": first + self.rng.randint(0, 20)}  # fmt: skip
            if self.rng.random() < 0.5:
                rule["remote_group_id"] = self.pick(self.groups())["id"]
            else:
                rule["remote_ip_prefix"] = f"203.0.113.{self.rng.randrange(0, 256, 16)}/28"
            self.call("rule create", "POST", "/security-group-rules", {"security_group_rule": rule})

    def rule_delete(self) -> None:
        rules = [r for g in self.groups() for r in g["security_group_rules"]]
        if rule := self.pick(rules):
            self.call("rule delete", "DELETE", f"/security-group-rules/{rule['id']}")

    def port_groups(self) -> None:
        ports = [p for p in self.list("ports") if not p["device_owner"].startswith("network:")]
        if port := self.pick(ports):
            chosen = [g["id"] for g in self.groups() if self.rng.random() < 0.5]
            self.call("port groups", "PUT", f"/ports/{port['id']}", {"port": {"security_groups": chosen}})

    def port_create(self) -> None:
        nets = [n for n in self.networks() if n["subnets"]]
        if len(self.list("ports", device_owner="")) >= MAX_PORTS:
            return self.port_delete()
        if net := self.pick(nets):
            body: Json = {"network_id": net["id"], "name": "loose"}
            if self.rng.random() < 0.5:
                body["allowed_address_pairs"] = [{"ip_address": f"10.250.{self.rng.randint(0, 255)}.0/24"}]
            else:
                body["port_security_enabled"] = self.rng.random() < 0.5
            self.call("port create", "POST", "/ports", {"port": body})
        return None

    def port_delete(self) -> None:
        if port := self.pick(self.list("ports", device_owner="")):
            self.call("port delete", "DELETE", f"/ports/{port['id']}")

    def fip_create(self) -> None:
        ports = [p for p in self.list("ports", device_owner="") if p["fixed_ips"]]
        if port := self.pick(ports):
            body = {"floating_network_id": self.pub["id"], "port_id": port["id"]}
            self.call("fip create", "POST", "/floatingips", {"floatingip": body})

    def fip_delete(self) -> None:
        if fip := self.pick(self.list("floatingips")):
            self.call("fip delete", "DELETE", f"/floatingips/{fip['id']}")

    WEIGHTS: dict[Callable[..., None], int] = {**Churn.WEIGHTS, sg_create: 3, sg_delete: 1, rule_create: 4,
                                               rule_delete: 2, port_groups: 3, port_create: 3, port_delete: 2,
                                               fip_create: 3, fip_delete: 2}  # fmt: skip


def _public(api: httpx.Client) -> Json:
    body = {"name": "pub", "router:external": True, "provider:network_type": "flat",
            "provider:physical_network": "physnet1",
            "cloudnet:routes": ["198.51.100.0/24", "2001:db8:100::/64"]}  # fmt: skip
    pub = api.post("/networks", json={"network": body}).json()["network"]
    for cidr, gw in (("192.0.2.0/24", "192.0.2.1"), ("2001:db8:1::/64", "2001:db8:1::1")):
        r = api.post("/subnets", json={"subnet": {"network_id": pub["id"], "cidr": cidr, "gateway_ip": gw}})
        assert r.status_code == 201, r.text
    return dict(pub)


def _site(churn: OvnChurn) -> None:
    """A network behind a router with a gateway, a security group and an instance, so that forwards, floating IPs
    and group changes have something to work on from the first operation on (made through the churn: it learns
    their ids, and may take them apart later)."""
    net = churn.call("network create", "POST", "/networks", {"network": {"name": "base"}}).json()["network"]
    router = {"name": "base", "external_gateway_info": {"network_id": churn.pub["id"]}}
    router = churn.call("router create", "POST", "/routers", {"router": router}).json()["router"]
    for cidr in ("10.5.0.0/24", "fd05::/64"):
        sub = {"network_id": net["id"], "cidr": cidr}
        sub = churn.call("subnet create", "POST", "/subnets", {"subnet": sub}).json()["subnet"]
        path = f"/routers/{router['id']}/add_router_interface"
        r = churn.call("router attach", "PUT", path, {"subnet_id": sub["id"]})
        assert r.status_code == 200, r.text
    group = churn.call("sg create", "POST", "/security-groups", {"security_group": {"name": "base"}})
    rule = {"security_group_id": group.json()["security_group"]["id"], "direction": "ingress", "protocol": "tcp",
            "port_range_min": 22, "port_range_max": 22, "remote_ip_prefix": "203.0.113.0/24"}  # fmt: skip
    assert churn.call("rule create", "POST", "/security-group-rules", {"security_group_rule": rule}).status_code == 201
    body = {"name": "base", "host": churn.host, "nets": [{"network": net["id"]}]}
    assert churn.call("instance create", "POST", "/instances", {"instance": body}).status_code == 201


def _differences(rig: Rig, api: httpx.Client, store: Store) -> list[str]:
    found = [f"instance {i['id']} {i['status']}" for i in api.get("/instances").json()["instances"]
             if i["status"] != "ACTIVE"]  # fmt: skip
    found += nb_differences(rig.ovn, store, [])
    state = api.get(f"/hosts/{rig.host}/state").json()
    return found + chassis_differences(rig.ovn, rig.chassis, state)


def _converged(rig: Rig, api: httpx.Client, store: Store, what: str, timeout: float = 45.0) -> float:
    """Seconds until NB, SB and the chassis equal what the database implies (polled); fails with the differences."""
    t0 = time.monotonic()
    while found := _differences(rig, api, store):
        if time.monotonic() - t0 > timeout:
            logs = "\n".join(f"--- {n}:\n{rig.log(n)}" for n in ("server", "agent"))
            raise AssertionError(f"{what}: not converged in {timeout:g} s: {found[:20]}\n{logs}")
        time.sleep(0.2)
    return time.monotonic() - t0


def test_killing_each_process_during_churn_leaves_nb_and_sb_as_the_database_implies(rig: Rig) -> None:
    seed = int(os.environ.get("CHURN_SEED") or random.SystemRandom().randrange(1 << 30))
    print(f"churn seed {seed} (CHURN_SEED={seed} replays it)")
    store = Store(rig.db_url)
    with httpx.Client(base_url=rig.url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=30) as api:
        churn = OvnChurn(api, rig.host, _public(api), random.Random(seed))
        _site(churn)
        _converged(rig, api, store, "at start")
        for victim in VICTIMS:
            for _ in range(OPS_BEFORE):
                churn.step()
            rig.kill(victim)  # (the server's NB writer and the agent are still at work on what came before)
            rig.tamper(victim)
            if victim != "server":  # (no API without it)
                for _ in range(OPS_AWAY):
                    churn.step()
            rig.restart(victim)
            for _ in range(OPS_AFTER):
                churn.step()
            took = _converged(rig, api, store, f"seed {seed}, {victim} killed -9 and restarted")
            print(f"{victim}: converged {took:.1f} s after the churn")
            if victim == "server":  # (its first pass after the start repaired what was done behind its back)
                assert "ls/ghost" in rig.log("server"), rig.log("server")
        print(f"outcomes: {sorted(churn.outcomes.items())}")
        done = sum(n for k, n in churn.outcomes.items() if k.endswith((" 200", " 201", " 204")))
        assert done >= 40, "the churn did too little to mean anything"
    store.dispose()
