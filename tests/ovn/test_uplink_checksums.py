"""The OVN driver's uplink and checksums (dataplane/ovn/uplinks.py), on veth pairs in a namespace of the test's own:
the uplink's transmit checksum offload goes off once (logged once), a veth peer in reach that offloads them is
warned about once with the command to run, and nothing else is looked at or changed."""

from __future__ import annotations

import logging
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.ovn import veth
from cloudnet.dataplane.ovn.uplinks import Uplinks


@pytest.fixture
def ns() -> Iterator[str]:
    name = f"cn-upl-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        netns.remove(name)


def ip(ns: str, *args: str) -> None:
    subprocess.run(["ip", "-n", ns, *args], check=True, capture_output=True)


def peer_of(ns: str, iface: str) -> str | None:
    with netns.iproute(ns) as ipr:
        idx = veth.index(ipr, iface)
        assert idx is not None
        return veth.same_ns_peer(ipr, idx)


def test_uplink_offload_off_and_the_peer_warned_about_once(ns: str, caplog: pytest.LogCaptureFixture) -> None:
    ip(ns, "link", "add", "upl0", "type", "veth", "peer", "name", "upl0-peer")
    assert veth.tx_checksum(ns, "upl0") and veth.tx_checksum(ns, "upl0-peer")  # as the kernel makes them
    assert peer_of(ns, "upl0") == "upl0-peer"
    uplinks = Uplinks({"physnet1": "upl0"})
    with caplog.at_level(logging.INFO, logger="cloudnet.dataplane.ovn.uplinks"):
        uplinks._checksums(ns, "upl0", "upl0-peer")
        uplinks._checksums(ns, "upl0", "upl0-peer")  # a later full pass: nothing more to do or say
    assert not veth.tx_checksum(ns, "upl0")
    assert veth.tx_checksum(ns, "upl0-peer")  # not ours to change
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert infos == ["uplink upl0: transmit checksum offload turned off (OVS's userspace datapath completes no "
                     "partial checksums)"]  # fmt: skip
    assert len(warnings) == 1 and "run `ethtool -K upl0-peer tx off`" in warnings[0], warnings
    caplog.clear()
    veth.tx_checksum_off(ns, "upl0-peer")  # the user did as told: quiet from then on
    Uplinks({"physnet1": "upl0"})._checksums(ns, "upl0", "upl0-peer")
    assert not [r for r in caplog.records if r.levelno >= logging.INFO]


def test_only_a_veth_peer_in_the_same_namespace_is_looked_at(ns: str) -> None:
    other = f"{ns}-o"
    subprocess.run(["ip", "netns", "add", other], check=True)
    try:
        ip(ns, "link", "add", "br0", "type", "bridge")
        assert peer_of(ns, "br0") is None  # not a veth (as a real NIC is not)
        ip(ns, "link", "add", "far0", "type", "veth", "peer", "name", "far0-peer", "netns", other)
        assert peer_of(ns, "far0") is None  # its peer in another namespace: not ours to look at
        Uplinks({"physnet1": "far0"})._checksums(ns, "far0", None)
        assert not veth.tx_checksum(ns, "far0")
        assert veth.tx_checksum(other, "far0-peer")  # untouched
    finally:
        netns.remove(other)


def test_a_device_whose_offload_is_fixed_is_connected_anyway(ns: str, caplog: pytest.LogCaptureFixture) -> None:
    """Loopback checksums in software and cannot be told otherwise: the refusal is logged, not a failed uplink."""
    assert veth.tx_checksum(ns, "lo")
    with caplog.at_level(logging.WARNING, logger="cloudnet.dataplane.ovn.uplinks"):
        Uplinks({"physnet1": "lo"})._checksums(ns, "lo", None)
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["uplink lo"]
    assert "left as it is" in caplog.records[0].getMessage()
