"""The chassis' Open_vSwitch database (ovsdbapp, one connection): the ports of br-int this driver made.

ovsdbapp rather than ovs-vsctl: values travel as OVSDB data, never as text a command line parses, and a plug costs
one transaction on an open connection instead of a process (not measured yet against ovs-vsctl); each
transaction waits until ovs-vswitchd has applied it (cur_cfg), as ovs-vsctl does.
"""

from __future__ import annotations

import threading
from typing import Any

from cloudnet.dataplane.ovn import names
from cloudnet.ovn import idl
from cloudnet.ovn.daemons import INTEGRATION_BRIDGE, cms_options

MAPPINGS = "ovn-bridge-mappings"
CMS_OPTIONS = "ovn-cms-options"


class Vswitch:
    def __init__(self, url: str, host: str, bridge: str = INTEGRATION_BRIDGE, timeout: float = 10.0) -> None:
        self.url = url
        self.host = host
        self.bridge = bridge
        self.timeout = timeout
        self._api: idl.VswitchApi | None = None
        self._lock = threading.Lock()

    def api(self) -> idl.VswitchApi:
        with self._lock:
            if self._api is None:
                self._api = idl.connect_vswitch(self.url, self.timeout)
            return self._api

    def close(self) -> None:
        with self._lock:
            if self._api is not None:
                self._api.ovsdb_connection.stop()
                self._api = None

    def ours(self) -> dict[str, str]:
        """The Interfaces this host's driver made: name -> iface-id."""
        rows = self.api().db_find_rows("Interface", ("external_ids", "=", {names.HOST_ID: self.host}))
        return {row.name: row.external_ids.get(names.IFACE_ID, "") for row in rows.execute(check_error=True)}

    def iface_id(self, name: str) -> str | None:
        rows = self.api().db_find_rows("Interface", ("name", "=", name)).execute(check_error=True)
        return rows[0].external_ids.get(names.IFACE_ID) if rows else None

    def foreign(self, name: str) -> bool:
        """An Interface of that name that this host's driver did not make (someone else's port)."""
        rows = self.api().db_find_rows("Interface", ("name", "=", name)).execute(check_error=True)
        return bool(rows) and rows[0].external_ids.get(names.HOST_ID) != self.host

    def datapath_type(self) -> str:
        """br-int's datapath type as set ("": the default, the kernel's "system"; "netdev": the userspace one)."""
        found = self.api().db_find_rows("Bridge", ("name", "=", self.bridge)).execute(check_error=True)
        return str(found[0].datapath_type) if found else ""

    def plug(self, name: str, iface_id: str, **more: str) -> None:
        """`name` a port of br-int whose Interface says it is the logical port `iface_id` (ovn-controller claims it)."""
        ids: dict[str, Any] = {names.IFACE_ID: iface_id, names.HOST_ID: self.host, **more}
        api = self.api()
        with api.transaction(check_error=True) as txn:
            txn.add(api.add_port(self.bridge, name, may_exist=True, external_ids=ids))
            txn.add(api.db_set("Interface", name, ("external_ids", ids)))

    def connect_uplink(self, physnet: str, bridge: str, iface: str) -> None:
        """`iface` the one port of `bridge` (made with br-int's datapath type), and `physnet:bridge` in this
        chassis' `ovn-bridge-mappings` (other physical networks' mappings kept): ovn-controller then patches
        br-int to it for the localnet ports of `physnet`. What is there already is left as it is."""
        api = self.api()
        if api.db_find_rows("Bridge", ("name", "=", iface)).execute(check_error=True):
            raise ValueError(f"uplink {iface} of {physnet} is a bridge, not an interface")
        datapath = self.datapath_type()
        current = api.db_get("Open_vSwitch", ".", "external_ids").execute(check_error=True)
        mappings = dict(m.split(":", 1) for m in current.get(MAPPINGS, "").split(",") if ":" in m)
        elsewhere = [b.name for b in api.db_list_rows("Bridge").execute(check_error=True)
                     if b.name != bridge and any(p.name == iface for p in b.ports)]  # fmt: skip
        if elsewhere:  # (moved, not shared: a port is on one bridge)
            api.del_port(iface, bridge=elsewhere[0], if_exists=True).execute(check_error=True)
        mappings[physnet] = bridge
        text = ",".join(f"{k}:{v}" for k, v in sorted(mappings.items()))
        with api.transaction(check_error=True) as txn:
            txn.add(api.add_br(bridge, may_exist=True, datapath_type=datapath or None))
            txn.add(api.add_port(bridge, iface, may_exist=True))
            if current.get(MAPPINGS) != text:
                txn.add(api.db_set("Open_vSwitch", ".", ("external_ids", {MAPPINGS: text})))

    def set_cms_options(self, availability_zone: str | None, gateway: bool) -> None:
        """This chassis' `ovn-cms-options` (daemons.cms_options, other options kept): ovn-controller copies them to
        its SB Chassis row, where Neutron's tools read the zone. A chassis started by cloudnet has them from the
        start; one of --ovs-db gets them here."""
        api = self.api()
        current = api.db_get("Open_vSwitch", ".", "external_ids").execute(check_error=True).get(CMS_OPTIONS, "")
        wanted = cms_options(availability_zone, gateway, current)
        if wanted != current:
            api.db_set("Open_vSwitch", ".", ("external_ids", {CMS_OPTIONS: wanted})).execute(check_error=True)

    def unplug(self, name: str) -> None:
        api = self.api()
        api.del_port(name, if_exists=True).execute(check_error=True)
