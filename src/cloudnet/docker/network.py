"""NetworkDriver's networks and endpoints: a docker network is a cloudnet network (made here, or an existing one
named with `-o cloudnet.network=<id>`), an endpoint is a cloudnet port (the one IPAM made for its address, a
pre-created one named with the endpoint option `cloudnet.port=<id>`, or one made here)."""

from __future__ import annotations

from cloudnet.docker import plugin as p
from cloudnet.docker.cloudnet_api import Json, PluginError
from cloudnet.docker.protocol import (
    OPT_NETWORK,
    OPT_PORT,
    CreateEndpoint,
    CreateNetwork,
    EndpointInterface,
    EndpointRef,
    IpamData,
    NetworkRef,
    option,
)
from cloudnet.docker.state import Endpoint, Network, Pool


def capabilities() -> Json:
    # local: dockerd keeps the network to itself (no cluster store); cloudnet connects hosts as it always does.
    return {"Scope": "local", "ConnectivityScope": "global"}


def _pool_id(pools: dict[str, Pool], data: IpamData, subnet_ids: set[str]) -> str:
    """The pool dockerd's IPAM data came from: CreateNetwork names a pool by address space and CIDR only."""
    net = p.cidr(data.Pool)
    mine = [k for k, v in pools.items() if v.space == data.AddressSpace and p.cidr(v.cidr) == net]
    named = [k for k in mine if pools[k].subnet_id in subnet_ids]
    return (named or [k for k in mine if pools[k].subnet_id is None] or [f"{data.AddressSpace}/{net}"])[0]


async def create_network(plugin: p.Plugin, req: CreateNetwork) -> Json:
    if req.NetworkID in plugin.state.networks:
        return {}
    p.bounded(len(plugin.state.networks), "networks")
    data = [(d, 4) for d in req.IPv4Data or []] + [(d, 6) for d in req.IPv6Data or []]
    existing = option(req.Options, OPT_NETWORK)
    pools = plugin.state.pools
    subnets: dict[str, str] = {}
    if existing:
        network = await plugin.api.get("networks", "network", existing)
        theirs = await plugin.api.find("subnets", [("network_id", network["id"])])
        for item, _version in data:
            pool_id = _pool_id(pools, item, {s["id"] for s in theirs})
            match = [s["id"] for s in theirs if p.cidr(s["cidr"]) == p.cidr(item.Pool)]
            pool = pools.get(pool_id)
            if not match or (pool is not None and pool.subnet_id not in (None, match[0])):
                raise PluginError(f"network {existing} has no subnet {item.Pool} (of pool {pool_id})")
            subnets[pool_id] = match[0]
        entry = Network(network["id"], False, subnets)
    else:
        network = await plugin.api.create("networks", "network", {"name": f"docker-{req.NetworkID[:12]}"})
        try:
            for item, version in data:
                pool_id = _pool_id(pools, item, set())
                if pool_id in pools and pools[pool_id].subnet_id:
                    raise PluginError(f"a pool of an existing subnet needs -o {OPT_NETWORK}=<that subnet's network>")
                gateway = str(p.address(item.Gateway)) if item.Gateway else None
                body = {"network_id": network["id"], "cidr": str(p.cidr(item.Pool)), "ip_version": version,
                        "gateway_ip": gateway, "name": f"docker-{req.NetworkID[:12]}-v{version}"}  # fmt: skip
                subnets[pool_id] = (await plugin.api.create("subnets", "subnet", body))["id"]
        except PluginError:
            await plugin.api.delete("networks", network["id"])
            raise
        entry = Network(network["id"], True, subnets)
    async with plugin.lock:
        plugin.state.networks[req.NetworkID] = entry
        plugin.state.save()
    return {}


async def delete_network(plugin: p.Plugin, req: NetworkRef) -> Json:
    network = plugin.state.networks.get(req.NetworkID)
    if network is None:
        raise PluginError(f"unknown network {req.NetworkID}")
    if network.created:
        await plugin.api.delete("networks", network.network_id)
    async with plugin.lock:
        plugin.state.networks.pop(req.NetworkID, None)
        plugin.state.save()
    return {}


def _network(plugin: p.Plugin, network_id: str) -> Network:
    network = plugin.state.networks.get(network_id)
    if network is None:
        raise PluginError(f"unknown network {network_id}")
    return network


async def create_endpoint(plugin: p.Plugin, req: CreateEndpoint) -> Json:
    network = _network(plugin, req.NetworkID)
    if req.EndpointID in plugin.state.endpoints:
        raise PluginError(f"endpoint {req.EndpointID} exists")
    p.bounded(len(plugin.state.endpoints), "endpoints")
    iface = req.Interface or EndpointInterface()
    ips = [p.address(a) for a in (iface.Address, iface.AddressIPv6) if a]
    named = option(req.Options, OPT_PORT)
    owned = False
    if named:  # Zun's case: a pre-created port (a `direct` one too), found the way any member finds it
        port = await plugin.api.get("ports", "port", named)
        if port["network_id"] != network.network_id:
            raise PluginError(f"port {named} is not on network {network.network_id}")
        if port["device_id"]:
            raise PluginError(f"port {named} is in use")
        theirs = {p.address(f["ip_address"]) for f in port["fixed_ips"]}
        if not set(ips) <= theirs:
            raise PluginError(f"port {named} holds {sorted(map(str, theirs))}: connect with its address (--ip)")
    else:
        port = await p.free_port_with(plugin, network.network_id, ips[0]) if ips else None
        if port is None:  # no address from cloudnet's IPAM (dockerd's own IPAM, or none): a port of our own
            fixed = [{"ip_address": str(ip)} for ip in ips]
            body = {"network_id": network.network_id, "name": f"docker-{req.EndpointID[:12]}",
                    **({"fixed_ips": fixed} if fixed else {}),
                    **({"mac_address": iface.MacAddress} if iface.MacAddress else {})}  # fmt: skip
            port = await plugin.api.create("ports", "port", body)
            owned = True
    if iface.MacAddress and port["mac_address"].lower() != iface.MacAddress.lower():
        raise PluginError(f"port {port['id']} has MAC address {port['mac_address']}, not {iface.MacAddress}")
    async with plugin.lock:
        plugin.state.endpoints[req.EndpointID] = Endpoint(req.NetworkID, port["id"], owned)
        plugin.state.save()
    out: Json = {} if iface.MacAddress else {"MacAddress": port["mac_address"]}
    if not ips:  # dockerd set no address: the port's are the endpoint's
        for fixed_ip in port["fixed_ips"]:
            key = "AddressIPv6" if ":" in fixed_ip["ip_address"] else "Address"
            subnet = await plugin.api.get("subnets", "subnet", fixed_ip["subnet_id"])
            out.setdefault(key, f"{fixed_ip['ip_address']}/{p.cidr(subnet['cidr']).prefixlen}")
    return {"Interface": out}


def endpoint(plugin: p.Plugin, req: EndpointRef) -> Endpoint:
    found = plugin.state.endpoints.get(req.EndpointID)
    if found is None or found.network != req.NetworkID:
        raise PluginError(f"unknown endpoint {req.EndpointID}")
    return found


async def endpoint_info(plugin: p.Plugin, req: EndpointRef) -> Json:
    port = await plugin.api.get("ports", "port", endpoint(plugin, req).port_id)
    keys = ("id", "status", "mac_address", "binding:vnic_type", "device_id")
    return {"Value": {f"cloudnet.port.{k}": port[k] for k in keys}}


async def delete_endpoint(plugin: p.Plugin, req: EndpointRef) -> Json:
    found = endpoint(plugin, req)
    if found.instance_id:  # a Leave that never came
        await plugin.api.delete("instances", found.instance_id)
    if found.owned_port:
        await plugin.api.delete("ports", found.port_id)
    async with plugin.lock:
        plugin.state.endpoints.pop(req.EndpointID, None)
        plugin.state.save()
    return {}
