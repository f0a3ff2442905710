"""The northbound writer's reads from the revision log (northbound/scoped.py) against full reads, row by row, through
the live API on both backends: after each change of a series, the rows a scoped read advanced to are exactly the rows
(and refusals) a full read of the same snapshot builds, parents before children; changes that touch only ports are
read from the log, every other one (and a group coming into use or going out of it) calls for a full read."""

from __future__ import annotations

from typing import Any

import httpx

from cloudnet.northbound import desired, scoped
from cloudnet.store.db import Store
from tests.support.api import create, create_network, create_subnet

GATEWAYS = ("gw-1",)
Json = dict[str, Any]


class Follower:
    """A writer's cache, advanced from the log after each change and compared with a full read."""

    def __init__(self, store: Store) -> None:
        self.store = store
        with store.read(snapshot=True) as conn:
            self.cache = scoped.Cache.of(*desired.build_with_basis(conn, GATEWAYS))

    def check(self, expect: str) -> None:
        with self.store.read(snapshot=True) as conn:
            revision = int(desired.current_revision(conn))
            before = dict(self.cache.rows)
            changed = self.cache.advance(conn, revision)
            want, basis = desired.build_with_basis(conn, GATEWAYS)
        if changed is None:
            assert expect == "full", "a change the log should have covered called for a full read"
            self.cache = scoped.Cache.of(want, basis)
            return
        assert expect == "log", "a change that reaches beyond ports was read from the log"
        wanted: dict[str, desired.Row] = {}
        for row in want.rows:
            wanted.setdefault(row.key, row)
        assert set(self.cache.rows) == set(wanted), set(self.cache.rows) ^ set(wanted)
        for key, row in wanted.items():
            assert self.cache.rows[key] == row, key
        assert self.cache.refused == want.refused
        assert self.cache.revision == want.revision == revision
        seen: set[str] = set()
        for key, row in self.cache.rows.items():
            assert row.parent is None or row.parent in seen, f"{key} before its parent {row.parent}"
            seen.add(key)
        # what differs from before is among the keys the read says it built again
        differ = {k for k in set(before) | set(wanted) if before.get(k) != wanted.get(k)}
        assert differ <= changed, differ - changed


def port(api: httpx.Client, net: Json, **body: Any) -> Json:
    return create(api, "ports", "port", network_id=net["id"], **body)


def put_port(api: httpx.Client, port_id: str, **body: Any) -> None:
    r = api.put(f"/ports/{port_id}", json={"port": body})
    assert r.status_code == 200, r.text


def test_scoped_reads_build_what_full_reads_do(api: httpx.Client, server: Any) -> None:
    ext = create_network(api, name="ext", **{"router:external": True, "provider:network_type": "flat",
                                             "provider:physical_network": "physnet1"})  # fmt: skip
    create_subnet(api, ext["id"], "192.0.2.0/24", gateway_ip="192.0.2.1")
    net = create_network(api, name="a")
    v4 = create_subnet(api, net["id"], "10.0.0.0/24")
    create_subnet(api, net["id"], "2001:db8::/64", ip_version=6, ipv6_address_mode="dhcpv6-stateful")
    other = create_network(api, name="b")
    b4 = create_subnet(api, other["id"], "10.1.0.0/24")
    port(api, net, device_owner="network:distributed", device_id=f"ovnmeta-{net['id']}")
    router = create(api, "routers", "router", name="r", external_gateway_info={"network_id": ext["id"]})
    assert api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": v4["id"]}).status_code == 200
    web = create(api, "security-groups", "security_group", name="web")
    create(
        api,
        "security-group-rules",
        "security_group_rule",
        security_group_id=web["id"],
        direction="ingress",
        ethertype="IPv4",
        protocol="tcp",
        port_range_min=22,
        port_range_max=22,
        remote_group_id=web["id"],
    )
    p1 = port(api, net, security_groups=[web["id"]])
    p2 = port(api, net, port_security_enabled=False)
    port(api, other)  # (the default group's)
    follow = Follower(server.store)

    pairs = [{"ip_address": "10.0.0.200"}, {"ip_address": "10.9.0.0/24", "mac_address": "fa:16:3e:00:00:77"}]
    p4 = port(api, net, security_groups=[web["id"]], allowed_address_pairs=pairs)
    follow.check("log")  # a new member of web: its address set, its Port_Group, cloudnet_pg_drop
    put_port(api, p4["id"], fixed_ips=[{"subnet_id": v4["id"], "ip_address": "10.0.0.77"}])
    follow.check("log")
    default = [g for g in api.get("/security-groups").json()["security_groups"] if g["name"] == "default"]
    put_port(api, p4["id"], security_groups=[web["id"], default[0]["id"]])
    follow.check("log")
    put_port(api, p4["id"], security_groups=[], port_security_enabled=False, allowed_address_pairs=[])
    follow.check("log")  # out of every group and of cloudnet_pg_drop
    put_port(api, p1["id"], **{"binding:host_id": "node-1", "name": "renamed", "admin_state_up": False})
    follow.check("log")
    put_port(api, p2["id"], port_security_enabled=True, security_groups=[web["id"]])
    follow.check("log")
    assert api.delete(f"/ports/{p4['id']}").status_code == 204
    follow.check("log")
    r = api.post("/ports", json={"ports": [{"network_id": other["id"], "name": f"bulk-{i}"} for i in range(3)]})
    assert r.status_code == 201, r.text
    follow.check("log")
    bulk = [p["id"] for p in r.json()["ports"]]

    # a group coming into use, and going out of it: other groups' rules and the address sets depend on it
    lonely = create(api, "security-groups", "security_group", name="lonely")
    follow.check("full")
    first = port(api, other, security_groups=[lonely["id"]])
    follow.check("full")
    second = port(api, other, security_groups=[lonely["id"]])
    follow.check("log")
    assert api.delete(f"/ports/{second['id']}").status_code == 204
    follow.check("log")
    assert api.delete(f"/ports/{first['id']}").status_code == 204
    follow.check("full")

    # shared objects: a rule (its ACLs), a router interface (the router and the switch), a forward (its LB, links)
    create(
        api,
        "security-group-rules",
        "security_group_rule",
        security_group_id=web["id"],
        direction="egress",
        ethertype="IPv4",
        protocol="udp",
        port_range_min=53,
        port_range_max=53,
    )
    follow.check("full")
    assert api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": b4["id"]}).status_code == 200
    follow.check("full")
    forward = {"listen_address": "192.0.2.50", "ports": [
        {"protocol": "tcp", "listen_port": "80", "target_address": "10.0.0.10", "target_port": "8080"}]}  # fmt: skip
    assert api.post(f"/networks/{net['id']}/forwards", json=forward).status_code == 201
    follow.check("full")
    put_port(api, bulk[0], name="after the full reads")
    follow.check("log")
    r = api.put(f"/networks/{other['id']}", json={"network": {"mtu": 1300}})
    assert r.status_code == 200, r.text
    put_port(api, bulk[1], name="with a network change")
    follow.check("full")

    # a forward's target address: a port taking it, changing, leaving it changes the forward's rows (read in full)
    v4_ip = [{"subnet_id": v4["id"], "ip_address": "10.0.0.10"}]
    target = port(api, net, fixed_ips=v4_ip)
    follow.check("full")
    assert any(k.startswith("lb/") for k in follow.cache.rows)
    put_port(api, target["id"], name="the target")
    follow.check("full")
    put_port(api, target["id"], fixed_ips=[{"subnet_id": v4["id"], "ip_address": "10.0.0.11"}])
    follow.check("full")
    assert not any(k.startswith("lb/") for k in follow.cache.rows)  # nothing while no port holds the target
    put_port(api, target["id"], name="no target now")
    follow.check("log")
    assert api.delete(f"/ports/{target['id']}").status_code == 204
    follow.check("log")
    again = port(api, net, fixed_ips=v4_ip)
    follow.check("full")
    assert any(k.startswith("lb/") for k in follow.cache.rows)
    assert api.delete(f"/ports/{again['id']}").status_code == 204
    follow.check("full")
    assert not any(k.startswith("lb/") for k in follow.cache.rows)
