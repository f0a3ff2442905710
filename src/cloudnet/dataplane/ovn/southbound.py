"""The southbound database as one chassis follows it (ovsdbapp's SB IDL, as neutron-ovn-metadata-agent does).

Which logical ports ovn-controller has bound to this chassis (Port_Binding.chassis is this chassis and `up`, where
the column exists, is true) is read from the IDL's mirror at every pass, so after a reconnect (the IDL fetches
everything again) or a new SB database, the next pass sees what SB holds now: nothing is cached here. A change of
our bindings sets `changed` and calls whoever `listen`s (the agent, waiting to report a port it plugged).

What it writes: the networks whose metadata this chassis serves, in its Chassis_Private row's external_ids (Chassis
on an SB without that table), compared and rewritten at every pass, so a reconnect repairs it too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ovsdbapp.backend.ovs_idl import event as row_event

from cloudnet.dataplane.ovn import names
from cloudnet.ovn import idl

TABLES = ("Chassis", "Chassis_Private", "Encap", "Port_Binding", "Datapath_Binding")


class _OurBindings(row_event.RowEvent):  # type: ignore[misc]
    """Any Port_Binding whose chassis or `up` changed: a port may have been bound or unbound."""

    def __init__(self, notify: Callable[[], None]) -> None:
        super().__init__((self.ROW_CREATE, self.ROW_UPDATE, self.ROW_DELETE), "Port_Binding", None)
        self.notify = notify
        self.event_name = "cloudnet-port-binding"

    def match_fn(self, event: str, row: Any, old: Any = None) -> bool:
        return event != self.ROW_UPDATE or hasattr(old, "chassis") or hasattr(old, "up")

    def run(self, event: str, row: Any, old: Any) -> None:
        self.notify()


class Southbound:
    def __init__(self, url: str, chassis: str, timeout: float = 10.0) -> None:
        self.url = url
        self.chassis = chassis
        self.timeout = timeout
        self.changed = threading.Event()
        self._listeners: list[Callable[[], None]] = []
        self._api: idl.SouthboundApi | None = None
        self._lock = threading.Lock()

    def listen(self, wake: Callable[[], None]) -> None:
        """Call `wake` (on the IDL's event thread: it must only signal) whenever a binding changes."""
        self._listeners.append(wake)

    def _binding_changed(self) -> None:
        self.changed.set()
        for wake in self._listeners:
            wake()

    def api(self) -> idl.SouthboundApi:
        with self._lock:
            if self._api is None:
                self._api = idl.connect_southbound(
                    self.url, TABLES, [_OurBindings(self._binding_changed)], self.timeout
                )
            return self._api

    def close(self) -> None:
        with self._lock:
            if self._api is not None:
                self._api.ovsdb_connection.stop()
                self._api.idl.notify_handler.shutdown()
                self._api = None

    def connected(self) -> bool:
        with self._lock:
            api = self._api
        return api is not None and api.idl._session.is_connected()

    def bound(self) -> set[str]:
        """The logical ports ovn-controller has bound to this chassis (and set up, where SB says so)."""
        out = set()
        for row in self.api().db_list_rows("Port_Binding").execute(check_error=True):
            chassis = row.chassis
            if not chassis or chassis[0].name != self.chassis:
                continue
            up = getattr(row, "up", None)
            if up is None or up == [] or up == [True]:
                out.add(row.logical_port)
        return out

    def publish_metadata_networks(self, networks: list[str]) -> bool:
        """This chassis' row says it serves the metadata of `networks`; False while ovn-controller has not made the
        row yet. Written only when it differs."""
        api = self.api()
        value = ",".join(sorted(networks))
        for table in ("Chassis_Private", "Chassis"):
            if table not in api.tables:
                continue
            rows = api.db_find_rows(table, ("name", "=", self.chassis)).execute(check_error=True)
            if not rows:
                continue
            if rows[0].external_ids.get(names.METADATA_NETWORKS) != value:
                api.db_set(table, rows[0].uuid, ("external_ids", {names.METADATA_NETWORKS: value})).execute(
                    check_error=True
                )
            return True
        return False
