"""What netavark and podman give the plugin (a network's JSON at `create`; the network, the container and its
per-network options at `setup` and `teardown`), checked and turned into the CNI package's NetConf and Env: the
network's `-o key=value` options are cloudnet-cni's configuration keys."""

from __future__ import annotations

import dataclasses
from typing import Any

from cloudnet.cni import netconf
from cloudnet.cni.errors import INVALID_CONFIG, INVALID_ENV, CniError
from cloudnet.cni.netconf import Env, NetConf

MARK = "cloudnet-netavark"
OPTIONS = ("network", "url", "token_file", "host", "project", "security_groups", "port", "physnet", "timeout")
LISTS = ("security_groups",)  # comma-separated in a `-o` option
LABELS = ("container_id", "network_options.interface_name", "the namespace argument")


def network_of(request: dict[str, Any], key: str | None = "network") -> dict[str, Any]:
    network = request.get(key) if key else request
    if not isinstance(network, dict):
        raise CniError(INVALID_CONFIG, f"{key or 'the input'} must be a network's JSON object")
    name = network.get("name")
    if not isinstance(name, str) or not name or len(name) > 255:
        raise CniError(INVALID_CONFIG, "the network needs a name")
    return network


def options_of(network: dict[str, Any]) -> dict[str, str]:
    """The network's options: only the plugin's keys, as strings, and never a token itself (whoever can read the
    network's JSON would read it: a token comes from token_file, mode 0600)."""
    options = network.get("options") or {}
    if not isinstance(options, dict) or not all(isinstance(v, str) for v in options.values()):
        raise CniError(INVALID_CONFIG, "the network's options must be an object of strings")
    if "token" in options:
        raise CniError(INVALID_CONFIG, "a token is never a network option: give token_file (mode 0600)")
    if not options.get("network"):
        raise CniError(INVALID_CONFIG, "the network needs option network (a cloudnet network's name or id): "
                       "podman network create -d cloudnet-netavark -o network=NAME ...")  # fmt: skip
    unknown = sorted(k for k in options if k not in OPTIONS)
    if unknown:
        raise CniError(INVALID_CONFIG, f"unknown option {unknown[0][:64]}: the options are {', '.join(OPTIONS)}")
    return options


def netconf_of(network: dict[str, Any], static_ips: Any = None, valid: frozenset[str] | None = None) -> NetConf:
    """cloudnet-cni's configuration from the network's options (its checks, its token rules, its defaults)."""
    options = options_of(network)
    conf: dict[str, Any] = {"cniVersion": netconf.LATEST, "name": network["name"]}
    for key, value in options.items():
        conf[key] = [v for v in value.split(",") if v] if key in LISTS else value
    if "timeout" in conf:
        try:
            conf["timeout"] = float(conf["timeout"])
        except ValueError:
            raise CniError(INVALID_CONFIG, f"timeout must be a number of seconds in (0, {netconf.MAX_TIMEOUT:g}]") \
                from None  # fmt: skip
    conf["args"] = {"cloudnet": {k: conf.pop(k) for k in ("port",) if k in conf}}
    if static_ips is not None and not isinstance(static_ips, list):
        raise CniError(INVALID_CONFIG, "network_options.static_ips must be a list")
    conf["runtimeConfig"] = {"ips": static_ips or []}  # (read_netconf checks each: a string, an address)
    spec = netconf.read_netconf(conf, "ADD")
    return dataclasses.replace(spec, mark=MARK, valid_containers=valid)


def attachment(command: str, request: dict[str, Any], netns: str) -> tuple[Env, NetConf]:
    """setup's or teardown's attachment and configuration. A container's own options never carry a token (as
    CNI_ARGS do not), and what cloudnet decides (the port's MAC) or does not do (port mappings) is refused."""
    per = request.get("network_options")
    if not isinstance(per, dict):
        raise CniError(INVALID_CONFIG, "network_options must be an object")
    own = per.get("options") or {}
    if not isinstance(own, dict) or any("token" in str(k).lower() for k in own):
        raise CniError(INVALID_ENV, "a container's network options may not carry a token: give token_file in the "
                       "network's options")  # fmt: skip
    if command == "ADD" and per.get("static_mac"):
        raise CniError(INVALID_CONFIG, "static_mac (--mac-address) is not supported: cloudnet gives the port's MAC")
    if command == "ADD" and request.get("port_mappings"):
        raise CniError(INVALID_CONFIG, "port mappings (-p) are not supported on a cloudnet network: use a "
                       "floating IP or a port forwarding")  # fmt: skip
    cid, ifname = request.get("container_id"), per.get("interface_name")
    env = netconf.attachment(command, cid if isinstance(cid, str) else "", ifname if isinstance(ifname, str) else "",
                             netns, LABELS)  # fmt: skip
    return env, netconf_of(network_of(request), per.get("static_ips") if command == "ADD" else None)
