"""netavark's StatusBlock (what podman shows in `inspect` and writes to the container's resolv.conf) from the
CNI result cloudnet-cni's ADD builds: the interface with its MAC and addresses, and the subnets' DNS servers.
The routes are not in it: the agent configured them in the namespace (default, metadata hop, host routes)."""

from __future__ import annotations

from typing import Any


def status_block(result: dict[str, Any]) -> dict[str, Any]:
    iface = result["interfaces"][-1]  # this attachment's (there is no earlier plugin in netavark)
    index = len(result["interfaces"]) - 1
    subnets = []
    for ip in (i for i in result["ips"] if i.get("interface") == index):
        subnet = {"ipnet": ip["address"]}
        if ip.get("gateway"):
            subnet["gateway"] = ip["gateway"]
        subnets.append(subnet)
    dns = result.get("dns") or {}
    return {
        "interfaces": {iface["name"]: {"mac_address": iface["mac"], "subnets": subnets}},
        "dns_server_ips": list(dns.get("nameservers") or []),
        "dns_search_domains": list(dns.get("search") or []),
    }
