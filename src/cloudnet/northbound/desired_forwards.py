"""Network forwards and floating IPs (one model: services/forwards/forwards.py) on the router that is their network's
uplink.

Per-port rules become Load_Balancer rows, one per forward and protocol, with a VIP per listen port as Incus's OVN
driver writes them: a listen range is expanded port by port, onto the target range of the same length or all onto
its one target port (OVN 23.03 has no port ranges, and refuses a backend without a port behind a VIP with one). The
load balancer is linked from the router (traffic from outside) and from the network's switch (instances reaching the
listen address from inside: hairpin). A forward's whole-address target (a floating IP's port) is a `dnat_and_snat`
NAT row on the router, and a load balancer with the bare address as its VIP on the switch only (hairpin, below).
Addresses and ports are parsed again here: a forward whose stored values do not parse is left out and reported.

Both links are needed, and they are what a VIP costs (bench/ovn_lb_placement.py): a switch does no load balancing for
traffic entering it from a router port, so traffic from outside needs the router's copy; the router's copy alone
DNATs an instance's connection to a neighbour (or itself) without SNAT, the backend answers it directly and the
reply is never un-DNATed, so hairpin needs the switch's (lb_force_snat_ip works on gateway routers only, and would
hide every outside client's address from the backend). Per VIP that is 2 logical and 2 OpenFlow flows on the
router (one of each per distinct backend), 2 and 4 on the switch; 10,000 VIPs took about 7.7 s from NB to OpenFlow
linked to both, 2.5-3.6 s to the router only, and ovn-northd 23.03 recomputes everything twice on each change, so
the size of the whole set is what one more forward costs too. A Load_Balancer_Group for the two, northd threads,
ovn-monitor-all or no lflow cache changed none of it measurably. OVN 25.03 (Debian 13) changes load balancers in
ovn-northd incrementally: one more forward beside 10,000 ports is in OpenFlow in ~80 ms (23.03: ~1.6 s, same
session); but a VIP linked to both costs 8 OpenFlow flows there, not 6 (the router's copy adds a gateway redirect per
backend and un-DNATs in both directions), so realising 10,000 takes as much CPU as on 23.03 (~10 s), and the
placement stays: both links are needed on both releases.

The whole address's switch copy exists for hairpin through the router's NAT row, which OVN 25.03 no longer passes
from the target itself: since 23.06 a distributed gateway port does SNAT and DNAT in separate conntrack zones (the
common zone, NB_Global use_common_zone, breaks a gateway port with load balancers and SNAT, i.e. ours), and since
24.09 traffic routed into an inner network is committed to the SNAT zone too; the target's packet to its own floating
address, looped through the gateway port, then takes 9 conntrack recirculations, and OVS's userspace datapath drops a
packet past 8 ("Max recirculation depth exceeded"). A neighbour's took 8. On the switch the VIP is load balanced at
the sender's port and the target's own connection turned around there (OVN's hairpin SNAT, to the VIP: the target
sees its floating address as the source, as through the router), in 4; a neighbour's connection is DNATed there and
keeps its own source address, as through a port forward. Traffic from outside still meets the NAT row: a switch does
no load balancing for traffic from a router port.
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from typing import Any

from sqlalchemy import Connection, select

from cloudnet.northbound.rows import Desired, Row, address, ids
from cloudnet.services.forwards import forward_targets, uplinks
from cloudnet.services.forwards.forward_rules import parse_ports
from cloudnet.store import tables as t


def _endpoint(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def vips(listen: str, specs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """{protocol: {"listen:port": "target:port"}} of a forward's port specifications."""
    out: dict[str, dict[str, str]] = defaultdict(dict)
    for spec in specs:
        protocol = spec["protocol"]
        if protocol not in ("tcp", "udp"):
            raise ValueError(f"protocol {protocol!r}")
        target = address(spec["target_address"])
        listen_ports = [p for lo, hi in parse_ports(str(spec["listen_port"])) for p in range(lo, hi + 1)]
        target_text = str(spec.get("target_port") or "")
        target_ports = [p for lo, hi in parse_ports(target_text) for p in range(lo, hi + 1)] if target_text else []
        if not target_ports:
            target_ports = listen_ports
        elif len(target_ports) == 1:
            target_ports = target_ports * len(listen_ports)
        if len(target_ports) != len(listen_ports):
            raise ValueError("listen and target port counts differ")
        for lp, tp in zip(listen_ports, target_ports, strict=True):
            out[protocol][_endpoint(listen, lp)] = _endpoint(target, tp)
    return dict(out)


def add(conn: Connection, out: Desired, routers: set[str], switches: set[str]) -> dict[str, list[str]]:
    """Rows for every forward whose network has an uplink router among `routers`; returns the load balancers each
    router and switch row links, {row key: [load balancer keys]}."""
    links: dict[str, list[str]] = defaultdict(list)
    F = t.forwards
    # (only the targets a port holds: services/forwards/forward_targets.py)
    rows = forward_targets.live(conn, conn.execute(select(F).where(F.c.network_id.is_not(None)).order_by(F.c.id)))
    router_of: dict[str, str | None] = {}
    for f in rows:
        if f.network_id not in router_of:
            found = uplinks.router_of(conn, f.network_id)
            router_of[f.network_id] = found[0] if found else None
        router_id = router_of[f.network_id]
        if router_id not in routers or f.network_id not in switches:
            continue
        try:
            listen = address(f.listen_address)
            by_protocol = vips(listen, list(f.ports or []))
            whole = (f.config or {}).get("target_address")
            target = address(whole) if whole else None
        except (ValueError, TypeError, KeyError) as exc:
            out.refused.append(f"forward {f.id!r}: left out ({exc})")
            continue
        lr = f"lr/{router_id}"
        for protocol, entries in sorted(by_protocol.items()):
            key = f"lb/{f.id}/{protocol}"
            out.rows.append(Row("Load_Balancer", key, {
                "name": f"cn-fwd-{f.id}-{protocol}", "protocol": [protocol], "vips": entries,
                "external_ids": ids(key, forward_id=f.id, network_id=f.network_id, router_id=router_id),
            }))  # fmt: skip
            links[lr].append(key)
            links[f"ls/{f.network_id}"].append(key)
        if target is not None and ipaddress.ip_address(target).version == ipaddress.ip_address(listen).version:
            key = f"dnat/{f.id}"
            out.rows.append(Row("NAT", key, {
                "type": "dnat_and_snat", "external_ip": listen, "logical_ip": target,
                "external_ids": ids(key, forward_id=f.id, network_id=f.network_id, router_id=router_id),
            }, parent=lr, parent_column="nat"))  # fmt: skip
            key = f"lb/{f.id}/address"  # (no protocol, no port: every packet to the address; a port's VIP wins)
            out.rows.append(Row("Load_Balancer", key, {
                "name": f"cn-fwd-{f.id}-address", "protocol": [], "vips": {listen: target},
                "external_ids": ids(key, forward_id=f.id, network_id=f.network_id, router_id=router_id),
            }))  # fmt: skip
            links[f"ls/{f.network_id}"].append(key)
    return links
