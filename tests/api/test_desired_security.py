"""The filtering part of a host's desired state (the contract with the dataplane's firewall), through the live
API on both backends: each port's port security, groups and address pairs; the groups with their rules as the
agent applies them; remote groups' addresses across hosts; an event for every change that alters any of it;
ready pool ports following their network's port security."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudnet.config import ServerConfig
from tests.support.api import create, create_network, create_subnet, error, pool_config

Json = dict[str, Any]


@pytest.fixture
def server_config(tmp_path: Path) -> ServerConfig:
    return pool_config(tmp_path)


@pytest.fixture
def net(api: httpx.Client) -> Json:
    for host in ("node-1", "node-2"):
        assert api.put(f"/hosts/{host}", json={"host": {"agent_version": "test"}}).status_code == 200
    network = create_network(api, name="net")
    create_subnet(api, network["id"], "10.0.0.0/24")
    create_subnet(api, network["id"], "2001:db8::/64")
    return network


def state(api: httpx.Client, host: str) -> Json:
    r = api.get(f"/hosts/{host}/state")
    assert r.status_code == 200, r.text
    return dict(r.json())


def revision(api: httpx.Client) -> int:
    return int(api.get("/events", params={"since": 2**62}).json()["revision"])


def events(api: httpx.Client, since: int) -> set[tuple[str, str, str]]:
    body = api.get("/events", params={"since": since}).json()
    return {(e["resource"], e["resource_id"], e["operation"]) for e in body["events"]}


def rule(api: httpx.Client, sg: str, **body: Any) -> Json:
    return create(api, "security-group-rules", "security_group_rule", security_group_id=sg, **body)


def port(api: httpx.Client, net: Json, **body: Any) -> Json:
    return create(api, "ports", "port", network_id=net["id"], **body)


def put(api: httpx.Client, port_id: str, **body: Any) -> Json:
    r = api.put(f"/ports/{port_id}", json={"port": body})
    assert r.status_code == 200, r.text
    return dict(r.json()["port"])


def instance(api: httpx.Client, name: str, host: str, *ports: Json) -> None:
    create(
        api, "instances", "instance", name=name, host=host, netns=f"ns-{name}", nets=[{"port": p["id"]} for p in ports]
    )


def cidrs(p: Json) -> list[str]:
    return [f"{f['ip_address']}/{128 if ':' in f['ip_address'] else 32}" for f in p["fixed_ips"]]


@pytest.mark.ovn_dataplane  # (one network on two hosts)
def test_filtering_in_the_desired_state(api: httpx.Client, net: Json) -> None:
    web = create(api, "security-groups", "security_group", name="web")["id"]
    db = create(api, "security-groups", "security_group", name="db")["id"]
    rules = [
        rule(api, web, direction="ingress", protocol="tcp", port_range_min=80, port_range_max=80,
             remote_ip_prefix="198.51.100.7/24"),
        rule(api, web, direction="ingress", protocol="icmp", port_range_min=8, port_range_max=0),
        rule(api, web, direction="ingress", ethertype="IPv6", protocol="icmpv6", port_range_min=128),
        rule(api, web, direction="ingress", protocol="17", port_range_min=53, port_range_max=53),
        rule(api, web, direction="ingress", protocol="0", remote_ip_prefix="203.0.113.0/24"),
        rule(api, web, direction="ingress", protocol="vrrp", remote_group_id=db),
        rule(api, web, direction="ingress", ethertype="IPv6", remote_group_id=web),
    ]  # fmt: skip
    a = port(api, net, security_groups=[web], allowed_address_pairs=[
        {"ip_address": "10.0.0.200"}, {"ip_address": "10.0.2.7/24", "mac_address": "fa:16:3e:aa:bb:cc"},
        {"ip_address": "2001:DB8::AB"}])  # fmt: skip
    b = port(api, net, security_groups=[db], allowed_address_pairs=[{"ip_address": "10.9.0.0/16"}])
    c = port(api, net, port_security_enabled=False)
    instance(api, "vm-a", "node-1", a, c)
    instance(api, "vm-b", "node-2", b)

    one = state(api, "node-1")
    pa, pc = one["ports"][a["id"]], one["ports"][c["id"]]
    assert (pa["port_security_enabled"], pa["security_groups"]) == (True, [web])
    assert sorted((x["ip_address"], x["mac_address"]) for x in pa["allowed_address_pairs"]) == sorted(
        [("10.0.0.200", a["mac_address"]), ("10.0.2.0/24", "fa:16:3e:aa:bb:cc"), ("2001:db8::ab", a["mac_address"])]
    )
    assert (pa["mac_address"], [f["prefixlen"] for f in pa["fixed_ips"]]) == (a["mac_address"], [24, 64])
    assert (pc["port_security_enabled"], pc["security_groups"], pc["allowed_address_pairs"]) == (False, [], [])

    # The groups of this host's ports, no other; rules as the agent applies them (protocol numbers).
    assert set(one["security_groups"]) == {web}
    group = one["security_groups"][web]
    assert (group["id"], group["stateful"]) == (web, True)
    got = {x["id"]: x for x in group["rules"]}
    assert len(got) == len(rules) + 2  # and the group's two egress rules
    assert {tuple(sorted(x)) for x in got.values()} == {(
        "direction", "ethertype", "id", "port_range_max", "port_range_min", "protocol", "remote_address_group_id",
        "remote_group_id", "remote_ip_prefix")}  # fmt: skip
    assert [(got[x["id"]]["protocol"], got[x["id"]]["port_range_min"], got[x["id"]]["port_range_max"])
            for x in rules] == [(6, 80, 80), (1, 8, 0), (58, 128, None), (17, 53, 53), (None, None, None),
                                (112, None, None), (None, None, None)]  # fmt: skip
    assert got[rules[0]["id"]]["remote_ip_prefix"] == "198.51.100.0/24"
    assert got[rules[5]["id"]]["remote_group_id"] == db
    egress = [x for x in group["rules"] if x["direction"] == "egress"]
    assert sorted((x["ethertype"], x["protocol"], x["remote_ip_prefix"], x["remote_group_id"]) for x in egress) == [
        ("IPv4", None, None, None), ("IPv6", None, None, None)]  # fmt: skip

    # Every group the rules name as remote, with its members' addresses on every host (b is on node-2).
    assert one["remote_groups"] == {
        db: sorted([*cidrs(b), "10.9.0.0/16"]),
        web: sorted([*cidrs(a), "10.0.0.200/32", "10.0.2.0/24", "2001:db8::ab/128"]),
    }
    two = state(api, "node-2")
    assert set(two["security_groups"]) == {db}
    assert two["remote_groups"] == {}  # db's own rules (egress anywhere) name no group


@pytest.mark.ovn_dataplane  # (one network on two hosts)
def test_every_change_reaches_the_state_with_an_event(api: httpx.Client, net: Json) -> None:
    web = create(api, "security-groups", "security_group", name="web")["id"]
    db = create(api, "security-groups", "security_group", name="db")["id"]
    a = port(api, net, security_groups=[web])
    b = port(api, net, security_groups=[db])
    instance(api, "vm-a", "node-1", a)
    instance(api, "vm-b", "node-2", b)
    assert state(api, "node-2")["remote_groups"] == {}

    # A rule naming a remote group: node-2 now needs the addresses of web's members, which are on node-1.
    since = revision(api)
    r = rule(api, db, direction="ingress", protocol="tcp", port_range_min=5432, port_range_max=5432,
             remote_group_id=web)  # fmt: skip
    assert ("security_group_rule", r["id"], "create") in events(api, since)
    assert state(api, "node-2")["remote_groups"] == {web: sorted(cidrs(a))}

    # A member's addresses change on node-1: node-2's state follows, with an event for the port.
    since = revision(api)
    subnet4 = a["fixed_ips"][0]["subnet_id"]
    a = put(api, a["id"], fixed_ips=[{"subnet_id": subnet4, "ip_address": "10.0.0.77"}])
    assert ("port", a["id"], "update") in events(api, since)
    assert state(api, "node-2")["remote_groups"] == {web: ["10.0.0.77/32"]}
    since = revision(api)
    put(api, a["id"], allowed_address_pairs=[{"ip_address": "10.0.3.0/24"}])
    assert ("port", a["id"], "update") in events(api, since)
    assert state(api, "node-2")["remote_groups"] == {web: ["10.0.0.77/32", "10.0.3.0/24"]}

    # Membership: b joins web (node-1 has no rule naming web, node-2 now has web's own rules), then leaves.
    since = revision(api)
    put(api, b["id"], security_groups=[db, web])
    assert ("port", b["id"], "update") in events(api, since)
    two = state(api, "node-2")
    assert set(two["security_groups"]) == {db, web}
    assert two["remote_groups"] == {web: sorted(["10.0.0.77/32", "10.0.3.0/24", *cidrs(b)])}
    put(api, b["id"], security_groups=[db])
    assert state(api, "node-2")["remote_groups"] == {web: ["10.0.0.77/32", "10.0.3.0/24"]}

    # The rule goes: so does the remote group.
    since = revision(api)
    assert api.delete(f"/security-group-rules/{r['id']}").status_code == 204
    assert ("security_group_rule", r["id"], "delete") in events(api, since)
    assert state(api, "node-2")["remote_groups"] == {}

    # Stateful or not (web is in use: first its port leaves it).
    put(api, a["id"], security_groups=[db])
    since = revision(api)
    r2 = api.put(f"/security-groups/{web}", json={"security_group": {"stateful": False}})
    assert r2.status_code == 200, r2.text
    assert ("security_group", web, "update") in events(api, since)
    put(api, a["id"], security_groups=[web])
    assert state(api, "node-1")["security_groups"][web]["stateful"] is False

    # Port security off: no groups, no pairs, nothing of the groups left in the host's state.
    since = revision(api)
    put(api, a["id"], port_security_enabled=False, security_groups=[], allowed_address_pairs=[])
    assert ("port", a["id"], "update") in events(api, since)
    one = state(api, "node-1")
    assert (one["ports"][a["id"]]["port_security_enabled"], one["security_groups"], one["remote_groups"]) == (
        False, {}, {})  # fmt: skip


def claim(api: httpx.Client, net: Json, **body: Any) -> httpx.Response:
    return api.post("/port-pools/claim", json={"claim": {"host": "node-1", "network_id": net["id"], **body}})


def test_pool_ports_follow_their_network(api: httpx.Client, net: Json) -> None:
    default = api.get("/security-groups", params={"name": "default"}).json()["security_groups"][0]["id"]
    r = claim(api, net)
    assert r.status_code == 201, r.text
    first = r.json()["port"]
    assert (first["port_security_enabled"], first["security_groups"]) == (True, [default])
    ready = state(api, "node-1")["pool_ports"]
    assert ready and all(
        (p["port_security_enabled"], p["security_groups"], p["allowed_address_pairs"]) == (True, [default], [])
        for p in ready.values()
    )
    assert set(state(api, "node-1")["security_groups"]) == {default}

    # The network's port security goes off: its ready pool ports (its next instances' ports) follow, each with
    # an event; a claim gets a port without it, and may not ask for groups.
    since = revision(api)
    r = api.put(f"/networks/{net['id']}", json={"network": {"port_security_enabled": False}})
    assert r.status_code == 200, r.text
    assert {("port", pid, "update") for pid in ready} <= events(api, since)
    after = state(api, "node-1")["pool_ports"]
    assert set(after) == set(ready)
    assert all((p["port_security_enabled"], p["security_groups"]) == (False, []) for p in after.values())
    error(claim(api, net, security_groups=[default]), 400, "PortSecurityAndIPRequiredForSecurityGroups")
    r = claim(api, net)
    assert r.status_code == 201, r.text
    second = r.json()["port"]
    assert (second["port_security_enabled"], second["security_groups"]) == (False, [])
    # The claimed port is the caller's: what it was given is not kept when it is released to the pool.
    assert api.get(f"/ports/{first['id']}").json()["port"]["port_security_enabled"] is True
    put(api, first["id"], allowed_address_pairs=[{"ip_address": "10.0.0.250"}])
    assert api.post("/port-pools/release", json={"port_id": first["id"]}).status_code == 200
    back = state(api, "node-1")["pool_ports"][first["id"]]
    assert (back["port_security_enabled"], back["security_groups"], back["allowed_address_pairs"]) == (False, [], [])

    # On again: ready ports have it, and a claim gives the project's default group again.
    api.put(f"/networks/{net['id']}", json={"network": {"port_security_enabled": True}}).raise_for_status()
    assert all(p["port_security_enabled"] for p in state(api, "node-1")["pool_ports"].values())
    third = claim(api, net).json()["port"]
    assert (third["port_security_enabled"], third["security_groups"]) == (True, [default])
