"""Instances: what the metadata service serves and what ports are plugged into (Zun-style `nets`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from sqlalchemy import Connection, delete, insert, select

from cloudnet import namespaces
from cloudnet.errors import BadRequest, Conflict, Forbidden, InvalidInput, not_found
from cloudnet.services import common
from cloudnet.services.context import Context
from cloudnet.services.networks import single_host
from cloudnet.services.pools import pool_claims, pool_model
from cloudnet.services.ports import metadata_ports, port_specs, port_views, ports, sriov
from cloudnet.services.query import Attr, ListQuery, Page, fetch_page
from cloudnet.services.validation import Body, check_ifname, check_ip, is_uuid, parse
from cloudnet.store import tables as t
from cloudnet.store.db import Store, Tx
from cloudnet.wire.guest_net import ifname_at, vm_device

I = t.instances  # noqa: E741
IP = t.instance_ports
P = t.ports
DEVICE_OWNER = "compute:cloudnet"

ATTRS: dict[str, Attr] = {
    **common.standard_attrs(I),
    "hostname": Attr(I.c.hostname),
    "host": Attr(I.c.host),
    "netns": Attr(I.c.netns),
    "kind": Attr(I.c.kind),
}


class Net(Body):
    port: str | None = None
    network: str | None = None
    v4_fixed_ip: str | None = Field(None, alias="v4-fixed-ip")
    v6_fixed_ip: str | None = Field(None, alias="v6-fixed-ip")
    # Its device's name inside the instance's namespace (default eth<position>): a runtime's choice (CNI_IFNAME).
    ifname: str | None = Field(None, max_length=15)

    _ip = field_validator("v4_fixed_ip", "v6_fixed_ip")(lambda v: None if v is None else check_ip(v))
    _ifname = field_validator("ifname")(lambda v: None if v is None else check_ifname(v))

    @model_validator(mode="after")
    def _one(self) -> Net:
        if (self.port is None) == (self.network is None):
            raise ValueError("each net needs exactly one of 'port' or 'network'")
        if self.port is not None and (self.v4_fixed_ip or self.v6_fixed_ip):
            raise ValueError("a fixed IP can only be requested with 'network'")
        return self


class SshKey(Body):
    name: str = Field(..., min_length=1, max_length=255)
    key: str = Field(..., min_length=1, max_length=16384)


MetadataTokens = Literal["optional", "required"]
Kind = Literal["container", "vm"]


class InstanceCreate(Body):
    name: str = Field(..., min_length=1, max_length=255)
    hostname: str | None = Field(None, max_length=255)
    description: str = Field("", max_length=255)
    project_id: str | None = Field(None, max_length=255)
    tenant_id: str | None = Field(None, max_length=255)
    host: str | None = Field(None, min_length=1, max_length=255)
    # A name under /run/netns or a path such as /proc/PID/ns/net; left out, cloudnet provides one (a claimed
    # pool port's parked namespace, ready at once, or a new one the host's agent makes).
    netns: str | None = Field(None, min_length=1, max_length=4096)
    user_data: str | None = Field(None, max_length=65535)
    metadata: dict[str, str] = Field(default_factory=dict)
    ssh_keys: list[SshKey] = Field(default_factory=list)
    nets: list[Net] = Field(default_factory=list)
    # IMDSv2: "required" makes every metadata request carry a session token (PUT /latest/api/token).
    metadata_tokens: MetadataTokens = "optional"
    # The runtime takes the plugged device out of the namespace cloudnet provides (Docker's Join): the agent then
    # keeps the host end as the port's device and never re-creates the other end.
    handoff: bool = False
    # "vm": no namespace; the host's agent makes a tap device per NIC (named as Nova names it) that a VMM opens.
    kind: Kind = "container"

    _netns = field_validator("netns")(lambda v: None if v is None else check_netns(v))

    @model_validator(mode="after")
    def _distinct_ifnames(self) -> InstanceCreate:
        names = [ifname_at(net.ifname, position) for position, net in enumerate(self.nets)]
        if len(set(names)) != len(names):
            raise ValueError(f"each net needs an interface name of its own (got {', '.join(names)})")
        if self.kind == "vm" and (self.netns is not None or self.handoff or any(n.ifname for n in self.nets)):
            raise ValueError("a vm has no network namespace: netns, handoff and a net's ifname are for containers")
        return self


def check_netns(value: str) -> str:
    """An existing namespace, spelt plainly, and not one cloudnet makes however it is spelt."""
    if namespaces.is_reserved(namespaces.spelled(value)):
        raise ValueError(
            f"names starting with '{namespaces.RESERVED_NS_PREFIX}' are reserved for the namespaces cloudnet makes; "
            "leave netns out to have one made"
        )
    return value


class InstanceUpdate(Body):
    name: str | None = Field(None, min_length=1, max_length=255)
    description: str | None = Field(None, max_length=255)
    user_data: str | None = Field(None, max_length=65535)
    metadata: dict[str, str] | None = None
    metadata_tokens: MetadataTokens | None = None


def _net(p: dict[str, Any], ifname: str, hops: Mapping[str, str], kind: str) -> dict[str, Any]:
    """An instance's NIC, from its port's API shape and its name inside (with why its binding failed, when it
    did), and the next hop towards 169.254.169.254 on each of its IPv4 subnets (`metadata_hops`: what its guest is
    given, even where the caller cannot see the network's metadata port, as on another project's shared network).
    A VM's NIC also names its host device (`device`: the tap its VMM opens)."""
    keys = ("network_id", "mac_address", "fixed_ips", "status", "binding:vnic_type", "binding:vif_type")
    reason = (p["binding:vif_details"] or {}).get("reason") if p["binding:vif_type"] == "binding_failed" else None
    mine = {f["subnet_id"]: hops[f["subnet_id"]] for f in p["fixed_ips"] if f["subnet_id"] in hops}
    return {"port_id": p["id"], "ifname": ifname, **{k: p[k] for k in keys}, "binding_failure": reason,
            "metadata_hops": mine, "device": vm_device(p["id"]) if kind == "vm" else None}  # fmt: skip


def _metadata_hops(conn: Connection, network_ids: Iterable[str]) -> dict[str, str]:
    """The metadata ports' IPv4 addresses on these networks, by subnet."""
    A = t.ip_allocations
    rows = conn.execute(select(A.c.subnet_id, A.c.ip_address).join(P, P.c.id == A.c.port_id).where(
        P.c.network_id.in_(list(set(network_ids))), P.c.device_owner == metadata_ports.DEVICE_OWNER))  # fmt: skip
    return {subnet_id: address for subnet_id, address in rows if ":" not in address}


def _status(nets: list[dict[str, Any]]) -> tuple[str, str | None]:
    """ERROR when a port is, ACTIVE once every port is plugged and reported by the host's agent, else BUILD;
    and why not ACTIVE, when the agent said why (Zun's status_reason)."""
    statuses = {n["status"] for n in nets}
    status = "ERROR" if "ERROR" in statuses else "ACTIVE" if statuses <= {"ACTIVE"} else "BUILD"
    reasons = [f"port {n['port_id']}: {n['binding_failure']}" for n in nets if n["binding_failure"]]
    return status, "; ".join(reasons) or None


def settled(inst: dict[str, Any]) -> bool:
    """Done with: ACTIVE or ERROR, or still building but with a reason from its host's agent (a waiter's answer,
    GET ?wait=S)."""
    return inst["status"] != "BUILD" or bool(inst["status_reason"])


def _shape(r: Mapping[str, Any], tags: list[str] | None, nets: list[dict[str, Any]]) -> dict[str, Any]:
    """The API shape of an instance, from its column values, tags and NICs."""
    d = common.standard_fields(r, tags)
    status, reason = _status(nets)
    d.update(
        {
            "hostname": r["hostname"],
            "host": r["host"],
            "kind": r["kind"] or "container",
            "netns": r["netns"] or None,
            "user_data": r["user_data"],
            "metadata": r["meta"],
            "ssh_keys": r["ssh_keys"],
            "metadata_tokens": r["metadata_tokens"],
            "handoff": bool(r["handoff"]),
            "nets": nets,
            "status": status,
            "status_reason": reason,
        }
    )
    return d


def _dicts(conn: Connection, rows: list[Any]) -> list[dict[str, Any]]:
    ids = [r.id for r in rows]
    links = conn.execute(
        select(IP.c.instance_id, IP.c.port_id, IP.c.position, IP.c.ifname)
        .where(IP.c.instance_id.in_(ids))
        .order_by(IP.c.position)
    ).all()
    port_rows = conn.execute(select(P).where(P.c.id.in_([link.port_id for link in links]))).all()
    port_info = {p["id"]: p for p in port_views.to_dicts(conn, list(port_rows))}
    nets: dict[str, list[dict[str, Any]]] = defaultdict(list)
    hops = _metadata_hops(conn, (p["network_id"] for p in port_info.values()))
    kinds = {r.id: r.kind for r in rows}
    for iid, pid, position, ifname in links:
        p = port_info.get(pid)
        if p is not None:
            nets[iid].append(_net(p, ifname_at(ifname, position), hops, kinds[iid]))
    tags = common.load_tags(conn, ids)
    return [_shape(r._mapping, tags.get(r.id), nets.get(r.id, [])) for r in rows]


def _visible(ctx: Context) -> Any:
    return common.only_visible(select(I), I, ctx)


def list_instances(store: Store, ctx: Context, q: ListQuery) -> Page:
    with store.read() as conn:
        rows, more = fetch_page(conn, I, ATTRS, _visible(ctx), q, "instance")
        return Page(_dicts(conn, rows), more)


def get_instance(store: Store, ctx: Context, instance_id: str) -> dict[str, Any]:
    with store.read() as conn:
        return _dicts(conn, [common.get_row(conn, I, "instance", instance_id, ctx)])[0]


def _reload(conn: Connection, instance_id: str) -> dict[str, Any]:
    return _dicts(conn, [conn.execute(select(I).where(I.c.id == instance_id)).one()])[0]


def _default_host(tx: Tx) -> str:
    names = [r[0] for r in tx.conn.execute(select(t.hosts.c.name).limit(2))]
    if len(names) != 1:
        raise BadRequest("Invalid input for host. Reason: a host is required when not exactly one host is registered.")
    return names[0]


def create_instances(store: Store, ctx: Context, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    specs = [parse(InstanceCreate, b) for b in bodies]
    with store.write() as tx:
        return [_create(tx, ctx, spec) for spec in specs]


def _create(tx: Tx, ctx: Context, spec: InstanceCreate) -> dict[str, Any]:
    """Create one instance; its API shape, built from what was written (a claimed port's shape comes with
    the claim; only other ports are read back)."""
    if spec.netns is not None and not ctx.names_host_resources:
        # A host's namespaces are the runtime's (Nova, Zun: the service role) or an admin's to name.
        raise Forbidden("Only admins and the service role may name an existing network namespace (netns); leave "
                        "netns out to have cloudnet make one for the instance")  # fmt: skip
    if spec.handoff and not ctx.names_host_resources:
        raise Forbidden("Only admins and the service role may take an instance's device out of its namespace "
                        "(handoff)")  # fmt: skip
    if spec.handoff and spec.netns is not None:
        raise InvalidInput("handoff is for a namespace cloudnet provides: leave netns out")
    row = common.new_standard(ctx, spec.project_id or spec.tenant_id, tx.now, spec.name, spec.description, "instance")
    host = spec.host or _default_host(tx)
    if spec.host and not tx.conn.execute(select(t.hosts.c.name).where(t.hosts.c.name == host)).first():
        raise InvalidInput(f"host {host} is not a registered host (no agent has reported from it)")
    I = t.instances  # noqa: E741
    if (
        spec.netns is not None
        and tx.conn.execute(select(I.c.id).where(I.c.host == host, I.c.netns == spec.netns).limit(1)).first()
    ):  # (another spelling of the same namespace is the agent's to find: it refuses it too)
        raise Conflict(f"Network namespace {spec.netns} on host {host} is in use by another instance",
                       type="NetnsInUse")  # fmt: skip
    row.update(
        hostname=spec.hostname or spec.name, host=host, netns=spec.netns, user_data=spec.user_data,
        meta=spec.metadata, ssh_keys=[k.model_dump() for k in spec.ssh_keys], metadata_tokens=spec.metadata_tokens,
        handoff=spec.handoff, kind=spec.kind,
    )  # fmt: skip
    instance_id = row["id"]
    binding = {"device_id": instance_id, "device_owner": DEVICE_OWNER, "host_id": host}
    links: list[dict[str, Any]] = []
    claimed_ports: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    for position, net in enumerate(spec.nets):
        direct = False
        if net.port is not None:
            port_id, direct = _bind_existing(tx, ctx, net.port, row["project_id"], host, seen)
            if direct and spec.kind == "vm":  # (a VF reaches a VM only as a PCI device: not cloudnet's to attach)
                raise Conflict(f"Port {port_id} not usable for the instance: a vm takes binding:vnic_type normal "
                               "ports only.", type="PortNotUsable")  # fmt: skip
            created = False
        else:
            fixed = [port_specs.FixedIp(ip_address=ip) for ip in (net.v4_fixed_ip, net.v6_fixed_ip) if ip]
            port_spec = port_specs.PortCreate(
                network_id=net.network or "", project_id=row["project_id"] if ctx.is_admin else None,
                name=f"{spec.name}-{ifname_at(net.ifname, position)}", device_id=instance_id, device_owner=DEVICE_OWNER,
                host_id=host, fixed_ips=fixed or None,
            )  # fmt: skip
            if not is_uuid(port_spec.network_id):
                raise not_found("network", port_spec.network_id)
            claimed = None
            if not fixed:  # a ready port of the host's pool for this network (made on first demand if enabled)
                claimed = pool_claims.claim_in_tx(tx, ctx, host, row["project_id"], port_spec.network_id, None,
                                            port_spec.name, instance_id, DEVICE_OWNER,
                                            create=pool_model.for_instances(tx.store),
                                            take_parked=position == 0 and row["netns"] is None
                                            and spec.kind == "container")  # fmt: skip
            if claimed is None:
                (port_id,) = ports.create_in_tx(tx, ctx, [port_spec])
            else:
                port_id = claimed["id"]
                claimed_ports[port_id] = claimed
                if position == 0 and row["netns"] is None and spec.kind == "container":
                    row["netns"] = _parked_namespace(claimed, host)
            created = True
        links.append({"instance_id": instance_id, "port_id": port_id, "position": position, "ifname": net.ifname,
                      "created_by_instance": created})  # fmt: skip
        if not created:
            # A direct port's host binding was written with its VF (sriov.reserve_in_tx).
            extra = {k: v for k, v in binding.items() if not (direct and k == "host_id")}
            ports.update_in_tx(tx, ctx, port_id, port_specs.PortUpdate(), extra=extra)
    if spec.kind == "vm":
        row["netns"] = ""  # (none: its NICs are taps)
    elif row["netns"] is None:
        row["netns"] = namespaces.new_managed_ns(host)  # made by the host's agent
    # The row goes in once its namespace is known (a claimed port's parked one, or a new name).
    tx.conn.execute(insert(I).values(**row))
    if links:
        tx.conn.execute(insert(IP), links)
    for network_id in sorted({r[0] for r in tx.conn.execute(select(P.c.network_id).where(
            P.c.id.in_([link["port_id"] for link in links])))}):  # fmt: skip
        metadata_ports.ensure(tx, network_id)
    tx.record("instance", instance_id, "create", row["project_id"])
    failed = set(single_host.check_bindings(tx, [link["port_id"] for link in links], host))
    others = [link["port_id"] for link in links if link["port_id"] not in claimed_ports or link["port_id"] in failed]
    if others:
        rows = tx.conn.execute(select(P).where(P.c.id.in_(others))).all()
        claimed_ports.update((p["id"], p) for p in port_views.to_dicts(tx.conn, list(rows)))
    hops = _metadata_hops(tx.conn, (p["network_id"] for p in claimed_ports.values()))
    return _shape(row, [], [_net(claimed_ports[link["port_id"]], ifname_at(link["ifname"], link["position"]), hops,
                                 spec.kind) for link in links])  # fmt: skip


def _parked_namespace(port: dict[str, Any], host: str) -> str | None:
    """The namespace the host's agent parked a claimed pool port's device in, configured (--park-pool-devices):
    the instance takes it over whole, with nothing left to plug. None when there is none (yet)."""
    name = (port.get("binding:vif_details") or {}).get("prepared_netns")
    return name if isinstance(name, str) and namespaces.is_managed_ns(host, name) else None


def _bind_existing(tx: Tx, ctx: Context, port_id: str, project_id: str, host: str, seen: set[str]) -> tuple[str, bool]:
    """Zun's checks for a pre-created port, in Zun's order and words."""
    port = tx.conn.execute(select(P).where(P.c.id == port_id)).first()
    if port is None or not (ctx.is_admin or port.project_id == ctx.project_id):
        raise not_found("port", port_id)
    if port.project_id != project_id:
        raise Conflict(f"Port {port_id} not usable for the instance: it belongs to another project.",
                       type="PortNotUsable")  # fmt: skip
    if port.device_id or port_id in seen:
        raise Conflict(f"Port {port_id} is still in use.", type="PortInUse")
    if port.status in ("ACTIVE", "BUILD", "ERROR"):
        raise Conflict(f"Port {port_id} not usable for the instance: its status is {port.status}.",
                       type="PortNotUsable")  # fmt: skip
    if port.vif_type == "binding_failed":
        raise Conflict(f"Binding failed for port {port_id}.", type="PortBindingFailed")
    if port.host_id and port.host_id != host:
        raise Conflict(f"Port {port_id} not usable for the instance: it is bound to host {port.host_id}.",
                       type="PortNotUsable")  # fmt: skip
    seen.add(port_id)
    if sriov.is_direct(port):
        sriov.reserve_in_tx(tx, ctx, port, host)  # the lowest free VF of the right physical network
        return port_id, True
    return port_id, False


def update_instance(store: Store, ctx: Context, instance_id: str, body: dict[str, Any]) -> dict[str, Any]:
    spec = parse(InstanceUpdate, body)
    given = spec.model_fields_set
    with store.write() as tx:
        row = common.get_row(tx.conn, I, "instance", instance_id, ctx)
        changes: dict[str, Any] = {}
        for key, column in (("name", "name"), ("description", "description"), ("metadata", "meta"),
                            ("metadata_tokens", "metadata_tokens")):  # fmt: skip
            if key in given and getattr(spec, key) is not None:
                changes[column] = getattr(spec, key)
        if "user_data" in given:
            changes["user_data"] = spec.user_data
        common.touch(tx, I, instance_id, "instance", row.project_id, changes, row=row)
        return _reload(tx.conn, instance_id)


def delete_instance(store: Store, ctx: Context, instance_id: str) -> None:
    with store.write() as tx:
        row = common.get_row(tx.conn, I, "instance", instance_id, ctx)
        links = tx.conn.execute(select(IP.c.port_id, IP.c.created_by_instance).where(IP.c.instance_id == instance_id))
        for port_id, created in links.all():
            port = tx.conn.execute(select(P).where(P.c.id == port_id)).first()
            if port is None:
                continue
            if created:
                if not pool_claims.release_in_tx(tx, port):  # pool ports go back to their pool
                    ports.delete_in_tx(tx, port)
            elif sriov.is_direct(port):
                sriov.release_in_tx(tx, port)  # VF freed, pci keys and binding cleared, port kept
            else:
                unbound = {"device_id": "", "device_owner": "", "host_id": "", "status": "DOWN", "vif_type": "unbound",
                           "vif_details": {}}  # fmt: skip
                ports.update_in_tx(tx, ctx, port_id, port_specs.PortUpdate(), extra=unbound)
        tx.conn.execute(delete(IP).where(IP.c.instance_id == instance_id))
        tx.conn.execute(delete(t.tags).where(t.tags.c.resource_id == instance_id))
        tx.conn.execute(delete(I).where(I.c.id == instance_id))
        tx.record("instance", instance_id, "delete", row.project_id)
