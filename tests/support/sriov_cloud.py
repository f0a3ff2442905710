"""Helpers for SR-IOV tests: a host whose report carries a VF inventory, direct ports, and the instance
binding the lead wires into services/instances.py (reserve the VF, set device_id, link the port)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import insert, select

from cloudnet.dataplane.sriov import inventory as inv
from cloudnet.services import common
from cloudnet.services.context import Context
from cloudnet.services.ports import sriov
from cloudnet.store import tables as t
from cloudnet.store.db import Store
from tests.support.api import create

ADMIN = Context.admin()


def register_host(api: httpx.Client, host: str, sysfs: Path, mappings: dict[str, list[str]],
                  exclude: dict[str, set[str]] | None = None) -> dict[str, Any]:  # fmt: skip
    report = {"uplinks": {}, "sriov": inv.inventory_report(inv.read_inventory(mappings, exclude, sysfs))}
    r = api.put(f"/hosts/{host}", json={"host": {"agent_version": "1", "report": report}})
    assert r.status_code == 200, r.text
    return report


def vlan_network(api: httpx.Client, physnet: str = "physnet2", vlan: int = 100, cidr: str = "10.9.0.0/24") -> str:
    body: dict[str, Any] = {"name": f"{physnet}-{vlan}", "provider:physical_network": physnet}
    body.update({"provider:network_type": "vlan", "provider:segmentation_id": vlan} if vlan else
                {"provider:network_type": "flat"})  # fmt: skip
    net = create(api, "networks", "network", **body)
    create(api, "subnets", "subnet", network_id=net["id"], cidr=cidr, gateway_ip=cidr.replace("0/24", "1"))
    return str(net["id"])


def direct_port(api: httpx.Client, network_id: str, **extra: Any) -> dict[str, Any]:
    body = {"network_id": network_id, "binding:vnic_type": "direct", "port_security_enabled": False, **extra}
    return create(api, "ports", "port", **body)


def bind(store: Store, port_id: str, host: str, instance_id: str | None = None, position: int = 0) -> dict[str, Any]:
    """What instance creation does for a direct port: reserve + device_id (+ the instance link)."""
    with store.write() as tx:
        row = tx.conn.execute(select(t.ports).where(t.ports.c.id == port_id)).one()
        binding = sriov.reserve_in_tx(tx, ADMIN, row, host)
        if instance_id:
            common.touch(tx, t.ports, port_id, "port", row.project_id,
                         {"device_id": instance_id, "device_owner": "compute:cloudnet"})  # fmt: skip
            tx.conn.execute(insert(t.instance_ports).values(instance_id=instance_id, port_id=port_id,
                                                            position=position, created_by_instance=False))  # fmt: skip
        return binding


def release(store: Store, port_id: str) -> bool:
    with store.write() as tx:
        row = tx.conn.execute(select(t.ports).where(t.ports.c.id == port_id)).one()
        return sriov.release_in_tx(tx, row)
