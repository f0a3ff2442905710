"""Kuryr's nested mode: the plugin runs inside a VM (or a node in a namespace) whose port on `link` is a trunk's
parent. A pod's port is made on the configured network and added to that trunk as a subport on the lowest free
VLAN; once the host's agent has realised the subport (ACTIVE), the pod gets that VLAN on the VM's device as its
interface: a veth whose pod end (CNI_IFNAME, the port's MAC, MTU and addresses) is made in the pod's namespace and
whose VM end, `cnk-<vid>`, tags what the pod sends and takes what `link` receives with that tag (vlan_bpf.py: no
8021q module needed in the VM either). DEL takes the subport off the trunk, deletes its port and the pair.

Nothing is remembered between calls: a pod's port is found by its name (as an instance is in attachments.py), its
VLAN in the trunk's subports, and the classifier on `link` is rebuilt from the `cnk-*` devices there, under a lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import time
from collections.abc import Iterator
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from cloudnet import vlan_bpf
from cloudnet.cli.errors import ApiError
from cloudnet.cli.resources import PORT, SECURITY_GROUP, SUBNET, Resources
from cloudnet.cni import result, sandbox
from cloudnet.cni.attachments import Attachments, api, instance_name, prefix
from cloudnet.cni.errors import CHECK_FAILED, INVALID_CONFIG, PLUG_FAILED, TRY_AGAIN_LATER, CniError
from cloudnet.cni.netconf import Env, NetConf
from cloudnet.wire import guest_net

END = "cnk-"  # + the VLAN id: a pod's end in the VM
SUBPORT_OWNER = "trunk:subport"  # (what the server makes a subport's device_owner)
VLANS = range(1, 4095)
ADD_TRIES = 8  # a VLAN another ADD took meanwhile (DuplicateSubPort): the next free one
LOCK_DIR = "/run"
ENODEV, EEXIST = 19, 17


@contextlib.contextmanager
def _iproute_in(path: str | None) -> Iterator[IPRoute]:
    """Netlink in the namespace at `path` (None: the plugin's own): the socket is made there, then the thread comes
    back."""
    if path is None:
        with IPRoute() as ipr:
            yield ipr
        return
    target = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if sandbox.LIBC.setns(target, sandbox.CLONE_NEWNET) != 0:
            raise CniError(PLUG_FAILED, f"cannot enter {path}")
        try:
            ipr = IPRoute()
        finally:
            sandbox.LIBC.setns(own, sandbox.CLONE_NEWNET)
    finally:
        os.close(target)
        os.close(own)
    with ipr:
        yield ipr


class Nested:
    def __init__(self, conf: NetConf, client: Resources) -> None:
        assert conf.nested is not None
        self.conf = conf
        self.link, self.link_ns = conf.nested
        self.client = client
        self.attachments = Attachments(conf, client)

    # -- the VM's trunk --

    def _trunk(self) -> dict[str, Any]:
        """The trunk whose parent is the port of `link` (found by its MAC, as Kuryr finds the VM's port)."""
        if self.link_ns is not None:
            sandbox.check_is_netns(self.link_ns, "nested.netns")
        with _iproute_in(self.link_ns) as ipr:
            found = ipr.link_lookup(ifname=self.link)
            if not found:
                raise CniError(INVALID_CONFIG, f"no interface {self.link} to nest pods on")
            mac = ipr.get_links(found[0])[0].get_attr("IFLA_ADDRESS")
        with api("looking up the VM's port"):
            ports = [p for p in self.client.list_all(PORT, [("mac_address", mac)]) if p.get("trunk_details")]
        if len(ports) != 1:
            raise CniError(INVALID_CONFIG, f"the port of {self.link} ({mac}) is no trunk's parent visible to the "
                           "plugin's token")  # fmt: skip
        with api("reading the VM's trunk"):
            return dict(self.client.get(f"trunks/{ports[0]['trunk_details']['trunk_id']}")["trunk"])

    def _own_port(self, name: str) -> dict[str, Any] | None:
        found = [p for p in self.client.list_all(PORT, [("name", name)])
                 if str(p.get("description", "")).startswith(self.conf.mark)]  # fmt: skip
        return found[0] if found else None

    # -- ADD --

    def add(self, env: Env) -> dict[str, Any]:
        sandbox.check_is_netns(env.netns)
        name = instance_name(self.conf, env.container_id, env.ifname)
        network = self.attachments.network()
        trunk = self._trunk()
        with api("making the pod's port"):
            port = self._own_port(name) or self.client.create(PORT, self._port_body(network, name))
            vid = self._join(trunk, port)
            subnets = {s["id"]: s for s in self.client.list_all(SUBNET, [("network_id", network["id"])])}
        port = self._wait_active(port)
        mtu = int(network.get("mtu") or 1500)
        with self._locked():
            self._plumb(env, port, vid, mtu, subnets)
        return result.build(self.conf.cni_version, env.ifname, env.netns, port, subnets, {}, mtu,
                            self.conf.prev_result)  # fmt: skip

    def _port_body(self, network: dict[str, Any], name: str) -> dict[str, Any]:
        body: dict[str, Any] = {"network_id": network["id"], "name": name,
                                "description": f"{self.conf.mark} {self.conf.name}"[:255]}  # fmt: skip
        if self.conf.security_groups:
            body["security_groups"] = [self.attachments.one(SECURITY_GROUP, g)["id"]
                                       for g in self.conf.security_groups]  # fmt: skip
        if self.conf.fixed_ips:
            body["fixed_ips"] = [{"ip_address": ip} for ip in self.conf.fixed_ips]
        if self.conf.project:
            body["project_id"] = self.conf.project
        return body

    def _join(self, trunk: dict[str, Any], port: dict[str, Any]) -> int:
        """The port's VLAN on the trunk: the one it has, or the lowest free one (again if another ADD took it)."""
        for _ in range(ADD_TRIES):
            mine = [s["segmentation_id"] for s in trunk["sub_ports"] if s["port_id"] == port["id"]]
            if mine:
                return int(mine[0])
            used = {s["segmentation_id"] for s in trunk["sub_ports"]}
            vid = next((v for v in VLANS if v not in used), None)
            if vid is None:
                raise CniError(TRY_AGAIN_LATER, f"trunk {trunk['id']} has no free VLAN left")
            try:
                sub = {"port_id": port["id"], "segmentation_type": "vlan", "segmentation_id": vid}
                trunk = dict(self.client.put(f"trunks/{trunk['id']}/add_subports", {"sub_ports": [sub]}))
            except ApiError as exc:
                if exc.status != 409:
                    raise
                trunk = dict(self.client.get(f"trunks/{trunk['id']}")["trunk"])
        raise CniError(TRY_AGAIN_LATER, f"no VLAN of trunk {trunk['id']} could be taken")

    def _wait_active(self, port: dict[str, Any]) -> dict[str, Any]:
        """Until the host's agent has realised the subport (its VLAN reaches the network), or the deadline."""
        deadline = time.monotonic() + self.conf.timeout
        while port["status"] != "ACTIVE":
            if time.monotonic() > deadline:
                raise CniError(TRY_AGAIN_LATER, f"subport {port['id']} was not ACTIVE within {self.conf.timeout:g} s")
            time.sleep(0.05)
            with api("waiting for the subport"):
                port = self.client.show(PORT, port["id"])
        return port

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """One plugin at a time changes `link`'s classifier (each rebuilds it from every pod's end)."""
        key = (self.link_ns or "self").replace("/", "_")
        fd = os.open(os.path.join(LOCK_DIR, f"cloudnet-cni-nested{key}-{self.link}.lock"),
                     os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)  # fmt: skip
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _plumb(self, env: Env, port: dict[str, Any], vid: int, mtu: int, subnets: dict[str, Any]) -> None:
        pod_fd = os.open(env.netns, os.O_RDONLY | os.O_CLOEXEC)
        try:
            with _iproute_in(self.link_ns) as vm:
                lower = vm.link_lookup(ifname=self.link)[0]
                end = END + str(vid)
                for stale in vm.link_lookup(ifname=end):  # an earlier ADD's (its pod end goes with it)
                    vm.link("del", index=stale)
                vm.link(
                    "add",
                    ifname=end,
                    kind="veth",
                    mtu=mtu,
                    state="up",
                    peer={"ifname": env.ifname, "address": port["mac_address"], "mtu": mtu, "net_ns_fd": pod_fd},
                )
                vlan_bpf.ensure(vm, vm.link_lookup(ifname=end)[0], vlan_bpf.tag_program(vid, lower), "tag")
                self._untag(vm, lower)
        finally:
            os.close(pod_fd)
        with _iproute_in(env.netns) as pod:
            idx = pod.link_lookup(ifname=env.ifname)[0]
            pod.link("set", index=idx, state="up")
            pod.link("set", index=1, state="up")  # lo
            for fixed in port["fixed_ips"]:
                cidr = ipaddress.ip_network(subnets[fixed["subnet_id"]]["cidr"])
                with contextlib.suppress(NetlinkError):  # (there already: a repeated ADD)
                    pod.addr("add", index=idx, address=fixed["ip_address"], prefixlen=cidr.prefixlen)
            for dst, gateway in guest_net.port_routes(port["fixed_ips"], subnets, {}, default=True):
                net = ipaddress.ip_network(dst)
                with contextlib.suppress(NetlinkError):
                    pod.route("replace", dst=str(net.network_address), dst_len=net.prefixlen, gateway=gateway,
                              oif=idx, family=10 if net.version == 6 else 2)  # fmt: skip

    def _untag(self, vm: IPRoute, lower: int) -> None:
        """`link`'s classifier from every pod end there (cnk-<vid>)."""
        names = {str(msg.get_attr("IFLA_IFNAME")): msg["index"] for msg in vm.get_links()}
        ends = sorted(
            (int(n[len(END) :]), i) for n, i in names.items() if n.startswith(END) and n[len(END) :].isdigit()
        )
        if ends:
            vlan_bpf.ensure(vm, lower, vlan_bpf.untag_program(ends), "untag")
        else:
            vlan_bpf.detach(vm, lower)

    # -- CHECK --

    def check(self, env: Env) -> None:
        name = instance_name(self.conf, env.container_id, env.ifname)
        with api("reading the pod's port"):
            port = self._own_port(name)
        if port is None or port.get("device_owner") != SUBPORT_OWNER:
            raise CniError(CHECK_FAILED, f"no subport for container {env.container_id}")
        if port["status"] != "ACTIVE":
            raise CniError(CHECK_FAILED, f"subport {port['id']} is {port['status']}")
        result.check(self.conf.prev_result, env.ifname, env.netns, port)
        sandbox.enter_and_check(env.netns, env.ifname, port["mac_address"])  # last: it leaves the host's namespace

    # -- DEL and GC --

    def delete(self, env: Env) -> None:
        with api("removing the pod's port"):
            port = self._own_port(instance_name(self.conf, env.container_id, env.ifname))
            vid = self._release(port) if port is not None else None
        self._unplumb(vid)

    def gc(self) -> None:
        """The configuration's pod ports that no valid attachment names: off the trunk, deleted, their pairs gone."""
        valid = {instance_name(self.conf, cid, ifname) for cid, ifname in self.conf.valid_attachments}
        mine = prefix(self.conf)
        with api("collecting stale pod ports"):
            stale = [p for p in self.client.list_all(PORT, [("device_owner", SUBPORT_OWNER)])
                     if str(p.get("name", "")).startswith(mine) and p["name"] not in valid
                     and str(p.get("description", "")).startswith(self.conf.mark)]  # fmt: skip
            vids = [self._release(p) for p in stale]
        for vid in vids:
            self._unplumb(vid)

    def _release(self, port: dict[str, Any]) -> int | None:
        """The port off its trunk and deleted; the VLAN it had."""
        vid = None
        if port.get("device_owner") == SUBPORT_OWNER and port.get("device_id"):
            trunk = self.client.get(f"trunks/{port['device_id']}")["trunk"]
            vid = next((s["segmentation_id"] for s in trunk["sub_ports"] if s["port_id"] == port["id"]), None)
            self.client.put(f"trunks/{trunk['id']}/remove_subports", {"sub_ports": [{"port_id": port["id"]}]})
        self.attachments.remove_quietly(PORT, port["id"])
        return vid

    def _unplumb(self, vid: int | None) -> None:
        with self._locked(), _iproute_in(self.link_ns) as vm:
            found = vm.link_lookup(ifname=self.link)
            if vid is not None:
                for idx in vm.link_lookup(ifname=END + str(vid)):
                    with contextlib.suppress(NetlinkError):
                        vm.link("del", index=idx)
            if found:
                self._untag(vm, found[0])
