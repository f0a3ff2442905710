"""Each host's desired state: everything its agent needs to converge its dataplane (instances and their ports,
networks, subnets, routers with their forwards and SNAT addresses, metadata ports, ready pool ports, security
groups), read from one consistent snapshot."""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from typing import Any

from sqlalchemy import Connection, or_, select

from cloudnet.errors import BadRequest
from cloudnet.services.context import Context
from cloudnet.services.forwards import forward_targets, uplinks
from cloudnet.services.hosts.hosts import admin_only
from cloudnet.services.networks import network_config, networks, single_host
from cloudnet.services.ports import compute_ports, metadata_ports, port_views, sriov, trunks
from cloudnet.services.ports.port_specs import ROUTER_INTERFACE
from cloudnet.services.qos import qos_state
from cloudnet.services.security.host_security import agent_port, groups_of
from cloudnet.store import tables as t
from cloudnet.store import tables_subnetpools as tsp
from cloudnet.store.db import Store
from cloudnet.wire import guest_net

P = t.ports
A = t.ip_allocations
MAX_REQUEST_SCAN = 10000
# The types of agents' port status reports (services/hosts/hosts.py report_ports).
REPORT_TYPES = ("port.active", "port.failed", "port.down")
INSTANCE_COLUMNS = ("id", "name", "hostname", "project_id", "netns", "meta", "internal_meta", "ssh_keys", "user_data",
                    "metadata_tokens", "handoff", "kind")  # fmt: skip


def desired_state(store: Store, ctx: Context, host: str, since: str | None = None) -> dict[str, Any]:
    """Everything the agent of `host` needs to converge its dataplane, from one consistent snapshot. `since`: the
    revision of the log its agent has read up to; the state then also names the request that last changed each of
    its ports after that (`requests`): the agent's report of a port names it, though the agent skips those events."""
    admin_only(ctx)
    after = _revision_arg(since)
    with store.read(snapshot=True) as conn:
        revision = conn.execute(select(t.revision_counter.c.value).where(t.revision_counter.c.id == 1)).scalar() or 0
        I = t.instances  # noqa: E741
        # (the columns it needs: SQLite's timestamps cost a parse each)
        inst_rows = conn.execute(
            select(*[I.c[k] for k in INSTANCE_COLUMNS]).where(I.c.host == host).order_by(I.c.created_at, I.c.id)
        ).all()
        links, instance_ports, plugged_by_compute = host_ports(conn, host)
        by_instance: dict[str, list[str]] = defaultdict(list)
        ifnames: dict[str, list[str]] = defaultdict(list)  # each port's device name inside, in the same order
        for iid, pid, pos, ifname in links:
            by_instance[iid].append(pid)
            ifnames[iid].append(guest_net.ifname_at(ifname, pos))
        network_ids = set(conn.execute(select(P.c.network_id).distinct().where(P.c.id.in_(instance_ports))).scalars())
        # Ready pool ports bound here: their networks are plumbed ahead of the first instance (bridge,
        # router, metadata namespace and proxy), and the agent may park a device for each of them.
        PP, M = t.port_pools, t.pool_ports
        pool_rows = conn.execute(  # through the pools' (host, ...) and members' (pool_id, ...) indexes
            select(P.c.id, P.c.network_id, P.c.mac_address, P.c.admin_state_up, P.c.status, P.c.vif_type,
                   P.c.vif_details, P.c.port_security_enabled)
            .select_from(PP.join(M, M.c.pool_id == PP.c.id).join(P, P.c.id == M.c.port_id))
            .where(PP.c.host == host, P.c.device_owner == networks.POOL_FREE_OWNER, P.c.host_id == host)
        ).all()  # fmt: skip
        network_ids |= {r.network_id for r in pool_rows}
        # Their addresses: a parked device is configured as the instance that takes it will want it.
        A = t.ip_allocations
        pool_ips: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for port_id, subnet_id, address in conn.execute(
            select(A.c.port_id, A.c.subnet_id, A.c.ip_address).where(A.c.port_id.in_([r.id for r in pool_rows]))
        ):
            pool_ips[port_id].append({"subnet_id": subnet_id, "ip_address": address})
        routers = _routers(conn, network_ids)
        router_ports = [r["gateway"]["port_id"] for r in routers if r["gateway"]] + [
            i["port_id"] for r in routers for i in r["interfaces"]
        ]
        network_ids |= {r[0] for r in conn.execute(select(P.c.network_id).where(P.c.id.in_(router_ports)))}
        instance_networks = set(network_ids)
        metadata_rows = conn.execute(
            select(P.c.id, P.c.network_id).where(
                P.c.network_id.in_(instance_networks), P.c.device_owner == metadata_ports.DEVICE_OWNER
            )
        ).all()
        metadata_by_net = {nid: pid for pid, nid in metadata_rows}
        port_rows = conn.execute(
            select(P).where(P.c.id.in_(instance_ports + router_ports + list(metadata_by_net.values())))
        ).all()
        port_dicts = {p["id"]: p for p in port_views.to_dicts(conn, list(port_rows))}
        pool_ports = _pool_ports(conn, pool_rows, pool_ips)
        filtered = [agent_port(port_dicts[pid]) for pid in instance_ports if pid in port_dicts]
        security_groups, remote_groups = groups_of(conn, filtered + list(pool_ports.values()))
        direct = sriov.desired(conn, host)
        qos = qos_state.for_ports(conn, instance_ports)
        mine = {*instance_ports, *pool_ports}
        requests = None if after is None else port_requests(conn, after, int(revision), mine)
        nets = conn.execute(select(t.networks).where(t.networks.c.id.in_(network_ids))).all()
        SP = tsp.subnetpools  # (a subnet's address scope is its pool's: routers keep scopes apart)
        subs = conn.execute(
            select(t.subnets, SP.c.address_scope_id)
            .outerjoin(SP, SP.c.id == t.subnets.c.subnetpool_id)
            .where(t.subnets.c.network_id.in_(network_ids))
        ).all()
    subnets = {
        s.id: {
            "id": s.id, "network_id": s.network_id, "cidr": s.cidr, "ip_version": s.ip_version,
            "gateway_ip": s.gateway_ip, "host_routes": s.host_routes, "dns_nameservers": s.dns_nameservers,
            "enable_dhcp": s.enable_dhcp, "ipv6_ra_mode": s.ipv6_ra_mode, "ipv6_address_mode": s.ipv6_address_mode,
            "address_scope_id": s.address_scope_id,
        }
        for s in subs
    }  # fmt: skip
    prefixlen = {s["id"]: ipaddress.ip_network(s["cidr"]).prefixlen for s in subnets.values()}
    with_prefixlen([p["fixed_ips"] for p in port_dicts.values()] + list(pool_ips.values()), prefixlen)
    for r in routers:
        r["ports"] = {pid: port_dicts[pid] for pid in _router_port_ids(r) if pid in port_dicts}
    return {
        "revision": int(revision),
        "host": host,
        "instances": [
            {
                "id": i.id, "name": i.name, "hostname": i.hostname, "project_id": i.project_id,
                "netns": i.netns or None, "kind": i.kind or "container",
                "ports": by_instance.get(i.id, []), "ifnames": ifnames.get(i.id, []), "metadata": i.meta,
                "internal_metadata": i.internal_meta,
                "ssh_keys": i.ssh_keys, "user_data": i.user_data, "metadata_tokens": i.metadata_tokens,
                "handoff": i.handoff,
            }
            for i in inst_rows
        ] + plugged_by_compute,
        "ports": {pid: port_dicts[pid] for pid in instance_ports if pid in port_dicts},
        "networks": {
            n.id: {
                "id": n.id, "name": n.name, "mtu": n.mtu, "admin_state_up": n.admin_state_up,
                "router_external": n.router_external, "network_type": n.network_type,
                "physical_network": n.physical_network, "segmentation_id": n.segmentation_id,
                # Where this host serves the network's metadata (None: no instance of it here).
                "metadata_port": port_dicts.get(metadata_by_net.get(n.id, "")),
            }
            for n in nets
        },
        "subnets": subnets,
        "routers": routers,
        "sriov": direct,
        "pool_ports": pool_ports,
        "security_groups": security_groups,
        "remote_groups": remote_groups,
        # port id -> what the host enforces of its QoS policy (services/qos/qos_state.py)
        "qos": qos,
        # port id -> the request that last changed it after `since` (services/hosts/host_state.port_requests)
        **({} if requests is None else {"requests": requests}),
    }  # fmt: skip


def _revision_arg(raw: str | None) -> int | None:
    if raw is None:
        return None
    text = raw.strip()
    if not text.isdigit() or len(text) > 19:  # (no sign, no exponent; the column's range)
        raise BadRequest(f"Invalid input for since. Reason: '{raw[:40]}' is not a revision (an integer >= 0).")
    return int(text)


def port_requests(conn: Connection, after: int, upto: int, ports: set[str]) -> dict[str, str]:
    """port id -> the id of the last request that changed it in revisions (after, upto], of `ports` (the agents'
    own status reports left out: they realise a request, they are none). Only the last MAX_REQUEST_SCAN revisions
    are read (through the log's primary key): an agent that far behind names no request, as before."""
    E = t.events
    stmt = (
        select(E.c.resource_id, E.c.request_id)
        .where(E.c.revision > max(after, upto - MAX_REQUEST_SCAN), E.c.revision <= upto, E.c.resource == "port")
        .where(E.c.request_id.is_not(None), or_(E.c.type.is_(None), E.c.type.not_in(REPORT_TYPES)))
        .order_by(E.c.revision)
    )
    return {pid: rid for pid, rid in conn.execute(stmt) if pid in ports}


def host_ports(conn: Connection, host: str) -> tuple[list[Any], list[str], list[dict[str, Any]]]:
    """The host's instance links (instance id, port id, position, ifname), the ports its agent plugs (of its
    instances, of the VMs a compute service plugs, and their trunk subports), and those compute-plugged VMs."""
    I, IP = t.instances, t.instance_ports  # noqa: E741
    links = conn.execute(
        select(IP.c.instance_id, IP.c.port_id, IP.c.position, IP.c.ifname)
        .join(I, I.c.id == IP.c.instance_id)
        .where(I.c.host == host)
        .order_by(IP.c.instance_id, IP.c.position)
    ).all()
    # (a port whose binding the server refused is no host's to plug: services/networks/single_host.py)
    # (only the server's refusals: a port that failed on the agent stays, to be retried there)
    failed = {pid for pid, details in conn.execute(
        select(P.c.id, P.c.vif_details).join(IP, IP.c.port_id == P.c.id).join(I, I.c.id == IP.c.instance_id)
        .where(I.c.host == host, P.c.vif_type == "binding_failed")) if single_host.refused(details)}  # fmt: skip
    instance_ports = [pid for _iid, pid, _pos, _name in links if pid not in failed]
    # VMs a compute service plugs with plain ports (Nova's way): instances of their own here.
    plugged_by_compute = compute_ports.instances_on(conn, host)
    instance_ports += [pid for i in plugged_by_compute for pid in i["ports"]]
    # Trunk subports ride on their parent's device (a VLAN each): ports of this host, in no instance's list.
    instance_ports += trunks.subports_of(conn, instance_ports)
    return list(links), instance_ports, plugged_by_compute


def with_prefixlen(fixed_ip_lists: list[list[dict[str, Any]]], prefixlen: dict[str, int]) -> None:
    """Each fixed IP with its subnet's prefix length (in place): the agent configures address/prefixlen."""
    for fixed_ips in fixed_ip_lists:
        for f in fixed_ips:
            f["prefixlen"] = prefixlen[f["subnet_id"]]


def _pool_ports(conn: Connection, rows: list[Any], ips: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Ready pool ports as the agent plugs them: a parked device is configured (and filtered) as the instance that
    takes it will want it."""
    extra = port_views.related(conn, [r.id for r in rows], {"security_groups", "allowed_address_pairs"})
    return {
        r.id: agent_port({
            "id": r.id, "network_id": r.network_id, "mac_address": r.mac_address,
            "admin_state_up": r.admin_state_up, "status": r.status, "binding:vif_type": r.vif_type,
            "binding:vif_details": r.vif_details or {},
            "fixed_ips": sorted(ips.get(r.id, []), key=lambda f: (f["subnet_id"], f["ip_address"])),
            "port_security_enabled": r.port_security_enabled,
            "security_groups": extra["security_groups"].get(r.id, []),
            "allowed_address_pairs": extra["allowed_address_pairs"].get(r.id, []),
        })
        for r in rows
    }  # fmt: skip


def _router_port_ids(router: dict[str, Any]) -> list[str]:
    ids = [i["port_id"] for i in router["interfaces"]]
    if router["gateway"]:
        ids.append(router["gateway"]["port_id"])
    return ids


def _routers(conn: Connection, network_ids: set[str]) -> list[dict[str, Any]]:
    """Routers with an interface on one of these networks, with their interfaces and gateway."""
    R = t.routers
    router_ids = {
        r[0]
        for r in conn.execute(
            select(P.c.device_id).where(P.c.device_owner == ROUTER_INTERFACE, P.c.network_id.in_(network_ids))
        )
    }
    if not router_ids:
        return []
    rows = conn.execute(select(R).where(R.c.id.in_(router_ids)).order_by(R.c.id)).all()
    iface = conn.execute(
        select(P.c.device_id, P.c.id, P.c.network_id).where(
            P.c.device_owner == ROUTER_INTERFACE, P.c.device_id.in_(router_ids)
        )
    ).all()
    by_router: dict[str, list[dict[str, str]]] = defaultdict(list)
    for rid, pid, nid in iface:
        by_router[rid].append({"port_id": pid, "network_id": nid})
    gw_ids = [r.gw_port_id for r in rows if r.gw_port_id]
    gw_nets = {pid: nid for pid, nid in conn.execute(select(P.c.id, P.c.network_id).where(P.c.id.in_(gw_ids)))}
    # A network's forwards and SNAT address live on the router that is its uplink.
    served: dict[str, list[str]] = defaultdict(list)
    for nid in {i["network_id"] for ifaces in by_router.values() for i in ifaces}:
        router = uplinks.router_of(conn, nid)
        if router is not None:
            served[router[0]].append(nid)
    all_served = [nid for nids in served.values() for nid in nids]
    configs = {n: c or {} for n, c in conn.execute(select(t.networks.c.id, t.networks.c.config).where(
        t.networks.c.id.in_(all_served)))}  # fmt: skip
    # (only the targets a port holds: services/forwards/forward_targets.py)
    fwd_rows = forward_targets.live(
        conn, conn.execute(select(t.forwards).where(t.forwards.c.network_id.in_(all_served)))
    )
    return [
        {
            "id": r.id,
            "name": r.name,
            "admin_state_up": r.admin_state_up,
            "enable_snat": r.enable_snat,
            "routes": list(r.routes or []),
            "gateway": {"port_id": r.gw_port_id, "network_id": gw_nets.get(r.gw_port_id)} if r.gw_port_id else None,
            "interfaces": sorted(by_router.get(r.id, []), key=lambda i: i["port_id"]),
            "nat_addresses": {
                nid: {k: configs[nid][k] for k in network_config.NAT_VERSION if configs[nid].get(k)}
                for nid in sorted(served.get(r.id, []))
            },
            "forwards": [
                {
                    "id": f.id,
                    "revision_number": f.revision_number,
                    "network_id": f.network_id,
                    "listen_address": f.listen_address,
                    "config": f.config,
                    "ports": f.ports,
                    "idle": list(f.idle),
                }
                for f in fwd_rows
                if f.network_id in served.get(r.id, [])
            ],
        }
        for r in rows
    ]
