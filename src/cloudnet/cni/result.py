"""The result the spec defines for ADD, from an instance's port and its subnets, after what earlier plugins of
the chain returned (prevResult): interfaces with the sandbox path, ips naming their interface by index, routes
and DNS."""

from __future__ import annotations

import ipaddress
from typing import Any

from cloudnet.cni.errors import CHECK_FAILED, INVALID_CONFIG, CniError
from cloudnet.wire import guest_net

MAX_PREV = 64  # interfaces, ips or routes an earlier plugin may have returned


def _list(prev: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = prev.get(key) or []
    if not isinstance(value, list) or len(value) > MAX_PREV or not all(isinstance(v, dict) for v in value):
        raise CniError(INVALID_CONFIG, f"prevResult.{key} must be a list of at most {MAX_PREV} objects")
    return [dict(v) for v in value]


def build(
    version: str,
    ifname: str,
    sandbox: str,
    nic: dict[str, Any],
    subnets: dict[str, dict[str, Any]],
    metadata_hops: dict[str, str],
    mtu: int | None,
    prev: dict[str, Any] | None,
) -> dict[str, Any]:
    """prevResult's interfaces, ips and routes, then this attachment's: `nic` is the instance's port (its `nets`
    entry), `subnets` its subnets by id, `metadata_hops` the network's metadata port address by subnet id. The
    routes are those the agent configures (wire/guest_net.py: default, metadata hop, host routes)."""
    prev = prev or {}
    interfaces, ips, routes = _list(prev, "interfaces"), _list(prev, "ips"), _list(prev, "routes")
    index = len(interfaces)
    interface: dict[str, Any] = {"name": ifname, "mac": nic["mac_address"], "sandbox": sandbox}
    if version != "1.0.0" and mtu:
        interface["mtu"] = mtu  # a 1.1 field
    interfaces.append(interface)
    seen = {str(r.get("dst")) for r in routes}
    nameservers: list[str] = [str(n) for n in (prev.get("dns") or {}).get("nameservers") or []][:MAX_PREV]
    for fixed in nic["fixed_ips"]:
        subnet = subnets.get(fixed["subnet_id"])
        if subnet is None:
            continue
        prefix = ipaddress.ip_network(subnet["cidr"]).prefixlen
        entry: dict[str, Any] = {"address": f"{fixed['ip_address']}/{prefix}", "interface": index}
        gateway = subnet.get("gateway_ip")
        if gateway:
            entry["gateway"] = gateway
        ips.append(entry)
        nameservers += [n for n in subnet.get("dns_nameservers") or [] if n not in nameservers]
    for dst, gw in guest_net.port_routes(nic["fixed_ips"], subnets, metadata_hops, default=True):
        if dst not in seen:  # an earlier plugin's route to the same place stays first
            seen.add(dst)
            routes.append({"dst": dst, "gw": gw})
    result: dict[str, Any] = {"cniVersion": version, "interfaces": interfaces, "ips": ips, "routes": routes}
    dns = dict(prev.get("dns") or {}) if isinstance(prev.get("dns"), dict) else {}
    if nameservers:
        dns["nameservers"] = nameservers
    if dns:
        result["dns"] = dns
    return result


def check(prev: dict[str, Any] | None, ifname: str, sandbox: str, nic: dict[str, Any]) -> None:
    """CHECK's comparison of what the runtime remembers (prevResult) with the instance: the interface in the
    sandbox with the port's MAC, and the port's addresses on it."""
    if not prev:
        return
    interfaces = _list(prev, "interfaces")
    index = next((i for i, f in enumerate(interfaces) if f.get("name") == ifname and f.get("sandbox") == sandbox),
                 None)  # fmt: skip
    if index is None:
        raise CniError(CHECK_FAILED, f"prevResult has no interface {ifname} in {sandbox}")
    if str(interfaces[index].get("mac", "")).lower() != nic["mac_address"].lower():
        raise CniError(CHECK_FAILED, f"{ifname} has MAC {nic['mac_address']}, prevResult says "
                       f"{interfaces[index].get('mac')}")  # fmt: skip
    remembered = {str(ip.get("address", "")).split("/")[0] for ip in _list(prev, "ips") if ip.get("interface") == index}
    actual = {f["ip_address"] for f in nic["fixed_ips"]}
    if remembered != actual:
        raise CniError(CHECK_FAILED, f"{ifname} has addresses {sorted(actual)}, prevResult says {sorted(remembered)}")
