"""A trunk parent with a QoS egress limit: the two share the host device's ingress qdisc.

The trunk's VLAN classifier (vlan_bpf.py) must run before QoS's redirect to the ifb, or the subports' tagged
frames would be shaped as the parent's and handed back past the classifier (an ifb's hand-back skips the device's
filters) to a bridge that drops tagged frames. Each side adds and removes only its own filter. Real kernel objects
in a namespace of this test's own.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from pyroute2 import IPRoute

from cloudnet import vlan_bpf
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux import qos_tc


@pytest.fixture
def ipr() -> Iterator[IPRoute]:
    name = f"cnt-qtr-{uuid.uuid4().hex[:8]}"
    netns.ensure(name)
    try:
        with netns.iproute(name) as ipr:
            ipr.link("add", ifname="parent", kind="veth", peer="guest")
            ipr.link("add", ifname="sub", kind="veth", peer="subpeer")
            for dev in ("parent", "guest", "sub", "subpeer"):
                ipr.link("set", index=ipr.link_lookup(ifname=dev)[0], state="up")
            yield ipr
    finally:
        netns.remove(name)


def test_the_vlan_classifier_runs_first_and_each_side_keeps_the_others_filter(ipr: IPRoute) -> None:
    parent, sub = ipr.link_lookup(ifname="parent")[0], ipr.link_lookup(ifname="sub")[0]
    vlan_bpf.ensure(ipr, parent, vlan_bpf.untag_program([(100, sub)]), "untag")
    classifier = vlan_bpf.attached(ipr, parent)
    assert classifier is not None

    ifb = qos_tc.ensure_ifb(ipr, "cnf-test")
    assert qos_tc.set_redirect(ipr, parent, ifb)  # (the trunk's ingress qdisc is there: shared, not refused)
    assert qos_tc.redirect_target(ipr, parent) == ifb
    assert not qos_tc.set_redirect(ipr, parent, ifb)  # applying twice changes nothing
    assert vlan_bpf.attached(ipr, parent) == classifier
    prios = sorted(f["info"] >> 16 for f in ipr.get_filters(parent, parent=qos_tc.INGRESS_HANDLE) if f["info"])
    assert prios and prios[0] == vlan_bpf.PRIO and qos_tc.REDIRECT_PRIO in prios

    assert qos_tc.set_redirect(ipr, parent, None)  # the limit goes: the trunk's classifier stays
    assert qos_tc.redirect_target(ipr, parent) is None
    assert vlan_bpf.attached(ipr, parent) == classifier

    qos_tc.redirect(ipr, parent, ifb)
    vlan_bpf.detach(ipr, parent)  # the trunk goes: the limit stays
    assert vlan_bpf.attached(ipr, parent) is None
    assert qos_tc.redirect_target(ipr, parent) == ifb
