"""ovsdbapp APIs with their connection per instance.

ovsdbapp's backends keep their connection on the class (set by the first instance only), so a second API object of
the same class in one process (an agent's chassis beside the server's, a test's) would silently talk to the first
one's database. These subclasses keep it per instance.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ovs.stream import Stream
from ovsdbapp.backend.ovs_idl import connection, idlutils
from ovsdbapp.backend.ovs_idl import event as row_event
from ovsdbapp.schema.open_vswitch import impl_idl as ovs_impl
from ovsdbapp.schema.ovn_southbound import impl_idl as sb_impl

from cloudnet.ovn.jsonparser import use_c_parser


class _OwnConnection:
    _own: Any = None

    @property
    def ovsdb_connection(self) -> Any:
        return self._own

    @ovsdb_connection.setter
    def ovsdb_connection(self, value: Any) -> None:
        self._own = value


class VswitchApi(_OwnConnection, ovs_impl.OvsdbIdl):  # type: ignore[misc]
    """The Open_vSwitch database of one chassis."""


class SouthboundApi(_OwnConnection, sb_impl.OvnSbApiIdlImpl):  # type: ignore[misc]
    """OVN's southbound database, mirroring only the tables given at connect."""


def use_ssl(key: Path, cert: Path, ca: Path) -> None:
    """This process's key, certificate and CA for `ssl:` remotes (the OVS library keeps one set per process)."""
    Stream.ssl_set_private_key_file(str(key))
    Stream.ssl_set_certificate_file(str(cert))
    Stream.ssl_set_ca_cert_file(str(ca))


def follow_leader(idl: Any, retry: float = 1.0) -> None:
    """Retry a lost connection every `retry` seconds, not with the library's growing backoff. A clustered database's
    leader moves: while the election runs, every member refuses a leader-only IDL, which, once it has tried each
    remote, backs off as from a server that is down (1, 2, 4, 8 s): with a 3-member NB the writer found its new
    leader 3-16 s after the old one was killed (the election: 1-1.6 s; bench/ovn_cluster.py). Set on the
    reconnect FSM itself: its set_backoff() floors at 1 s."""
    reconnect = idl._session.reconnect
    reconnect.min_backoff = reconnect.max_backoff = int(retry * 1000)


def connect_vswitch(url: str, timeout: float = 10.0) -> VswitchApi:
    use_c_parser()
    idl = connection.OvsdbIdl.from_server(url, "Open_vSwitch")
    return VswitchApi(connection.Connection(idl=idl, timeout=timeout))


class _EventIdl(connection.OvsdbIdl):  # type: ignore[misc]
    """An IDL that hands every row change to a RowEventHandler (its events run on the handler's thread)."""

    def __init__(self, remote: str, helper: Any, handler: row_event.RowEventHandler) -> None:
        super().__init__(remote, helper)
        self.notify_handler = handler

    def notify(self, event: str, row: Any, updates: Any = None) -> None:
        self.notify_handler.notify(event, row, updates)


def connect_southbound(
    url: str, tables: tuple[str, ...], events: list[row_event.RowEvent], timeout: float = 10.0
) -> SouthboundApi:
    """The SB database with only `tables` mirrored (a big SB holds every chassis' flows: a chassis needs few), and
    `events` watched."""
    use_c_parser()
    handler = row_event.RowEventHandler()
    handler.watch_events(events)
    helper = idlutils.get_schema_helper(url, "OVN_Southbound")
    for table in tables:
        if table in helper.schema_json["tables"]:
            helper.register_table(table)
    idl = _EventIdl(url, helper, handler)
    follow_leader(idl)
    return SouthboundApi(connection.Connection(idl=idl, timeout=timeout))
