"""A guest that floods OVN's DHCP does not starve the others (issue 28; root): each port's DHCP asks meet a budget of
their own in the switch's QoS stage (desired_dhcp.budget: a meter per port's row), before ovn-controller answers
them. Of a flood of discovers from one VM's tap (its own MAC and chaddr: port security passes them) only about its
budget is answered, and a neighbour asking meanwhile gets its lease."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import httpx

from cloudnet.northbound import desired_dhcp
from tests.ovn import tapio
from tests.ovn import vm_site as r
from tests.ovn.restart_rig import Rig

BATCH = 100  # discovers a tick (a tick: 10 ms), about 10,000 a second
ON = 2000  # discovers sent before the neighbour asks (the flooder's budget is spent by then)


def _flood(tap: tapio.TapEnd, frame: bytes, on: threading.Event, stop: threading.Event, sent: list[int]) -> None:
    while not stop.wait(0.01):
        for _ in range(BATCH):
            tap.send(frame)
        sent[0] += BATCH
        if sent[0] >= ON:
            on.set()


def test_a_vm_flooding_ovn_dhcp_does_not_starve_its_neighbour(vm_rig: Rig, vm_api: httpx.Client, vm_net: Any) -> None:
    vms = [r.launch(vm_api, vm_rig, name, [{"network": vm_net["id"]}]) for name in ("vm-flood", "vm-patient")]
    assert vm_rig.chassis.netns is not None
    flooder, patient = (tapio.TapEnd(vm_rig.chassis.netns, vm["nets"][0]["device"]) for vm in vms)
    ports = [r.port_of(vm_api, vm["nets"][0]["port_id"]) for vm in vms]
    try:
        assert tapio.ask_dhcp(flooder, ports[0]["mac_address"]) is not None  # (the flows are in place)
        xid = random.getrandbits(32)
        frame = tapio.dhcp(tapio.DISCOVER, ports[0]["mac_address"], xid)
        on, asked, sent = threading.Event(), threading.Event(), [0]
        flood = threading.Thread(target=_flood, args=(flooder, frame, on, asked, sent), daemon=True)
        started = time.monotonic()
        flood.start()  # (on while the neighbour asks: a budget shared by both would starve the neighbour)
        try:
            assert on.wait(30), "the flood did not start"
            got = tapio.ask_dhcp(patient, ports[1]["mac_address"], within=10)
        finally:
            asked.set()
            flood.join()
        answered = 0
        while flooder.wait_for(lambda f: tapio.dhcp_reply(f, xid) is not None, 1.0) is not None:
            answered += 1
        waited = time.monotonic() - started
    finally:
        flooder.close()
        patient.close()
    assert got is not None and got.yiaddr == r.v4(ports[1]), got
    # What the budget lets through in the time the flood and the answers took (bits of this frame's size).
    bits = len(frame) * 8
    budget = (desired_dhcp.BUDGET_BURST_KBIT + desired_dhcp.BUDGET_RATE_KBPS * waited) * 1000 / bits
    assert answered <= budget + 5, f"{answered} of {sent[0]} discovers in {waited:.2f} s answered (budget {budget:.0f})"
