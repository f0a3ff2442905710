"""ADD, DEL, CHECK, STATUS and GC as requests to the instance API: one instance a (container, ifname), named
from both so that DEL and GC find it again, and marked so that GC touches only the plugin's own."""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from collections.abc import Iterator
from typing import Any

from cloudnet.cli.errors import ApiError, CliError
from cloudnet.cli.resources import INSTANCE, NETWORK, PORT, SECURITY_GROUP, SUBNET, Kind, Resources
from cloudnet.cni import result, sandbox
from cloudnet.cni.errors import (
    API_REFUSED,
    CHECK_FAILED,
    INVALID_CONFIG,
    NOT_AVAILABLE,
    PLUG_FAILED,
    TRY_AGAIN_LATER,
    CniError,
)
from cloudnet.cni.netconf import Env, NetConf

RETRYABLE = (429, 502, 503, 504)
UUID = re.compile(r"^[0-9a-fA-F]{8}-?([0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}$")
WAIT_STEP = 5.0  # seconds one request waits for ACTIVE (within the HTTP client's time limit, commands.py)


def prefix(conf: NetConf) -> str:
    """What the names of one network configuration's instances start with (a digest: names of other
    configurations never share it, whatever they are called)."""
    return f"{conf.mark.removeprefix('cloudnet-')}-{hashlib.sha256(conf.name.encode()).hexdigest()[:10]}-"


def instance_name(conf: NetConf, container_id: str, ifname: str) -> str:
    return prefix(conf) + hashlib.sha256(f"{container_id}/{ifname}".encode()).hexdigest()[:24]


@contextlib.contextmanager
def api(what: str, unavailable: int = TRY_AGAIN_LATER) -> Iterator[None]:
    """cloudnet's failures as CNI errors: what may pass (unreachable, busy) is `unavailable`, the rest 100."""
    try:
        yield
    except ApiError as exc:
        if exc.status in RETRYABLE:
            raise CniError(unavailable, f"{what}: cloudnet is busy", str(exc), exc.request_id) from None
        raise CniError(API_REFUSED, f"{what}: {exc}", request_id=exc.request_id) from None
    except CliError as exc:
        raise CniError(unavailable, f"{what}: {exc}") from None


class Attachments:
    def __init__(self, conf: NetConf, client: Resources) -> None:
        self.conf = conf
        self.client = client
        self.created_by = ""  # the request id of the instance's POST: the agent's lines about its plug carry it

    # -- lookups --

    def one(self, kind: Kind, value: str, params: list[tuple[str, str]] | None = None) -> dict[str, Any]:
        """A resource the configuration names, by id or name; not visible to the token is a bad configuration."""
        if UUID.match(value):  # (a name is looked up by name at once: one request less on every ADD)
            with contextlib.suppress(ApiError):
                return self.client.show(kind, value)
        found = self.client.list_all(kind, [*(params or []), ("name", value)])
        if len(found) != 1:
            why = "no" if not found else "more than one"
            raise CniError(INVALID_CONFIG, f"{why} {kind.label} '{value}' visible to the plugin's token")
        return found[0]

    def network(self) -> dict[str, Any]:
        with api("looking up the network"):
            return self.one(NETWORK, self.conf.network)

    def _mine(self, name: str) -> list[dict[str, Any]]:
        found = self.client.list_all(INSTANCE, [("name", name), ("host", self.conf.host)])
        return [i for i in found if str(i.get("description", "")).startswith(self.conf.mark)]

    # -- ADD --

    def add(self, env: Env) -> dict[str, Any]:
        sandbox.check_is_netns(env.netns)
        name = instance_name(self.conf, env.container_id, env.ifname)
        network = self.network()
        with api("creating the instance"):
            existing = self._mine(name)
            inst = next((i for i in existing if i["netns"] == env.netns), None)
            for stale in (i for i in existing if i is not inst):  # an earlier ADD's, into another namespace
                self._delete(stale, name)
            if inst is None:
                body = self._body(env, name, network)
                try:
                    inst = self.client.create(INSTANCE, body)
                    self.created_by = self.client.last_request_id
                except CliError:  # (no VF free, a quota...): the port made for it goes at once
                    self._delete_own_ports([name])
                    raise
        with api("reading the subnets"):  # while the agent plugs the instance
            subnets = self._subnets(inst["nets"][0]["network_id"])
        inst = self._wait_active(inst, name)
        nic = inst["nets"][0]
        return result.build(self.conf.cni_version, nic["ifname"], env.netns, nic, subnets, nic["metadata_hops"],
                            network.get("mtu"), self.conf.prev_result)  # fmt: skip

    def _subnets(self, network_id: str) -> dict[str, dict[str, Any]]:
        """The network's subnets by id (the metadata hops come with the instance: its port's `metadata_hops`, also
        where the token cannot see the network's metadata port)."""
        return {s["id"]: s for s in self.client.list_all(SUBNET, [("network_id", network_id)])}

    def _body(self, env: Env, name: str, network: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": name, "hostname": env.container_id[:12], "host": self.conf.host, "netns": env.netns,
            "description": f"{self.conf.mark} {self.conf.name}"[:255],
            "metadata": {"cni_container_id": env.container_id, "cni_ifname": env.ifname, "cni_network": self.conf.name},
        }  # fmt: skip
        if self.conf.project:
            body["project_id"] = self.conf.project
        if self.conf.port:
            port = self.one(PORT, self.conf.port)
            if port["network_id"] != network["id"]:
                raise CniError(INVALID_CONFIG, f"port {self.conf.port} is not on network {self.conf.network}")
            body["nets"] = [{"port": port["id"], "ifname": env.ifname}]
        elif self.conf.physnet:
            body["nets"] = [{"port": self._direct_port(network, name)["id"], "ifname": env.ifname}]
        elif self.conf.security_groups:
            # Instances take no groups: a port of the plugin's own carries them (from the first packet on).
            port_body: dict[str, Any] = {
                "network_id": network["id"], "name": name, "description": f"{self.conf.mark} {self.conf.name}"[:255],
                "security_groups": [self.one(SECURITY_GROUP, g)["id"] for g in self.conf.security_groups],
                "fixed_ips": [{"ip_address": ip} for ip in self.conf.fixed_ips] or None,
            }  # fmt: skip
            if self.conf.project:
                port_body["project_id"] = self.conf.project
            port = self.client.create(PORT, {k: v for k, v in port_body.items() if v is not None})
            body["nets"] = [{"port": port["id"], "ifname": env.ifname}]
        else:
            net: dict[str, Any] = {"network": network["id"], "ifname": env.ifname}
            for ip in self.conf.fixed_ips:
                net["v6-fixed-ip" if ":" in ip else "v4-fixed-ip"] = ip
            body["nets"] = [net]
        return body

    def _direct_port(self, network: dict[str, Any], name: str) -> dict[str, Any]:
        """A port of the plugin's own bound to an SR-IOV VF (Zun's `direct` port): the network must be on the
        configured physical network; a VF enforces no security groups, so the port has none."""
        if network.get("provider:physical_network") != self.conf.physnet:
            raise CniError(INVALID_CONFIG, f"network {self.conf.network} is not on physical network "
                           f"{self.conf.physnet}")  # fmt: skip
        body: dict[str, Any] = {
            "network_id": network["id"], "name": name, "description": f"{self.conf.mark} {self.conf.name}"[:255],
            "binding:vnic_type": "direct", "port_security_enabled": False,
        }  # fmt: skip
        for ip in self.conf.fixed_ips:
            body.setdefault("fixed_ips", []).append({"ip_address": ip})
        if self.conf.project:
            body["project_id"] = self.conf.project
        return self.client.create(PORT, body)

    def _wait_active(self, inst: dict[str, Any], name: str) -> dict[str, Any]:
        """Until the host's agent reports the port plugged; a failure or the deadline takes the instance away
        again (a DEL after a failed ADD then finds nothing to do)."""
        deadline = time.monotonic() + self.conf.timeout
        while inst["status"] != "ACTIVE":
            failed = inst["status"] == "ERROR" or inst.get("status_reason")
            if failed or time.monotonic() > deadline:
                with api("removing the instance that did not come up"):
                    self._delete(inst, name)
                if failed:
                    raise CniError(PLUG_FAILED, f"cloudnet could not plug the container: "
                                   f"{inst.get('status_reason') or 'no reason given'}",
                                   request_id=self.created_by)  # fmt: skip
                raise CniError(TRY_AGAIN_LATER, f"the instance was not ACTIVE within {self.conf.timeout:g} s (is "
                               f"the agent of host {self.conf.host} running?)", request_id=self.created_by)  # fmt: skip
            with api("waiting for the instance"):  # answered once the agent has reported
                inst = self.client.show_settled(INSTANCE, inst["id"], min(deadline - time.monotonic(), WAIT_STEP),
                                                0.02)  # fmt: skip
        return inst

    # -- DEL and GC --

    def _delete(self, inst: dict[str, Any], name: str) -> None:
        self.remove_quietly(INSTANCE, inst["id"])  # gone already is what DEL wants
        self._delete_own_ports([name])

    def _delete_own_ports(self, names: list[str]) -> None:
        """Ports the plugin made (for security groups, or a VF): an instance's delete only unbinds a port it was
        given."""
        if not (self.conf.security_groups or self.conf.physnet) or not names:
            return
        for name in names:
            for port in self.client.list_all(PORT, [("name", name)]):
                if str(port.get("description", "")).startswith(self.conf.mark) and not port.get("device_id"):
                    self.remove_quietly(PORT, port["id"])

    def remove_quietly(self, kind: Kind, ident: str) -> None:
        try:
            self.client.remove(kind, ident)
        except ApiError as exc:
            if exc.status != 404:
                raise

    def delete(self, env: Env) -> None:
        name = instance_name(self.conf, env.container_id, env.ifname)
        with api("deleting the instance"):
            found = self._mine(name)
            for inst in found:
                self.remove_quietly(INSTANCE, inst["id"])
            self._delete_own_ports([name])

    def gc(self) -> list[str]:
        """Remove the configuration's instances (and ports) on this host that no valid attachment names (or, with
        `valid_containers`, whose container is not among them)."""
        mine = prefix(self.conf)
        gone = []
        with api("collecting stale instances"):
            found = [i for i in self.client.list_all(INSTANCE, [("host", self.conf.host)])
                     if str(i.get("name", "")).startswith(mine)
                     and str(i.get("description", "")).startswith(self.conf.mark)]  # fmt: skip
            valid = self._valid_names(found)
            for inst in (i for i in found if i["name"] not in valid):
                self.remove_quietly(INSTANCE, inst["id"])
                gone.append(str(inst["name"]))
            if self.conf.security_groups or self.conf.physnet:
                network = self.one(NETWORK, self.conf.network)
                for port in self.client.list_all(PORT, [("network_id", network["id"])]):
                    name = str(port.get("name", ""))
                    if name.startswith(mine) and name not in valid and not port.get("device_id"):
                        self.remove_quietly(PORT, port["id"])
        return gone

    def _valid_names(self, found: list[dict[str, Any]]) -> set[str]:
        if self.conf.valid_containers is None:
            return {instance_name(self.conf, cid, ifname) for cid, ifname in self.conf.valid_attachments}
        live = self.conf.valid_containers
        return {str(i["name"]) for i in found if (i.get("metadata") or {}).get("cni_container_id") in live}

    # -- CHECK and STATUS --

    def check(self, env: Env) -> None:
        name = instance_name(self.conf, env.container_id, env.ifname)
        with api("reading the instance"):
            found = [i for i in self._mine(name) if i["netns"] == env.netns]
        if not found:
            raise CniError(CHECK_FAILED, f"no cloudnet instance for container {env.container_id} in {env.netns}")
        inst = found[0]
        if inst["status"] != "ACTIVE":
            raise CniError(CHECK_FAILED, f"instance {inst['id']} is {inst['status']}: "
                           f"{inst.get('status_reason') or 'not plugged'}")  # fmt: skip
        nic = inst["nets"][0]
        if nic.get("ifname") != env.ifname:
            raise CniError(CHECK_FAILED, f"instance {inst['id']} names its interface {nic.get('ifname')}, not "
                           f"{env.ifname}")  # fmt: skip
        result.check(self.conf.prev_result, env.ifname, env.netns, nic)
        sandbox.enter_and_check(env.netns, env.ifname, nic["mac_address"])  # last: it leaves the host's namespace

    def status(self) -> None:
        """Ready when cloudnet answers the plugin's token and shows it the network."""
        with api("reaching cloudnet", unavailable=NOT_AVAILABLE):
            try:
                self.one(NETWORK, self.conf.network)
            except ApiError as exc:
                if exc.status in (401, 403):
                    raise CniError(NOT_AVAILABLE, f"cloudnet refuses the plugin's token: {exc}") from None
                raise
