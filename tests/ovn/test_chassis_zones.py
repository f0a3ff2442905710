"""A chassis' availability zone in its `ovn-cms-options` when the agent's OVN driver runs on an Open_vSwitch
database it did not start (--ovs-db): the driver writes `availability-zones=NAME` there on its full passes, keeps
the operator's other options, and puts the zone back when something rewrote it; ovn-controller copies the options to
the chassis' SB row, where Neutron's tools (and `ovn-sbctl`) read them."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from cloudnet.dataplane.ovn.driver import OvnDataplane
from cloudnet.ovn import daemons
from tests.support.mdata_raw import wait_for
from tests.support.ovn import OvnSandbox, ovn_sandbox


@pytest.fixture(scope="module")
def ovn() -> Iterator[OvnSandbox]:
    with ovn_sandbox() as sandbox:
        sandbox.add_chassis()
        yield sandbox


def sb_options(ovn: OvnSandbox, chassis: str) -> str:
    rows = json.loads(ovn.sbctl("--format=json", "--columns=other_config", "find", "Chassis", f"name={chassis}"))
    return str(dict(rows["data"][0][0][1]).get("ovn-cms-options", ""))


def set_options(ch: daemons.Chassis, value: str) -> None:
    daemons.run(ch.rundir, ["ovs-vsctl", f"--db={ch.ovs_url}", "set", "Open_vSwitch", ".",
                            f'external_ids:ovn-cms-options="{value}"'], ch.netns)  # fmt: skip


def test_the_driver_writes_the_zone_into_a_chassis_it_did_not_start(ovn: OvnSandbox, api: httpx.Client) -> None:
    ch = ovn.chassis[0]
    set_options(ch, "enable-chassis-as-extport-host,availability-zones=old")  # (an operator's, before the agent)
    assert api.put(f"/hosts/{ch.name}", json={"host": {"availability_zone": "az-x"}}).status_code == 200
    state = api.get(f"/hosts/{ch.name}/state").json()
    dataplane = OvnDataplane(ch.name, ch.ovs_url, ovn.sb_url, host_ns=ch.netns, availability_zone="az-x")
    try:
        dataplane.apply(state, full=True)
        assert dataplane.failures() == []
        wanted = "enable-chassis-as-extport-host,availability-zones=az-x"
        wait_for(lambda: sb_options(ovn, ch.name) == wanted, what="the zone in SB's Chassis row")
        set_options(ch, "availability-zones=elsewhere")
        dataplane.apply(state, full=False)  # (a pass on a change leaves it: the full ones repair)
        dataplane.apply(state, full=True)
        wait_for(lambda: sb_options(ovn, ch.name) == "availability-zones=az-x", what="the zone put back")
    finally:
        dataplane.close()
