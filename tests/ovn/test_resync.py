"""Full resync: rows deleted or changed behind cloudnet's back are repaired, rows carrying cloudnet's key for
objects the database does not have are removed, others' rows stay; hostile names and ids can't reach NB as
anything but data; an NB outage marks the sync failed with its reason, and it recovers."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import insert

from cloudnet.northbound.sync import STANDBY, NorthboundSync
from cloudnet.store import tables as t
from tests.ovn.nb import as_list, by_name, keyed, rows
from tests.support.api import create, create_network, create_subnet
from tests.support.ovn import OvnSandbox, ovn_sandbox
from tests.support.server import RunningServer


@pytest.fixture
def ovn() -> Iterator[OvnSandbox]:
    with ovn_sandbox() as sandbox:
        yield sandbox


def _sync(server: RunningServer, ovn: OvnSandbox) -> NorthboundSync:
    sync = NorthboundSync(server.store, ovn.nb_url, interval=0.1, timeout=5)
    sync.start()
    return sync


def test_resync_repairs_and_removes_what_changed_behind_its_back(
    api: httpx.Client, server: RunningServer, ovn: OvnSandbox
) -> None:
    net = create_network(api, name="n1", mtu=1450)
    create_subnet(api, net["id"], "10.1.0.0/24")
    port = create(api, "ports", "port", network_id=net["id"], name="vm")
    ls_name = f"cloudnet-{net['id']}"
    sync = _sync(server, ovn)
    try:
        sync.wait_synced()
    finally:
        sync.stop()
    # behind cloudnet's back, while no writer runs: a port deleted, a switch changed, a row with cloudnet's key for
    # a network the database doesn't have, and a switch of someone else's
    ovn.nbctl("lsp-del", port["id"])
    ovn.nbctl("set", "Logical_Switch", ls_name, "other_config:mtu=9000")
    ovn.nbctl("ls-add", "cloudnet-ghost", "--", "set", "Logical_Switch", "cloudnet-ghost",
              'external_ids:"cloudnet:key"="ls/ghost"')  # fmt: skip
    ovn.nbctl("ls-add", "someone-elses")
    sync = _sync(server, ovn)
    try:
        status = sync.wait_synced()
        assert "lsp/" + port["id"] in status.last_report and "created" in status.last_report
        assert f"ls/{net['id']} (other_config)" in status.last_report
        assert "deleted [ls/ghost]" in status.last_report
        assert set(by_name(ovn, "Logical_Switch")) == {ls_name, "someone-elses"}
        assert keyed(ovn, "Logical_Switch")[f"ls/{net['id']}"]["other_config"] == {"mtu": "1450"}
        assert port["id"] in by_name(ovn, "Logical_Switch_Port")

        # while it runs: a change behind its back is repaired within a few passes (no database change needed)
        ovn.nbctl("lsp-set-addresses", port["id"], "02:00:00:00:00:01 10.1.0.99")
        deadline = time.monotonic() + 10
        while as_list(by_name(ovn, "Logical_Switch_Port")[port["id"]]["addresses"]) != [
            f"{port['mac_address']} {port['fixed_ips'][0]['ip_address']}"
        ]:
            assert time.monotonic() < deadline, "the changed port was not repaired"
            time.sleep(0.05)
    finally:
        sync.stop()


def test_hostile_names_stay_data_and_odd_ids_are_refused(
    api: httpx.Client, server: RunningServer, ovn: OvnSandbox
) -> None:
    odd = 'x" || 1 == 1; ovn-nbctl ls-del *\n\u202e\u0000end'.replace("\u0000", "")
    net = create_network(api, name=odd[:255])
    create_subnet(api, net["id"], "10.2.0.0/24")
    port = create(api, "ports", "port", network_id=net["id"], name=odd)
    # A row the API could never make (ids are the server's UUIDs), as a corrupted or hostile database might hold it
    with server.store.write() as tx:
        tx.conn.execute(insert(t.networks).values(
            id='evil" || inport == "x', project_id="p", name="n", description="", created_at=tx.now,
            updated_at=tx.now, revision_number=0, admin_state_up=True, shared=False, mtu=1500, status="ACTIVE",
            router_external=False, network_type="local", config={}, routes=[], port_security_enabled=True))  # fmt: skip
        tx.record("network", "evil", "create")
    sync = _sync(server, ovn)
    try:
        status = sync.wait_synced()
    finally:
        sync.stop()
    switches = rows(ovn, "Logical_Switch")
    assert [s["name"] for s in switches] == [f"cloudnet-{net['id']}"]
    assert switches[0]["external_ids"]["cloudnet:name"] == odd[:255]
    assert by_name(ovn, "Logical_Switch_Port")[port["id"]]["external_ids"]["cloudnet:name"] == odd
    assert any("evil" in reason for reason in status.refused)
    ovn.nbctl("--wait=sb", "sync")  # northd still takes the whole NB


def test_nb_outage_marks_the_sync_failed_and_it_recovers(
    api: httpx.Client, server: RunningServer, ovn: OvnSandbox
) -> None:
    net = create_network(api, name="before")
    sync = _sync(server, ovn)
    try:
        sync.wait_synced()
        ovn.stop_central()
        deadline = time.monotonic() + 10
        while sync.status.ok is not False:
            assert time.monotonic() < deadline, f"the outage went unnoticed: {sync.status}"
            time.sleep(0.05)
        assert "unreachable" in sync.status.reason and ovn.nb_url in sync.status.reason
        later = create_network(api, name="during")  # the API keeps serving; NB catches up after
        ovn.restart_central()
        status = sync.wait_synced(timeout=30)
        assert status.ok and status.reason == ""
        assert set(keyed(ovn, "Logical_Switch")) == {f"ls/{net['id']}", f"ls/{later['id']}"}
    finally:
        sync.stop()


def test_one_writer_at_a_time_and_a_standby_takes_over(
    api: httpx.Client, server: RunningServer, ovn: OvnSandbox
) -> None:
    first_net = create_network(api, name="one")
    first = _sync(server, ovn)
    second: NorthboundSync | None = None
    try:
        first.wait_synced()
        second = _sync(server, ovn)  # another server process's writer, on the same database and NB
        deadline = time.monotonic() + 10
        while second.status.reason != STANDBY:
            assert time.monotonic() < deadline, f"the second writer does not stand by: {second.status}"
            time.sleep(0.05)
        later = create_network(api, name="two")
        first.wait_synced()
        assert second.status.passes == 0 and second.status.reason == STANDBY  # it never wrote
        first.stop()  # its connection goes, and the lock with it: the standby takes over with a full resync
        ovn.nbctl("ls-del", f"cloudnet-{later['id']}")  # (behind everyone's back, while no one writes)
        last = create_network(api, name="three")
        status = second.wait_synced()
        assert status.ok and status.passes >= 1
        wanted = {f"ls/{n['id']}" for n in (first_net, later, last)}
        deadline = time.monotonic() + 10  # (the deleted switch: in that pass, or the next once its IDL saw the delete)
        while set(keyed(ovn, "Logical_Switch")) != wanted:
            assert time.monotonic() < deadline, f"the standby did not take over: {second.status}"
            time.sleep(0.05)
    finally:
        first.stop()
        if second is not None:
            second.stop()
