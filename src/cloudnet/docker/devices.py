"""The one kernel step of the driver: hand dockerd the device cloudnet plugged, by moving it out of the instance's
namespace into the driver's own (where dockerd looks for Join's SrcName and moves it into the sandbox)."""

from __future__ import annotations

import os

from pyroute2 import IPRoute

from cloudnet.docker.cloudnet_api import PluginError

PREFIX = "cnd"  # + 12 characters of the endpoint id: 15, the kernel's limit


def device_name(endpoint_id: str) -> str:
    return PREFIX + endpoint_id[:12]


def hand_over(netns: str, mac: str, name: str) -> None:
    """Move the device with the port's MAC (a veth end, or a VF) from `netns` to this process's namespace as
    `name`. A leftover of an earlier join of the same endpoint (same name) goes first."""
    with IPRoute() as here:
        for idx in here.link_lookup(ifname=name):
            here.link("del", index=idx)
    with IPRoute(netns=netns) as inside:
        found = [link["index"] for link in inside.get_links()
                 if str(link.get_attr("IFLA_ADDRESS") or "").lower() == mac.lower()
                 and link.get_attr("IFLA_IFNAME") != "lo"]  # fmt: skip
        if not found:
            raise PluginError(f"no device with MAC {mac} in {netns}")
        inside.link("set", index=found[0], state="down")
        inside.link("set", index=found[0], net_ns_pid=os.getpid(), ifname=name)
