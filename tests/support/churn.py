"""A churn driver: random API operations on networks, subnets, routers, forwards, SNAT addresses and instances of
one host, both address families, many of them refused (a network still in use, a router link a forward needs): those
are operations too. Ports come onto forwards' target addresses and leave them (instances made on them, deleted,
their ports' fixed IPs changed). Each operation makes one request (a few read first); a 5xx fails the test.
Subclasses add operations to WEIGHTS. Used by tests/integration/test_churn.py (Linux) and tests/ovn/test_restarts.py
(OVN)."""

from __future__ import annotations

import ipaddress
import json
import random
from typing import Any

import httpx

LISTEN = {
    4: [f"192.0.2.{i}" for i in range(20, 60)] + [f"198.51.100.{i}" for i in range(1, 40)],
    6: [f"2001:db8:1::{i:x}" for i in range(0x20, 0x60)] + [f"2001:db8:100::{i:x}" for i in range(1, 40)],
}
MAX_NETWORKS, MAX_ROUTERS, MAX_INSTANCES = 5, 3, 6
Json = dict[str, Any]
RANDOM_FIELDS = frozenset({"id", "port_id", "device_id", "network_id", "subnet_id", "tenant_id", "project_id",
                           "mac_address", "created_at", "updated_at", "revision_number"})  # fmt: skip


def _without_ids(item: Any) -> str:
    """An object as text without what differs from run to run (UUIDs, MACs, times): a tie-breaker for order."""
    if isinstance(item, dict):
        return json.dumps({k: v for k, v in item.items() if k not in RANDOM_FIELDS}, sort_keys=True, default=str)
    return str(item)


class Churn:
    """Lists are read in the order the churn first saw their objects' ids (in its own requests' answers), never in
    the API's order (by UUID, which differs from run to run), so the same seed makes the same operations."""

    def __init__(self, api: httpx.Client, host: str, pub: Json, rng: random.Random) -> None:
        self.api, self.host, self.pub, self.rng = api, host, pub, rng
        self.counter = 0
        self.outcomes: dict[str, int] = {}
        self.seen: dict[str, int] = {}  # id -> when the churn first saw it

    def call(self, what: str, method: str, path: str, body: Any = None) -> httpx.Response:
        r = self.api.request(method, path, json=body)
        assert r.status_code < 500, (what, r.status_code, r.text)  # refusals are fine, a 5xx never
        key = f"{what} {r.status_code}"
        self.outcomes[key] = self.outcomes.get(key, 0) + 1
        if r.is_success and r.content:
            self._learn(r.json())
        return r

    def _learn(self, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                if k in ("id", "port_id") and isinstance(v, str):
                    self.seen.setdefault(v, len(self.seen))
                else:
                    self._learn(v)
        elif isinstance(value, list):
            for v in sorted(value, key=_without_ids):
                self._learn(v)

    def order(self, item: Any) -> tuple[Any, ...]:
        if isinstance(item, tuple):
            return tuple(self.order(i) for i in item)
        seen = self.seen.get(item.get("id", "")) if isinstance(item, dict) else None
        return (0, seen, "") if seen is not None else (1, 0, _without_ids(item))

    def ordered(self, items: list[Any]) -> list[Any]:
        return sorted(items, key=self.order)

    def list(self, collection: str, key: str = "", **params: str) -> list[Json]:
        return self.ordered(list(self.api.get(f"/{collection}", params=params).json()[key or collection]))

    def networks(self) -> list[Json]:
        return [n for n in self.list("networks") if not n["router:external"]]

    def subnets(self, network: Json | None = None) -> list[Json]:
        subnets = self.list("subnets")
        externals = {n["id"] for n in self.list("networks") if n["router:external"]}
        return [s for s in subnets if s["network_id"] not in externals
                and (network is None or s["network_id"] == network["id"])]  # fmt: skip

    def forwards(self) -> list[tuple[Json, Json]]:
        found = []
        for net in self.networks():
            found += [(net, f) for f in self.list(f"networks/{net['id']}/forwards", key="forwards")]
        return found

    def pick(self, items: list[Any]) -> Any:
        return self.rng.choice(items) if items else None

    # -- operations: each does one request (a few read first) ----------------------------------------------------

    def net_create(self) -> None:
        if len(self.networks()) >= MAX_NETWORKS:
            return self.net_delete()
        self.counter += 1
        k = self.counter % 200 + 10
        r = self.call("network create", "POST", "/networks", {"network": {"name": f"n{self.counter}"}})
        net = r.json()["network"]
        self.call("subnet create", "POST", "/subnets", {"subnet": {"network_id": net["id"], "cidr": f"10.{k}.0.0/24"}})
        if self.rng.random() < 0.7:
            v6 = {"network_id": net["id"], "cidr": f"fd{k:02x}::/64"}
            self.call("subnet create", "POST", "/subnets", {"subnet": v6})
        return None

    def net_delete(self) -> None:
        if net := self.pick(self.networks()):
            self.call("network delete", "DELETE", f"/networks/{net['id']}")

    def subnet_create(self) -> None:
        if net := self.pick(self.networks()):
            self.counter += 1
            version = self.rng.choice((4, 6))
            cidr = f"10.{self.counter % 200 + 10}.{self.rng.randint(1, 250)}.0/24" if version == 4 else \
                f"fd{self.counter % 200 + 10:02x}:{self.rng.randint(1, 999)}::/64"  # fmt: skip
            self.call("subnet create", "POST", "/subnets", {"subnet": {"network_id": net["id"], "cidr": cidr}})

    def subnet_delete(self) -> None:
        if sub := self.pick(self.subnets()):
            self.call("subnet delete", "DELETE", f"/subnets/{sub['id']}")

    def subnet_routes(self) -> None:
        if sub := self.pick(self.subnets()):
            net = ipaddress.ip_network(sub["cidr"])
            hop = str(net.network_address + self.rng.randint(2, 9))
            n = self.rng.randint(0, 9)
            dst = f"172.16.{n}.0/24" if net.version == 4 else f"fd99:{n}::/64"
            routes = self.rng.choice([[], [{"destination": dst, "nexthop": hop}]])
            self.call("subnet update", "PUT", f"/subnets/{sub['id']}", {"subnet": {"host_routes": routes}})

    def router_create(self) -> None:
        routers = self.list("routers")
        if len(routers) >= MAX_ROUTERS:
            return self.router_delete()
        body: Json = {"name": f"r{len(routers)}"}
        if self.rng.random() < 0.8:
            body["external_gateway_info"] = {"network_id": self.pub["id"]}
        self.call("router create", "POST", "/routers", {"router": body})
        return None

    def router_delete(self) -> None:
        if router := self.pick(self.list("routers")):
            self.call("router delete", "DELETE", f"/routers/{router['id']}")

    def router_attach(self) -> None:
        router, sub = self.pick(self.list("routers")), self.pick(self.subnets())
        if router and sub:
            self.call("router attach", "PUT", f"/routers/{router['id']}/add_router_interface", {"subnet_id": sub["id"]})

    def router_detach(self) -> None:
        ports = self.list("ports", device_owner="network:router_interface")
        if port := self.pick(ports):
            body = {"subnet_id": port["fixed_ips"][0]["subnet_id"]}
            self.call("router detach", "PUT", f"/routers/{port['device_id']}/remove_router_interface", body)

    def router_gateway(self) -> None:
        if router := self.pick(self.list("routers")):
            info = None if router["external_gateway_info"] else {"network_id": self.pub["id"]}
            self.call("router gateway", "PUT", f"/routers/{router['id']}", {"router": {"external_gateway_info": info}})

    def _ports(self, targets: list[str]) -> list[Json]:
        out, used = [], set()
        for _ in range(self.rng.randint(1, 3)):
            proto = self.rng.choice(("tcp", "udp"))
            first = self.rng.randint(1, 64000)
            kind = self.rng.choice(("one", "range", "to-one", "index"))
            width = {"one": 0, "range": self.rng.randint(1, 1500), "to-one": self.rng.randint(1, 300), "index": 3}[kind]
            span = set(range(first, first + width + 1))
            if (proto, frozenset(span)) in used or any(p == proto and s & span for p, s in used):
                continue
            used.add((proto, frozenset(span)))
            listen = str(first) if not width else f"{first}-{first + width}"
            target = {"one": "", "range": "", "to-one": str(self.rng.randint(1, 65535)), "index": "7000-7003"}[kind]
            out.append({"protocol": proto, "listen_port": listen, "target_port": target,
                        "target_address": self.rng.choice(targets)})  # fmt: skip
        return out

    def attached(self) -> set[str]:
        """Subnets with a router interface: where forward targets are reachable from an uplink."""
        legs = self.api.get("/ports", params={"device_owner": "network:router_interface"}).json()["ports"]
        return {f["subnet_id"] for p in legs for f in p["fixed_ips"]}

    def _targets(self, net: Json, version: int) -> list[str]:
        found = []
        subnets, attached = self.subnets(net), self.attached()
        if self.rng.random() < 0.8 and any(s["id"] in attached for s in subnets):  # mostly reachable ones
            subnets = [s for s in subnets if s["id"] in attached]
        for sub in subnets:
            cidr = ipaddress.ip_network(sub["cidr"])
            if cidr.version == version:
                found += [str(cidr.network_address + self.rng.randint(2, 200)) for _ in range(2)]
        return found

    def forward_create(self) -> None:
        networks, attached = self.networks(), self.attached()
        linked = [n for n in networks if any(s in attached for s in n["subnets"])]
        if net := self.pick(linked if linked and self.rng.random() < 0.8 else networks):
            version = self.rng.choice((4, 6))
            targets = self._targets(net, version)
            if not targets:
                return
            body: Json = {"listen_address": self.rng.choice(LISTEN[version]), "ports": self._ports(targets)}
            if self.rng.random() < 0.3:
                body["config"] = {"target_address": self.rng.choice(targets)}
                body["ports"] = [p for p in body["ports"] if p["target_address"] != body["config"]["target_address"]]
            self.call("forward create", "POST", f"/networks/{net['id']}/forwards", body)

    def forward_update(self) -> None:
        if found := self.pick(self.forwards()):
            net, fwd = found
            targets = self._targets(net, ipaddress.ip_address(fwd["listen_address"]).version)
            if targets:
                body = {"ports": self._ports(targets), "config": {}}
                self.call("forward update", "PUT", f"/networks/{net['id']}/forwards/{fwd['listen_address']}", body)

    def forward_delete(self) -> None:
        if found := self.pick(self.forwards()):
            net, fwd = found
            self.call("forward delete", "DELETE", f"/networks/{net['id']}/forwards/{fwd['listen_address']}")

    def snat(self) -> None:
        if net := self.pick(self.networks()):
            version = self.rng.choice((4, 6))
            value = self.rng.choice(["", self.rng.choice(LISTEN[version])])
            body = {"network": {"config": {f"ipv{version}.nat.address": value}}}
            self.call("snat set", "PUT", f"/networks/{net['id']}", body)

    def instance_create(self) -> None:
        if len(self.list("instances")) >= MAX_INSTANCES:
            return self.instance_delete()
        nets = [n for n in self.networks() if n["subnets"]]
        if net := self.pick(nets):
            self.counter += 1
            body = {"name": f"i{self.counter}", "host": self.host, "nets": [{"network": net["id"]}]}
            self.call("instance create", "POST", "/instances", {"instance": body})
        return None

    def instance_delete(self) -> None:
        if inst := self.pick(self.list("instances")):
            self.call("instance delete", "DELETE", f"/instances/{inst['id']}")

    def _subnet_of(self, net: Json, address: str) -> Json | None:
        ip = ipaddress.ip_address(address)
        return next((s for s in self.subnets(net) if ip in ipaddress.ip_network(s["cidr"])), None)

    def target_take(self) -> None:
        """A port comes on a forward's target address (a forward outlives its targets' ports): a new instance with
        it, or an instance's port moved onto it."""
        if not (found := self.pick(self.forwards())):
            return None
        net, fwd = found
        targets = sorted({p["target_address"] for p in fwd["ports"]} | set(fwd["config"].values()) - {""})
        address = self.pick([a for a in targets if self._subnet_of(net, a)])
        subnet = self._subnet_of(net, address) if address else None
        if address is None or subnet is None:
            return None
        mine = [i for i in self.list("instances") if i["nets"] and i["nets"][0]["network_id"] == net["id"]]
        if mine and (self.rng.random() < 0.5 or len(self.list("instances")) >= MAX_INSTANCES):
            body = {"port": {"fixed_ips": [{"subnet_id": subnet["id"], "ip_address": address}]}}
            self.call("target port move", "PUT", f"/ports/{self.pick(mine)['nets'][0]['port_id']}", body)
            return None
        if len(self.list("instances")) >= MAX_INSTANCES:
            return self.instance_delete()
        self.counter += 1
        fixed = "v6-fixed-ip" if ":" in address else "v4-fixed-ip"
        body = {"name": f"i{self.counter}", "host": self.host, "nets": [{"network": net["id"], fixed: address}]}
        self.call("target instance create", "POST", "/instances", {"instance": body})
        return None

    def target_leave(self) -> None:
        """An instance's port lets go of its address (a forward's target, maybe): it takes another one."""
        if not (inst := self.pick([i for i in self.list("instances") if i["nets"] and i["nets"][0]["fixed_ips"]])):
            return
        first = inst["nets"][0]["fixed_ips"][0]
        subnet = next((s for s in self.subnets() if s["id"] == first["subnet_id"]), None)
        if subnet is None:
            return
        address = str(ipaddress.ip_network(subnet["cidr"]).network_address + self.rng.randint(201, 250))
        body = {"port": {"fixed_ips": [{"subnet_id": subnet["id"], "ip_address": address}]}}
        self.call("target port leave", "PUT", f"/ports/{inst['nets'][0]['port_id']}", body)

    WEIGHTS = {net_create: 5, net_delete: 3, subnet_create: 2, subnet_delete: 3, subnet_routes: 2, router_create: 3,
               router_delete: 2, router_attach: 9, router_detach: 5, router_gateway: 2, forward_create: 10,
               forward_update: 5, forward_delete: 5, snat: 3, instance_create: 6, instance_delete: 4,
               target_take: 5, target_leave: 3}  # fmt: skip

    def step(self) -> None:
        op = self.rng.choices(list(self.WEIGHTS), weights=list(self.WEIGHTS.values()))[0]
        op(self)
