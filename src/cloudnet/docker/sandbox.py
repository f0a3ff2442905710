"""Join and Leave: a sandbox joining an endpoint is a cloudnet instance bound to the endpoint's port.

dockerd (20.10, Debian's) creates the container's network namespace only when the container starts, after Join
has returned, and it wants from Join a device to move in. So the instance gets a namespace cloudnet provides (none
is named: no host resource, a pool's parked one when the port pools have one), the host's agent plugs the port
there as it plugs any instance (veth on the network's bridge, firewall, or a VF for a `direct` port), and once the
instance is ACTIVE the device is handed to dockerd (devices.py). Leave deletes the instance: the agent unplugs.
"""

from __future__ import annotations

import asyncio
import time

from cloudnet import namespaces
from cloudnet.docker import devices
from cloudnet.docker import plugin as p
from cloudnet.docker.cloudnet_api import Json, PluginError
from cloudnet.docker.network import endpoint
from cloudnet.docker.protocol import EndpointRef, Join
from cloudnet.wire import guest_net

POLL = 0.05
NEXT_HOP = 0  # libnetwork's route types: 0 via a next hop, 1 connected
DEFAULT_ROUTES = ("0.0.0.0/0", "::/0")  # (dockerd's own, from Gateway)


async def join(plugin: p.Plugin, req: Join) -> Json:
    ep = endpoint(plugin, req)
    if ep.instance_id:
        raise PluginError(f"endpoint {req.EndpointID} is joined already")
    port = await plugin.api.get("ports", "port", ep.port_id)
    # handoff: the device leaves the instance's namespace for dockerd's sandbox; the agent keeps its host end only.
    body = {"name": f"docker-{req.EndpointID[:12]}", "host": plugin.host, "nets": [{"port": ep.port_id}],
            "handoff": True}  # fmt: skip
    instance = await plugin.api.create("instances", "instance", body)
    async with plugin.lock:
        ep.instance_id = instance["id"]
        plugin.state.save()
    name = devices.device_name(req.EndpointID)
    try:
        instance = await _active(plugin, instance["id"])
        if not namespaces.is_managed_ns(plugin.host, instance["netns"]):
            raise PluginError(f"instance {instance['id']} is not in a namespace cloudnet provides")
        await asyncio.to_thread(devices.hand_over, instance["netns"], port["mac_address"], name)
    except (PluginError, OSError) as exc:
        await plugin.api.delete("instances", instance["id"])
        async with plugin.lock:
            ep.instance_id = None
            plugin.state.save()
        raise exc if isinstance(exc, PluginError) else PluginError(f"cannot hand over the device: {exc}") from None
    async with plugin.lock:
        # The sandbox's first endpoint of ours carries the metadata route (a second one would clash with it).
        first = not any(e.sandbox == req.SandboxKey and e.instance_id for e in plugin.state.endpoints.values())
        ep.device, ep.sandbox = name, req.SandboxKey
        plugin.state.save()
    out: Json = {"InterfaceName": {"SrcName": name, "DstPrefix": "eth"}}
    subnets = {f["subnet_id"]: await plugin.api.get("subnets", "subnet", f["subnet_id"]) for f in port["fixed_ips"]}
    for fixed in port["fixed_ips"]:
        gateway = subnets[fixed["subnet_id"]]["gateway_ip"]
        if gateway:
            out.setdefault("GatewayIPv6" if ":" in gateway else "Gateway", gateway)
    if "Gateway" not in out and "GatewayIPv6" not in out:
        out["DisableGatewayService"] = True  # no docker_gwbridge: a subnet without a gateway means no way out
    # The device left the namespace where the agent routed it, and its routes with it: dockerd makes the gateway's
    # and these (the metadata hop, the subnets' host routes: what an instance made through the API has), without
    # which a guest on a network with no router had no way to 169.254.169.254 (its gateway answers nobody).
    routes = guest_net.port_routes(port["fixed_ips"], subnets, instance["nets"][0]["metadata_hops"], default=first)
    static = [{"Destination": dst, "RouteType": NEXT_HOP, "NextHop": hop} for dst, hop in routes
              if dst not in DEFAULT_ROUTES]  # fmt: skip
    if static:
        out["StaticRoutes"] = static
    return out


async def _active(plugin: p.Plugin, instance_id: str) -> Json:
    deadline = time.monotonic() + plugin.join_timeout
    while True:
        instance = await plugin.api.get("instances", "instance", instance_id)
        if instance["status"] == "ACTIVE":
            return instance
        if instance["status"] == "ERROR":
            raise PluginError(f"cloudnet could not plug the port: {instance['status_reason'] or 'ERROR'}")
        if time.monotonic() > deadline:
            raise PluginError(f"the port is not ACTIVE after {plugin.join_timeout:g} s (is host {plugin.host}'s "
                              "agent running?)")  # fmt: skip
        await asyncio.sleep(POLL)


async def leave(plugin: p.Plugin, req: EndpointRef) -> Json:
    ep = endpoint(plugin, req)
    if ep.instance_id:
        await plugin.api.delete("instances", ep.instance_id)
    async with plugin.lock:
        ep.instance_id, ep.device, ep.sandbox = None, None, None
        plugin.state.save()
    return {}
