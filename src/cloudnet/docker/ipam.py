"""IpamDriver: pools are CIDRs (given, or a free block of DEFAULT_POOLS, or an existing cloudnet subnet), addresses
are cloudnet ports.

A pool is only remembered until its network exists (CreateNetwork makes the subnet); an endpoint's address is a
port of that subnet, made here so that cloudnet's allocation is the one dockerd uses (Kuryr does the same). An
address asked for by value that a free port already holds is that port: Zun pre-creates the port and connects with
its address. ReleaseAddress deletes only the ports made here.
"""

from __future__ import annotations

import ipaddress

from cloudnet.docker import plugin as p
from cloudnet.docker.cloudnet_api import Json, PluginError
from cloudnet.docker.protocol import GATEWAY_REQUEST, MAC_OPTION, OPT_SUBNET, AddressRequest, PoolRef, PoolRequest
from cloudnet.docker.state import Pool

LOCAL_SPACE = "cloudnet-local"
GLOBAL_SPACE = "cloudnet-global"
# Where a network created without --subnet gets its block (as Kuryr's default subnet pool: a /24 each; IPv6: a /64
# of a unique local range); blocks another pool of the address space overlaps are skipped.
DEFAULT_POOLS = {False: (ipaddress.ip_network("10.213.0.0/16"), 24), True: (ipaddress.ip_network("fd00:cd::/48"), 64)}
IPAM_PORT = "docker-ipam"  # the name of the ports made for an address (ReleaseAddress deletes only these)


def capabilities() -> Json:
    return {"RequiresMACAddress": False, "RequiresRequestReplay": False}


def default_spaces() -> Json:
    return {"LocalDefaultAddressSpace": LOCAL_SPACE, "GlobalDefaultAddressSpace": GLOBAL_SPACE}


async def request_pool(plugin: p.Plugin, req: PoolRequest) -> Json:
    space = req.AddressSpace or LOCAL_SPACE
    if req.SubPool:
        raise PluginError("sub-pools are not supported: cloudnet allocates from the whole subnet")
    subnet_id = (req.Options or {}).get(OPT_SUBNET)
    if subnet_id:
        subnet = await plugin.api.get("subnets", "subnet", subnet_id)
        net = p.cidr(subnet["cidr"])
        if req.Pool and p.cidr(req.Pool) != net:
            raise PluginError(f"subnet {subnet_id} is {net}, not {req.Pool}")
        pool_id = f"{space}/{net}/{subnet_id}"
    elif req.Pool:
        net = p.cidr(req.Pool)
        pool_id = f"{space}/{net}"
    async with plugin.lock:
        pools = plugin.state.pools
        if not subnet_id and not req.Pool:  # (no --subnet: a free block, as Docker's own IPAM and Kuryr's pool)
            net = _free_block([p.cidr(x.cidr) for x in pools.values() if x.space == space], req.V6)
            pool_id = f"{space}/{net}"
        for other_id, other in pools.items():
            # Pools of new subnets are told apart by their CIDR (CreateNetwork gets no pool id): no overlaps.
            fresh = not subnet_id and not other.subnet_id
            if other_id != pool_id and other.space == space and fresh and p.cidr(other.cidr).overlaps(net):
                raise PluginError(f"pool {net} overlaps pool {other.cidr} in address space {space}")
        if pool_id not in pools:
            p.bounded(len(pools), "pools")
            pools[pool_id] = Pool(space, str(net), subnet_id)
            plugin.state.save()
    return {"PoolID": pool_id, "Pool": str(net), "Data": {}}


def _free_block(taken: list[p.IpNetwork], v6: bool) -> p.IpNetwork:
    """The first block of the default range (DEFAULT_POOLS) that overlaps no pool of the address space."""
    whole, prefixlen = DEFAULT_POOLS[v6]
    for block in whole.subnets(new_prefix=prefixlen):
        if not any(block.overlaps(other) for other in taken):
            return block
    raise PluginError(f"no free /{prefixlen} left in {whole}: give --subnet, or --ipam-opt {OPT_SUBNET}=<subnet id>")


async def release_pool(plugin: p.Plugin, req: PoolRef) -> Json:
    async with plugin.lock:
        if plugin.state.pools.pop(req.PoolID, None) is None:
            raise PluginError(f"unknown pool {req.PoolID[:100]!r}")
        plugin.state.save()
    return {}


def _pool(plugin: p.Plugin, pool_id: str) -> Pool:
    pool = plugin.state.pools.get(pool_id)
    if pool is None:
        raise PluginError(f"unknown pool {pool_id[:100]!r}")
    return pool


def _subnet_of(plugin: p.Plugin, pool_id: str) -> tuple[str, str] | None:
    """(cloudnet network, subnet) made or adopted for the pool; None before its network exists."""
    for network in plugin.state.networks.values():
        if pool_id in network.subnets:
            return network.network_id, network.subnets[pool_id]
    return None


async def request_address(plugin: p.Plugin, req: AddressRequest) -> Json:
    pool = _pool(plugin, req.PoolID)
    net = p.cidr(pool.cidr)
    wanted = p.address(req.Address) if req.Address else None
    if wanted is not None and wanted not in net:
        raise PluginError(f"address {wanted} is not in pool {net}")
    options = req.Options or {}
    if options.get("RequestAddressType") == GATEWAY_REQUEST:
        return {"Address": f"{await _gateway(plugin, pool, wanted)}/{net.prefixlen}", "Data": {}}
    where = _subnet_of(plugin, req.PoolID)
    if where is None:
        raise PluginError(f"no docker network uses pool {pool.cidr} yet")
    network_id, subnet_id = where
    if wanted is not None and await p.free_port_with(plugin, network_id, wanted) is not None:
        return {"Address": f"{wanted}/{net.prefixlen}", "Data": {}}  # a pre-created port's: CreateEndpoint binds it
    fixed = {"subnet_id": subnet_id, **({"ip_address": str(wanted)} if wanted else {})}
    body = {"network_id": network_id, "name": IPAM_PORT, "fixed_ips": [fixed]}
    if options.get(MAC_OPTION):
        body["mac_address"] = options[MAC_OPTION]
    port = await plugin.api.create("ports", "port", body)
    ip = next(f["ip_address"] for f in port["fixed_ips"] if f["subnet_id"] == subnet_id)
    return {"Address": f"{ip}/{net.prefixlen}", "Data": {}}


async def _gateway(plugin: p.Plugin, pool: Pool, wanted: p.IpAddress | None) -> str:
    if pool.subnet_id is None:  # the subnet is made by CreateNetwork, with this gateway
        return str(wanted or next(p.cidr(pool.cidr).hosts()))
    gateway = (await plugin.api.get("subnets", "subnet", pool.subnet_id))["gateway_ip"]
    if not gateway or (wanted is not None and p.address(gateway) != wanted):
        raise PluginError(f"subnet {pool.subnet_id} has gateway {gateway or 'none'}; pass --gateway {gateway}")
    return str(gateway)


async def release_address(plugin: p.Plugin, req: AddressRequest) -> Json:
    _pool(plugin, req.PoolID)
    ip = p.address(req.Address)
    where = _subnet_of(plugin, req.PoolID)
    if where is None:
        return {}  # a gateway's, released as the network goes: nothing was made for it
    try:
        port = await p.free_port_with(plugin, where[0], ip)
    except PluginError:
        return {}  # bound to something (the subnet's gateway, a router): not this driver's to release
    if port is not None and port["name"] == IPAM_PORT:
        await plugin.api.delete("ports", port["id"])
    return {}
