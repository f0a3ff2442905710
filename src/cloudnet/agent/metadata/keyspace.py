"""The SmartOS metadata key space of one instance, as the agent's metadata sockets serve it: generated `sdc:`
keys, customer and internal metadata (reference/metadata.md §2.5 and §3.5; joyent/smartos-live agent.js; the
Joyent metadata data dictionary).

- `sdc:` keys are generated from the instance and its ports, subnets and networks in the host's desired state.
- Other keys are read from customer or internal metadata by the rules shared with the API (wire/mdata_keys).
- `user-data` and `cloud-init:user-data` default to the instance's user data (cloud-init reads the latter as
  its user data), `root_authorized_keys` to its SSH keys, unless the customer metadata sets them.
"""

from __future__ import annotations

import ipaddress
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cloudnet.wire import guest_net
from cloudnet.wire.mdata_keys import SDC_PREFIX, internal_namespaces, reads_internal

# server_uuid is a UUID in SmartOS; ours is derived from the host name so it is stable across restarts.
_SERVER_NAMESPACE = uuid.UUID("6d1c9c0e-7b5e-5c1f-9a43-3c2d6f0f9a01")


# -- values -------------------------------------------------------------------------------------


class UnservableValue(Exception):
    """A stored value that is neither a string, a number nor a boolean (agent.js answers FAILURE)."""


def render(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):  # JavaScript's toString of a boolean
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    raise UnservableValue(type(value).__name__)


@dataclass(frozen=True)
class KeySpace:
    """Everything a guest can GET or list, precomputed when the desired state changes."""

    customer: Mapping[str, Any]
    internal: Mapping[str, Any]
    sdc: Mapping[str, str]
    defaults: Mapping[str, str] = field(default_factory=dict)  # customer keys the instance implies
    namespaces: frozenset[str] = frozenset()

    def get(self, key: str) -> str | None:
        """The value of `key`, None when there is none; UnservableValue for a value of another type."""
        if key.startswith(SDC_PREFIX):
            return self.sdc.get(key)
        if reads_internal(key, self.namespaces):
            return render(self.internal.get(key))
        if key in self.customer:
            return render(self.customer[key])
        return self.defaults.get(key)

    def names(self) -> list[str]:
        """What KEYS lists: customer keys (not `*_pw`, not namespaced-internal) then internal ones that are."""
        customer = [k for k in self.customer if not reads_internal(k, self.namespaces)]
        customer += [k for k in self.defaults if k not in self.customer]
        internal = [k for k in self.internal if reads_internal(k, self.namespaces)]
        return customer + internal

    def with_metadata(self, customer: Mapping[str, Any], internal: Mapping[str, Any]) -> KeySpace:
        """The same instance with newer stored metadata (after a write, before the next desired state)."""
        return KeySpace(
            dict(customer), dict(internal), _with_internal_sdc(self.sdc, internal), self.defaults,
            internal_namespaces(internal),
        )  # fmt: skip


# -- generated keys ------------------------------------------------------------------------------


def build(instance: Mapping[str, Any], state: Mapping[str, Any], datacenter_name: str | None = None) -> KeySpace:
    """The key space of `instance`, one of `state["instances"]` (the host's desired state)."""
    customer = dict(instance.get("metadata") or {})
    internal = dict(instance.get("internal_metadata") or {})
    return KeySpace(
        customer, internal, _with_internal_sdc(sdc_keys(instance, state, datacenter_name), internal),
        implied_keys(instance), internal_namespaces(internal),
    )  # fmt: skip


def implied_keys(instance: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    keys = [k["key"].strip() for k in instance.get("ssh_keys") or [] if k.get("key")]
    if keys:
        out["root_authorized_keys"] = "\n".join(keys) + "\n"
    user_data = instance.get("user_data")
    if user_data:
        out["user-data"] = user_data
        out["cloud-init:user-data"] = user_data
    return out


def sdc_keys(
    instance: Mapping[str, Any], state: Mapping[str, Any], datacenter_name: str | None = None
) -> dict[str, str]:
    hostname = instance.get("hostname") or instance.get("name") or ""
    out = {
        "sdc:uuid": instance["id"],
        "sdc:zonename": instance["id"],  # Triton names a zone after its uuid
        "sdc:alias": instance.get("name") or "",
        "sdc:hostname": hostname,
        "sdc:owner_uuid": instance.get("project_id") or "",
        "sdc:nics": json.dumps(nics(instance, state)),
        "sdc:resolvers": json.dumps(resolvers(instance, state)),
        "sdc:routes": json.dumps(routes(instance, state)),
    }
    if state.get("host"):
        out["sdc:server_uuid"] = str(uuid.uuid5(_SERVER_NAMESPACE, state["host"]))
    if datacenter_name:
        out["sdc:datacenter_name"] = datacenter_name
    _short, dot, domain = hostname.partition(".")
    if dot and domain:
        out["sdc:dns_domain"] = domain
    return {k: v for k, v in out.items() if v}


def _with_internal_sdc(sdc: Mapping[str, str], internal: Mapping[str, Any]) -> dict[str, str]:
    """sdc:operator-script and sdc:volumes are internal metadata (agent.js); string values only."""
    out = {k: v for k, v in sdc.items() if k not in ("sdc:operator-script", "sdc:volumes")}
    for key, source in (("sdc:operator-script", "operator-script"), ("sdc:volumes", "sdc:volumes")):
        value = internal.get(source)
        if isinstance(value, str) and value:
            out[key] = value
        elif value is not None and not isinstance(value, str):
            out[key] = json.dumps(value)
    return out


def _instance_ports(instance: Mapping[str, Any], state: Mapping[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(position, port) in interface order (wire/guest_net.py names the interface from its position)."""
    ports = state.get("ports") or {}
    return [(i, ports[pid]) for i, pid in enumerate(instance.get("ports") or []) if pid in ports]


def _subnets_of(port: Mapping[str, Any], state: Mapping[str, Any]) -> list[dict[str, Any]]:
    subnets = state.get("subnets") or {}
    seen: dict[str, dict[str, Any]] = {}
    for f in port.get("fixed_ips") or []:
        s = subnets.get(f.get("subnet_id"))
        if s is not None:
            seen.setdefault(s["id"], s)
    return list(seen.values())


def nics(instance: Mapping[str, Any], state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """`sdc:nics` as vmadm shows it: interface, mac, ips (CIDR), gateways, primary, mtu, and the legacy
    single-IPv4 fields (ip, netmask, gateway) older consumers read. The interface on position 0 is the
    primary one: it carries the default route, as the dataplane configures it."""
    networks = state.get("networks") or {}
    subnets = state.get("subnets") or {}
    out = []
    for position, port in _instance_ports(instance, state):
        ips, gateways = [], []
        first_v4: ipaddress.IPv4Interface | None = None
        for f in port.get("fixed_ips") or []:
            subnet = subnets.get(f.get("subnet_id"))
            plen = f.get("prefixlen")
            if plen is None and subnet is not None:
                plen = ipaddress.ip_network(subnet["cidr"]).prefixlen
            iface = ipaddress.ip_interface(f"{f['ip_address']}/{plen}")
            ips.append(str(iface))
            if first_v4 is None and isinstance(iface, ipaddress.IPv4Interface):
                first_v4 = iface
            gw = subnet.get("gateway_ip") if subnet else None
            if gw and gw not in gateways:
                gateways.append(gw)
        nic: dict[str, Any] = {
            "interface": guest_net.device_name(instance, position),
            "mac": port.get("mac_address", ""),
            "primary": position == 0,
            "ips": ips,
            "gateways": gateways,
            "network_uuid": port.get("network_id", ""),
        }
        mtu = (networks.get(port.get("network_id")) or {}).get("mtu")
        if mtu:
            nic["mtu"] = mtu
        if first_v4 is not None:
            nic["ip"] = str(first_v4.ip)
            nic["netmask"] = str(first_v4.netmask)
            v4_gateways = [g for g in gateways if ipaddress.ip_address(g).version == 4]
            if v4_gateways:
                nic["gateway"] = v4_gateways[0]
        out.append(nic)
    return out


def resolvers(instance: Mapping[str, Any], state: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for _position, port in _instance_ports(instance, state):
        for subnet in _subnets_of(port, state):
            for ns in subnet.get("dns_nameservers") or []:
                if ns not in out:
                    out.append(ns)
    return out


def routes(instance: Mapping[str, Any], state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Host routes of the instance's subnets as `{dst, gateway, linklocal}` (first one per destination)."""
    out: dict[str, dict[str, Any]] = {}
    for _position, port in _instance_ports(instance, state):
        for subnet in _subnets_of(port, state):
            for r in subnet.get("host_routes") or []:
                out.setdefault(r["destination"], {"dst": r["destination"], "gateway": r["nexthop"], "linklocal": False})
    return list(out.values())
