"""Security groups and rules: the default group, rule validation, duplicates, in-use checks, projects."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from tests.support.api import create, error
from tests.support.server import RunningServer

MISSING = "5f0e3f2c-0d7e-4c39-9a3e-2b8f8a0c9d11"


def rule_key(rule: dict[str, Any]) -> tuple[Any, ...]:
    return (rule["direction"], rule["ethertype"], rule["protocol"], rule["port_range_min"], rule["port_range_max"],
            rule["remote_ip_prefix"], rule["remote_group_id"])  # fmt: skip


def rules_of(api: httpx.Client, sg_id: str) -> list[dict[str, Any]]:
    r = api.get("/security-group-rules", params={"security_group_id": sg_id})
    assert r.status_code == 200, r.text
    return list(r.json()["security_group_rules"])


def new_rule(api: httpx.Client, sg_id: str, **body: Any) -> httpx.Response:
    return api.post("/security-group-rules", json={"security_group_rule": {"security_group_id": sg_id, **body}})


def client(server: RunningServer, token: str) -> httpx.Client:
    return httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": token}, timeout=30)


def test_default_group_created_on_first_list(api: httpx.Client) -> None:
    r = api.get("/security-groups")
    assert r.status_code == 200, r.text
    (sg,) = r.json()["security_groups"]
    assert sg["name"] == "default"
    assert sg["project_id"] == "admin"
    assert sg["stateful"] is True
    expected = {
        ("egress", "IPv4", None, None, None, None, None),
        ("egress", "IPv6", None, None, None, None, None),
        ("ingress", "IPv4", None, None, None, None, sg["id"]),
        ("ingress", "IPv6", None, None, None, None, sg["id"]),
    }
    assert len(sg["security_group_rules"]) == 4
    assert {rule_key(x) for x in sg["security_group_rules"]} == expected
    assert all(x["security_group_id"] == sg["id"] for x in sg["security_group_rules"])
    assert {rule_key(x) for x in rules_of(api, sg["id"])} == expected

    # Listing again does not create another one.
    again = api.get("/security-groups").json()["security_groups"]
    assert [g["id"] for g in again] == [sg["id"]]
    assert api.get(f"/security-groups/{sg['id']}").json()["security_group"] == sg


def test_concurrent_first_use_creates_one_default_group(api: httpx.Client, server: RunningServer) -> None:
    """Many first requests of a project at once (each creating the default group): one group, no error."""
    barrier = threading.Barrier(8)

    def make(i: int) -> httpx.Response:
        headers = {"X-Auth-Token": "admin", "X-Project-Id": "fresh"}
        with httpx.Client(base_url=server.url + "/v2.0", headers=headers, timeout=60) as c:
            c.get("/networks", params={"limit": 1}).raise_for_status()  # connected before the race starts
            barrier.wait(timeout=60)
            return c.post("/security-groups", json={"security_group": {"name": f"g{i}"}})

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(make, range(8)))
    assert [r.status_code for r in results] == [201] * 8, [r.text for r in results if r.status_code != 201]
    groups = api.get("/security-groups", params={"project_id": "fresh"}).json()["security_groups"]
    assert sorted(g["name"] for g in groups) == ["default"] + [f"g{i}" for i in range(8)]
    (default,) = [g for g in groups if g["name"] == "default"]
    assert len(default["security_group_rules"]) == 4


def test_port_gets_the_default_group(api: httpx.Client) -> None:
    net = create(api, "networks", "network", name="n")
    port = create(api, "ports", "port", network_id=net["id"])
    (default,) = api.get("/security-groups", params={"name": "default"}).json()["security_groups"]
    assert port["security_groups"] == [default["id"]]
    assert len(api.get("/security-groups").json()["security_groups"]) == 1


def test_new_group_has_two_egress_rules(api: httpx.Client) -> None:
    sg = create(api, "security-groups", "security_group", name="web", description="web servers")
    assert sg["name"] == "web"
    assert sg["description"] == "web servers"
    assert sg["revision_number"] == 0
    assert {rule_key(x) for x in sg["security_group_rules"]} == {
        ("egress", "IPv4", None, None, None, None, None),
        ("egress", "IPv6", None, None, None, None, None),
    }
    assert len(sg["security_group_rules"]) == 2
    names = sorted(g["name"] for g in api.get("/security-groups").json()["security_groups"])
    assert names == ["default", "web"]


def test_cannot_create_another_default(api: httpx.Client) -> None:
    r = api.post("/security-groups", json={"security_group": {"name": "default"}})
    error(r, 409, "SecurityGroupDefaultAlreadyExists")
    groups = api.get("/security-groups").json()["security_groups"]
    assert [g["name"] for g in groups] == ["default"]


def test_update_group(api: httpx.Client) -> None:
    sg = create(api, "security-groups", "security_group", name="a")
    r = api.put(f"/security-groups/{sg['id']}", json={"security_group": {"name": "b", "description": "d"}})
    assert r.status_code == 200, r.text
    assert r.json()["security_group"]["name"] == "b"
    assert r.json()["security_group"]["description"] == "d"
    assert r.json()["security_group"]["revision_number"] == 1
    (default,) = api.get("/security-groups", params={"name": "default"}).json()["security_groups"]
    r = api.put(f"/security-groups/{default['id']}", json={"security_group": {"name": "renamed"}})
    error(r, 409, "SecurityGroupCannotUpdateDefault")
    assert api.get(f"/security-groups/{default['id']}").json()["security_group"]["name"] == "default"
    error(api.put(f"/security-groups/{sg['id']}", json={"security_group": {"id": MISSING}}), 400)


VALID_RULES: list[tuple[dict[str, Any], str | None, int | None, int | None]] = [
    # (body, stored protocol, port_range_min, port_range_max)
    ({"protocol": "tcp", "port_range_min": 22, "port_range_max": 22}, "tcp", 22, 22),
    ({"protocol": "TCP", "port_range_min": 80, "port_range_max": 89}, "tcp", 80, 89),
    ({"protocol": "udp", "port_range_min": 53, "port_range_max": 53}, "udp", 53, 53),
    ({"protocol": 6, "port_range_min": 1, "port_range_max": 65535}, "6", 1, 65535),
    ({"protocol": "17"}, "17", None, None),
    ({"protocol": "icmp", "port_range_min": 8, "port_range_max": 0}, "icmp", 8, 0),
    ({"protocol": "icmp", "port_range_min": 3}, "icmp", 3, None),
    ({"protocol": "gre"}, "gre", None, None),
    ({"protocol": "vrrp"}, "vrrp", None, None),
    ({"protocol": 112, "direction": "egress"}, "112", None, None),
    ({"protocol": "any", "remote_ip_prefix": "192.0.2.1"}, None, None, None),
    ({"protocol": None, "remote_ip_prefix": "192.0.2.2"}, None, None, None),
    ({"protocol": "ipv6-icmp", "ethertype": "IPv6", "port_range_min": 135}, "ipv6-icmp", 135, None),
    # Neutron's canonical spelling of ICMP on IPv6 rules
    ({"protocol": "icmpv6", "ethertype": "IPv6", "port_range_min": 128}, "ipv6-icmp", 128, None),
    ({"protocol": "icmp", "ethertype": "IPv6", "port_range_min": 129}, "ipv6-icmp", 129, None),
    ({"protocol": "udp", "ethertype": "ipv6", "port_range_min": 547, "port_range_max": 547}, "udp", 547, 547),
]


def test_rule_protocols_and_ports(api: httpx.Client) -> None:
    sg = create(api, "security-groups", "security_group", name="g")
    failures = []
    for body, protocol, lo, hi in VALID_RULES:
        r = new_rule(api, sg["id"], **{"direction": "ingress", **body})
        if r.status_code != 201:
            failures.append((body, r.status_code, r.text))
            continue
        rule = r.json()["security_group_rule"]
        got = (rule["protocol"], rule["port_range_min"], rule["port_range_max"], rule["ethertype"])
        if got != (protocol, lo, hi, body.get("ethertype", "IPv4").replace("ipv", "IPv")):
            failures.append((body, got))
        if api.get(f"/security-group-rules/{rule['id']}").json()["security_group_rule"] != rule:
            failures.append((body, "show differs"))
    assert failures == []
    group = api.get(f"/security-groups/{sg['id']}").json()["security_group"]
    assert len(group["security_group_rules"]) == 2 + len(VALID_RULES)
    assert group["revision_number"] == len(VALID_RULES)
    assert {x["project_id"] for x in group["security_group_rules"]} == {sg["project_id"]}


def test_rule_remote_ip_prefix_normalised(api: httpx.Client) -> None:
    sg = create(api, "security-groups", "security_group", name="g")
    cases = [
        # (given, ethertype, remote_ip_prefix (None: not checked), normalized_cidr)
        ("10.0.0.5", "IPv4", "10.0.0.5/32", "10.0.0.5/32"),
        ("10.0.0.0/24", "IPv4", "10.0.0.0/24", "10.0.0.0/24"),
        ("10.0.1.5/24", "IPv4", None, "10.0.1.0/24"),
        ("2001:DB8:0::/64", "IPv6", "2001:db8::/64", "2001:db8::/64"),
        ("2001:db8::1", "IPv6", "2001:db8::1/128", "2001:db8::1/128"),
    ]
    for given, ethertype, stored, normalized in cases:
        r = new_rule(api, sg["id"], direction="ingress", ethertype=ethertype, remote_ip_prefix=given)
        assert r.status_code == 201, (given, r.text)
        rule = r.json()["security_group_rule"]
        if stored is not None:
            assert rule["remote_ip_prefix"] == stored, given
        assert rule["normalized_cidr"] == normalized, given
        # filtering by the stored form finds it
        found = api.get("/security-group-rules", params={"remote_ip_prefix": rule["remote_ip_prefix"]}).json()
        assert [x["id"] for x in found["security_group_rules"]] == [rule["id"]]


INVALID_RULES: list[dict[str, Any]] = [
    {"direction": "sideways"},
    {"direction": "ingress", "ethertype": "IPv5"},
    {"direction": "ingress", "protocol": "bogus"},
    {"direction": "ingress", "protocol": 256},
    {"direction": "ingress", "protocol": "-1"},
    {"direction": "ingress", "protocol": "tcp", "port_range_min": 90, "port_range_max": 80},
    {"direction": "ingress", "port_range_min": 80, "port_range_max": 80},
    {"direction": "ingress", "protocol": "tcp", "port_range_min": 0, "port_range_max": 10},
    {"direction": "ingress", "protocol": "tcp", "port_range_min": 1, "port_range_max": 70000},
    {"direction": "ingress", "protocol": "tcp", "port_range_min": 80},
    {"direction": "ingress", "protocol": "udp", "port_range_max": 80},
    {"direction": "ingress", "protocol": "gre", "port_range_min": 1, "port_range_max": 2},
    {"direction": "ingress", "protocol": "icmp", "port_range_min": 300},
    {"direction": "ingress", "protocol": "icmp", "port_range_min": 8, "port_range_max": 256},
    {"direction": "ingress", "protocol": "icmp", "port_range_max": 0},
    {"direction": "ingress", "protocol": "icmpv6", "ethertype": "IPv4"},
    {"direction": "ingress", "protocol": "ipv6-frag"},
    {"direction": "ingress", "remote_ip_prefix": "10.0.0.300/24"},
    {"direction": "ingress", "remote_ip_prefix": "not-a-cidr"},
    {"direction": "ingress", "ethertype": "IPv4", "remote_ip_prefix": "2001:db8::/64"},
    {"direction": "ingress", "ethertype": "IPv6", "remote_ip_prefix": "10.0.0.0/8"},
    {"direction": "ingress", "remote_ip_prefix": "10.0.0.0/8", "remote_group_id": "SELF"},
    {"direction": "ingress", "bogus": 1},
    {"direction": "ingress", "port_range_min": "eighty", "protocol": "tcp"},
    {"direction": "ingress", "id": MISSING},
    {},
]


def test_invalid_rules_rejected(api: httpx.Client) -> None:
    sg = create(api, "security-groups", "security_group", name="g")
    failures = []
    for body in INVALID_RULES:
        if body.get("remote_group_id") == "SELF":
            body = {**body, "remote_group_id": sg["id"]}
        r = new_rule(api, sg["id"], **body)
        if r.status_code != 400 or not r.json()["NeutronError"]["message"]:
            failures.append((body, r.status_code, r.text))
    assert failures == []
    assert len(rules_of(api, sg["id"])) == 2
    assert api.get(f"/security-groups/{sg['id']}").json()["security_group"]["revision_number"] == 0


def test_rule_on_unknown_group(api: httpx.Client) -> None:
    msg = error(new_rule(api, MISSING, direction="ingress"), 404, "SecurityGroupNotFound")
    assert MISSING in msg
    sg = create(api, "security-groups", "security_group", name="g")
    error(new_rule(api, sg["id"], direction="ingress", remote_group_id=MISSING), 404, "SecurityGroupNotFound")
    assert len(rules_of(api, sg["id"])) == 2


def test_rule_with_remote_group(api: httpx.Client) -> None:
    web = create(api, "security-groups", "security_group", name="web")
    db = create(api, "security-groups", "security_group", name="db")
    r = new_rule(api, db["id"], direction="ingress", protocol="tcp", port_range_min=5432, port_range_max=5432,
                 remote_group_id=web["id"])  # fmt: skip
    assert r.status_code == 201, r.text
    rule = r.json()["security_group_rule"]
    assert rule["remote_group_id"] == web["id"]
    assert rule["remote_ip_prefix"] is None
    found = api.get("/security-group-rules", params={"remote_group_id": web["id"]}).json()["security_group_rules"]
    assert [x["id"] for x in found] == [rule["id"]]


DUPLICATES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"protocol": "tcp", "port_range_min": 22, "port_range_max": 22},
     {"protocol": "tcp", "port_range_min": 22, "port_range_max": 22}),
    ({"protocol": "tcp", "port_range_min": 22, "port_range_max": 22},
     {"protocol": "TCP", "port_range_min": 22, "port_range_max": 22, "description": "again"}),
    ({"protocol": "tcp", "port_range_min": 22, "port_range_max": 22},
     {"protocol": "6", "port_range_min": 22, "port_range_max": 22}),
    ({"protocol": "17"}, {"protocol": "udp"}),
    ({"protocol": "ipv6-icmp", "ethertype": "IPv6"}, {"protocol": "icmpv6", "ethertype": "IPv6"}),
    ({"remote_ip_prefix": "10.0.0.0/8"}, {"remote_ip_prefix": "10.0.0.0/8"}),
    ({"remote_ip_prefix": "10.1.2.3"}, {"remote_ip_prefix": "10.1.2.3/32"}),
    ({"remote_ip_prefix": "0.0.0.0/0"}, {}),
]  # fmt: skip


def test_duplicate_rules_conflict(api: httpx.Client) -> None:
    for first, second in DUPLICATES:
        sg = create(api, "security-groups", "security_group", name="g")
        r = new_rule(api, sg["id"], direction="ingress", **first)
        assert r.status_code == 201, (first, r.text)
        existing = r.json()["security_group_rule"]["id"]
        r = new_rule(api, sg["id"], direction="ingress", **second)
        assert r.status_code == 409, (first, second, r.text)
        assert r.json()["NeutronError"]["type"] == "SecurityGroupRuleExists"
        assert existing in r.json()["NeutronError"]["message"]
        assert len(rules_of(api, sg["id"])) == 3


def test_default_egress_rule_is_a_duplicate(api: httpx.Client) -> None:
    sg = create(api, "security-groups", "security_group", name="g")
    error(new_rule(api, sg["id"], direction="egress", ethertype="IPv4"), 409, "SecurityGroupRuleExists")
    # the same rule in another group is fine
    other = create(api, "security-groups", "security_group", name="h")
    assert new_rule(api, other["id"], direction="ingress").status_code == 201
    assert new_rule(api, sg["id"], direction="ingress").status_code == 201


def test_bulk_rule_create_is_atomic(api: httpx.Client) -> None:
    sg = create(api, "security-groups", "security_group", name="g")
    rules = [
        {"security_group_id": sg["id"], "direction": "ingress", "protocol": "tcp", "port_range_min": 1,
         "port_range_max": 2},
        {"security_group_id": sg["id"], "direction": "ingress", "protocol": "tcp", "port_range_min": 1,
         "port_range_max": 2},
    ]  # fmt: skip
    error(api.post("/security-group-rules", json={"security_group_rules": rules}), 409, "SecurityGroupRuleExists")
    assert len(rules_of(api, sg["id"])) == 2
    rules[1]["port_range_max"] = 3
    r = api.post("/security-group-rules", json={"security_group_rules": rules})
    assert r.status_code == 201, r.text
    assert len(r.json()["security_group_rules"]) == 2
    assert len(rules_of(api, sg["id"])) == 4


def test_delete_rule(api: httpx.Client) -> None:
    sg = create(api, "security-groups", "security_group", name="g")
    rule = new_rule(api, sg["id"], direction="ingress", protocol="udp").json()["security_group_rule"]
    assert api.delete(f"/security-group-rules/{rule['id']}").status_code == 204
    assert rule["id"] in error(api.get(f"/security-group-rules/{rule['id']}"), 404, "SecurityGroupRuleNotFound")
    error(api.delete(f"/security-group-rules/{rule['id']}"), 404, "SecurityGroupRuleNotFound")
    group = api.get(f"/security-groups/{sg['id']}").json()["security_group"]
    assert len(group["security_group_rules"]) == 2
    assert group["revision_number"] == 2
    # rules have no update
    assert api.put(f"/security-group-rules/{rule['id']}", json={"security_group_rule": {}}).status_code == 405


def test_delete_group_in_use(api: httpx.Client) -> None:
    sg = create(api, "security-groups", "security_group", name="g")
    net = create(api, "networks", "network", name="n")
    port = create(api, "ports", "port", network_id=net["id"], security_groups=[sg["id"]])
    assert port["security_groups"] == [sg["id"]]
    assert sg["id"] in error(api.delete(f"/security-groups/{sg['id']}"), 409, "SecurityGroupInUse")
    assert len(api.get(f"/security-groups/{sg['id']}").json()["security_group"]["security_group_rules"]) == 2

    r = api.put(f"/ports/{port['id']}", json={"port": {"security_groups": []}})
    assert r.status_code == 200, r.text
    rule_ids = [x["id"] for x in sg["security_group_rules"]]
    assert api.delete(f"/security-groups/{sg['id']}").status_code == 204
    error(api.get(f"/security-groups/{sg['id']}"), 404, "SecurityGroupNotFound")
    for rule_id in rule_ids:
        error(api.get(f"/security-group-rules/{rule_id}"), 404, "SecurityGroupRuleNotFound")
    error(api.delete(f"/security-groups/{sg['id']}"), 404, "SecurityGroupNotFound")


def test_delete_group_used_as_remote_group(api: httpx.Client) -> None:
    web = create(api, "security-groups", "security_group", name="web")
    db = create(api, "security-groups", "security_group", name="db")
    new_rule(api, db["id"], direction="ingress", remote_group_id=web["id"])
    error(api.delete(f"/security-groups/{web['id']}"), 409, "SecurityGroupInUse")
    assert api.get(f"/security-groups/{web['id']}").status_code == 200


def test_port_with_unknown_group(api: httpx.Client) -> None:
    net = create(api, "networks", "network", name="n")
    r = api.post("/ports", json={"port": {"network_id": net["id"], "security_groups": [MISSING]}})
    error(r, 404, "SecurityGroupNotFound")
    assert api.get("/ports").json()["ports"] == []


def test_non_admin_cannot_delete_default_group(users: dict[str, httpx.Client]) -> None:
    alice = users["alice"]
    (default,) = alice.get("/security-groups").json()["security_groups"]
    assert default["project_id"] == "alice"
    error(alice.delete(f"/security-groups/{default['id']}"), 409, "SecurityGroupCannotRemoveDefault")
    assert alice.get(f"/security-groups/{default['id']}").status_code == 200
    # an admin may
    assert users["admin"].delete(f"/security-groups/{default['id']}").status_code == 204
    error(alice.get(f"/security-groups/{default['id']}"), 404, "SecurityGroupNotFound")


def test_projects_are_isolated(users: dict[str, httpx.Client]) -> None:
    alice, bob, admin = users["alice"], users["bob"], users["admin"]
    a_sg = create(alice, "security-groups", "security_group", name="a")
    b_sg = create(bob, "security-groups", "security_group", name="b")
    assert a_sg["project_id"] == "alice"
    assert b_sg["project_id"] == "bob"

    a_groups = alice.get("/security-groups").json()["security_groups"]
    assert sorted(g["name"] for g in a_groups) == ["a", "default"]
    assert {g["project_id"] for g in a_groups} == {"alice"}
    a_rules = alice.get("/security-group-rules").json()["security_group_rules"]
    assert {x["project_id"] for x in a_rules} == {"alice"}
    assert len(a_rules) == 6

    error(alice.get(f"/security-groups/{b_sg['id']}"), 404, "SecurityGroupNotFound")
    error(alice.put(f"/security-groups/{b_sg['id']}", json={"security_group": {"name": "x"}}), 404)
    error(alice.delete(f"/security-groups/{b_sg['id']}"), 404, "SecurityGroupNotFound")
    error(alice.get(f"/security-group-rules/{b_sg['security_group_rules'][0]['id']}"), 404)
    error(alice.delete(f"/security-group-rules/{b_sg['security_group_rules'][0]['id']}"), 404)
    error(new_rule(alice, b_sg["id"], direction="ingress"), 404, "SecurityGroupNotFound")
    error(new_rule(alice, a_sg["id"], direction="ingress", remote_group_id=b_sg["id"]), 404, "SecurityGroupNotFound")
    error(alice.post("/security-groups", json={"security_group": {"name": "x", "project_id": "bob"}}), 403)
    assert bob.get(f"/security-groups/{b_sg['id']}").json()["security_group"]["name"] == "b"
    assert len(bob.get("/security-group-rules").json()["security_group_rules"]) == 6

    # alice cannot put bob's group on her port
    net = create(alice, "networks", "network", name="n")
    r = alice.post("/ports", json={"port": {"network_id": net["id"], "security_groups": [b_sg["id"]]}})
    error(r, 404, "SecurityGroupNotFound")

    # the admin sees everything, and may create a group for a project
    names = sorted(g["name"] for g in admin.get("/security-groups").json()["security_groups"])
    assert names == ["a", "b", "default", "default", "default"]
    made = create(admin, "security-groups", "security_group", name="for-bob", project_id="bob")
    assert made["project_id"] == "bob"
    assert "for-bob" in [g["name"] for g in bob.get("/security-groups").json()["security_groups"]]


def test_stateless_groups(api: httpx.Client) -> None:
    stateless = create(api, "security-groups", "security_group", name="udp-heavy", stateful=False)
    stateful = create(api, "security-groups", "security_group", name="web")
    assert (stateless["stateful"], stateful["stateful"]) == (False, True)
    found = api.get("/security-groups", params={"stateful": "false"}).json()["security_groups"]
    assert [g["id"] for g in found] == [stateless["id"]]
    aliases = {e["alias"] for e in api.get("/extensions").json()["extensions"]}
    assert {"stateful-security-group", "port-security", "allowed-address-pairs"} <= aliases

    # Unused: stateful may change either way.
    r = api.put(f"/security-groups/{stateless['id']}", json={"security_group": {"stateful": True}})
    assert r.status_code == 200, r.text
    assert r.json()["security_group"]["stateful"] is True
    api.put(f"/security-groups/{stateless['id']}", json={"security_group": {"stateful": False}}).raise_for_status()

    # In use by a port: Neutron refuses the change (SecurityGroupInUse), but not a rename or the same value.
    net = create(api, "networks", "network", name="n")
    port = create(api, "ports", "port", network_id=net["id"], security_groups=[stateless["id"]])
    body = {"security_group": {"stateful": True}}
    assert stateless["id"] in error(
        api.put(f"/security-groups/{stateless['id']}", json=body), 409, "SecurityGroupInUse"
    )
    assert api.get(f"/security-groups/{stateless['id']}").json()["security_group"]["stateful"] is False
    body = {"security_group": {"stateful": False, "name": "udp"}}
    assert api.put(f"/security-groups/{stateless['id']}", json=body).status_code == 200

    # A port has stateful or stateless groups, never both (Neutron's _validate_sgs_for_port).
    both = [stateless["id"], stateful["id"]]
    msg = error(api.put(f"/ports/{port['id']}", json={"port": {"security_groups": both}}), 409, "SecurityGroupConflict")
    assert "stateful and stateless" in msg
    error(api.post("/ports", json={"port": {"network_id": net["id"], "security_groups": both}}), 409,
          "SecurityGroupConflict")  # fmt: skip
    assert api.get(f"/ports/{port['id']}").json()["port"]["security_groups"] == [stateless["id"]]


def test_port_group_lists_are_bounded(api: httpx.Client) -> None:
    net = create(api, "networks", "network", name="n")
    port = create(api, "ports", "port", network_id=net["id"])
    too_many = [MISSING] * 101
    for bad, status in ((too_many, 400), (["x" * 256], 400), (["\x00"], 400), (["not-a-uuid"], 404)):
        r = api.put(f"/ports/{port['id']}", json={"port": {"security_groups": bad}})
        assert r.status_code == status, (bad[:1], r.text)
        r = api.post("/ports", json={"port": {"network_id": net["id"], "security_groups": bad}})
        assert r.status_code == status, (bad[:1], r.text)
    assert api.get(f"/ports/{port['id']}").json()["port"] == port
    rule = {"security_group_id": MISSING, "direction": "ingress", "remote_ip_prefix": "1" * 100}
    error(api.post("/security-group-rules", json={"security_group_rule": rule}), 400)
    rule = {"security_group_id": MISSING, "direction": "ingress", "protocol": "t" * 41}
    error(api.post("/security-group-rules", json={"security_group_rule": rule}), 400)
