"""What NB, SB and one chassis hold, compared with what cloudnet's database implies, row by row.

NB: the rows northbound.desired computes from the database, against the rows `ovn-nbctl` lists (the real client, so
the writer's own diff is not its own judge): the same keys in every table cloudnet writes, no row there without a
key, every column cloudnet sets equal, references to the rows of the keys named, every child in its parent's column.
SB and the chassis: against the host's desired state (the API's /hosts/<host>/state): each instance port bound to
this chassis and up, nothing else bound here, a Port_Binding for exactly the NB ports, one Chassis and
Chassis_Private (ours, naming the networks whose metadata it serves), br-int and the chassis' namespace holding
exactly the wanted ports, and metadata and instance namespaces exactly for what is wanted.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from cloudnet.dataplane.base import metadata_ns, metadata_ns_prefix
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.ovn import hybrid, names
from cloudnet.namespaces import managed_ns_prefix
from cloudnet.northbound import apply, desired
from cloudnet.northbound.rows import KEY
from cloudnet.ovn import daemons
from cloudnet.store.db import Store
from cloudnet.wire.guest_net import VM_DEVICE_PREFIX
from tests.ovn.nb import as_list, decode, rows
from tests.support.ovn import OvnSandbox

Json = dict[str, Any]


def _same(have: Any, want: Any) -> bool:
    if isinstance(want, dict):
        return have == want
    if isinstance(want, list):
        return sorted(as_list(have), key=str) == sorted(want, key=str)
    return bool(have == want)


def nb_differences(ovn: OvnSandbox, store: Store, gateway_chassis: list[str]) -> list[str]:
    want = desired.read(store, gateway_chassis)
    found: list[str] = []
    have: dict[str, dict[str, Json]] = {}
    key_of: dict[str, str] = {}  # NB uuid -> cloudnet key
    for table in apply.TABLES:
        have[table] = {}
        for row in rows(ovn, table):
            key = row["external_ids"].get(KEY)
            if key is None or key in have[table]:
                found.append(f"{table} {row['_uuid']}: {'no cloudnet key' if key is None else f'a second {key}'}")
                continue
            have[table][key] = row
            key_of[row["_uuid"]] = key
    wanted: dict[str, dict[str, desired.Row]] = defaultdict(dict)
    for spec in want.rows:
        wanted[spec.table][spec.key] = spec
    parents: dict[str, list[str]] = defaultdict(list)  # child uuid -> "parent key.column", one each
    for table, column in apply.LINKS:
        for key, row in have[table].items():
            for child in as_list(row[column]):
                parents[child].append(f"{key}.{column}")
    for table in apply.TABLES:
        missing, extra = set(wanted[table]) - set(have[table]), set(have[table]) - set(wanted[table])
        if missing or extra:
            found.append(f"{table}: missing {sorted(missing)}, extra {sorted(extra)}")
        for key in sorted(set(wanted[table]) & set(have[table])):
            spec, row = wanted[table][key], have[table][key]
            for column, value in spec.columns.items():
                if not _same(row[column], value):
                    found.append(f"{key}.{column}: {row[column]!r} != {value!r}")
            for column, keys in spec.refs.items():
                if sorted(key_of.get(u, u) for u in as_list(row[column])) != sorted(keys):
                    found.append(f"{key}.{column} -> {sorted(key_of.get(u, u) for u in as_list(row[column]))} "
                                 f"!= {sorted(keys)}")  # fmt: skip
            linked = parents.get(row["_uuid"], [])
            expected = [f"{spec.parent}.{spec.parent_column}"] if spec.parent else []
            if spec.parent and linked != expected:
                found.append(f"{key} is a child of {linked}, not {expected}")
    return found


def _sb(ovn: OvnSandbox, table: str, columns: str) -> list[Json]:
    data = json.loads(ovn.sbctl("--format=json", f"--columns=_uuid,{columns}", "list", table))
    return [dict(zip(data["headings"], [decode(v) for v in row], strict=True)) for row in data["data"]]


def _host_wants(state: Json) -> tuple[dict[str, str], set[str], dict[str, str], set[str]]:
    """(br-int port name -> iface-id, the instance ports, network -> its metadata port, the devices besides the
    br-int ports: a VM's tap, bridge and veth end) that `state` implies."""
    ports: dict[str, str] = {}
    instance_ports: set[str] = set()
    served: dict[str, str] = {}
    devices: set[str] = set()
    for inst in state["instances"]:
        for port_id in inst["ports"]:
            port = state["ports"][port_id]
            instance_ports.add(port_id)
            if inst.get("kind") == "vm":
                nic = hybrid.nic(port_id)
                ports[nic.switch_leg] = port_id
                devices |= {nic.tap, nic.bridge, nic.bridge_leg}
            else:
                ports[names.tap(port_id)] = port_id
            meta = state["networks"][port["network_id"]].get("metadata_port")
            if meta:
                served[port["network_id"]] = meta["id"]
                ports[names.metadata_leg(meta["id"])] = meta["id"]
    return ports, instance_ports, served, devices


def chassis_differences(ovn: OvnSandbox, chassis: daemons.Chassis, state: Json) -> list[str]:
    found: list[str] = []
    host = chassis.name
    want_ports, instance_ports, served, want_devices = _host_wants(state)

    # SB: who is bound where, one Chassis and Chassis_Private (ours), saying which metadata it serves
    chassis_rows = _sb(ovn, "Chassis", "name")
    private = _sb(ovn, "Chassis_Private", "name,chassis,external_ids")
    if [c["name"] for c in chassis_rows] != [host] or [p["name"] for p in private] != [host]:
        found.append(f"Chassis {[c['name'] for c in chassis_rows]}, Chassis_Private {[p['name'] for p in private]}")
    ours = {c["_uuid"] for c in chassis_rows if c["name"] == host}
    meta = next((p["external_ids"].get(names.METADATA_NETWORKS) for p in private if p["name"] == host), None)
    if meta != ",".join(sorted(served)):
        found.append(f"Chassis_Private says it serves {meta!r}, not {','.join(sorted(served))!r}")
    bindings = _sb(ovn, "Port_Binding", "logical_port,type,chassis,up")
    here = {b["logical_port"]: b for b in bindings if as_list(b["chassis"]) and as_list(b["chassis"])[0] in ours}
    if set(here) != instance_ports:
        found.append(f"bound here: extra {sorted(set(here) - instance_ports)}, "
                     f"missing {sorted(instance_ports - set(here))}")  # fmt: skip
    found += [f"{p} bound but not up" for p, b in sorted(here.items()) if as_list(b["up"]) != [True]]
    logical = {lsp["name"] for lsp in rows(ovn, "Logical_Switch_Port")} | {
        lrp["name"] for lrp in rows(ovn, "Logical_Router_Port")
    }
    bound_ports = {b["logical_port"] for b in bindings if b["type"] != "chassisredirect"}
    if bound_ports != logical:
        found.append(f"Port_Binding vs NB ports: extra {sorted(bound_ports - logical)}, "
                     f"missing {sorted(logical - bound_ports)}")  # fmt: skip

    # the chassis: br-int's ports (with their iface-ids), the veths in its namespace, the namespaces
    vsctl = ["ovs-vsctl", f"--db={chassis.ovs_url}", "--timeout=10"]
    listed = json.loads(daemons.run(chassis.rundir, [*vsctl, "--format=json", "--columns=name,external_ids",
                                                     "list", "Interface"]))  # fmt: skip
    ifaces = {r[0]: dict(decode(r[1])) for r in listed["data"]}
    on_bridge = set(daemons.run(chassis.rundir, [*vsctl, "list-ports", daemons.INTEGRATION_BRIDGE]).split())
    if on_bridge != set(want_ports):
        found.append(f"br-int ports: extra {sorted(on_bridge - set(want_ports))}, "
                     f"missing {sorted(set(want_ports) - on_bridge)}")  # fmt: skip
    found += [f"{name}: iface-id {ifaces.get(name, {}).get(names.IFACE_ID)!r} != {pid!r}"
              for name, pid in sorted(want_ports.items())
              if name in on_bridge and ifaces.get(name, {}).get(names.IFACE_ID) != pid]  # fmt: skip
    links = json.loads(daemons.run(chassis.rundir, ["ip", "-j", "link", "show"], chassis.netns))
    prefixes = (names.TAP, names.METADATA_LEG, VM_DEVICE_PREFIX, names.VM_BRIDGE, names.VM_BRIDGE_LEG,
                names.VM_SWITCH_LEG, hybrid.TEMP_BRIDGE, hybrid.TEMP_BRIDGE_LEG, hybrid.TEMP_SWITCH_LEG)  # fmt: skip
    devices = {link["ifname"] for link in links if link["ifname"].startswith(prefixes)}
    wanted = set(want_ports) | want_devices
    if devices != wanted:
        found.append(f"devices: extra {sorted(devices - wanted)}, missing {sorted(wanted - devices)}")
    want_ns = {metadata_ns(host, n) for n in served}
    have_ns = set(netns.names(metadata_ns_prefix(host)))
    if have_ns != want_ns:
        found.append(f"metadata namespaces: extra {sorted(have_ns - want_ns)}, missing {sorted(want_ns - have_ns)}")
    want_ns = {i["netns"] for i in state["instances"] if i["netns"]}  # (a VM has none)
    have_ns = set(netns.names(managed_ns_prefix(host)))
    if have_ns != want_ns:
        found.append(f"instance namespaces: extra {sorted(have_ns - want_ns)}, missing {sorted(want_ns - have_ns)}")
    return found
