"""`--ovn-listen`, `--encap-ip`/`--encap-iface` and `--sriov` with `--dataplane ovn`: what is refused, before
anything starts (every command line here is invalid; tests/ovn/test_join.py runs valid ones)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cloudnet.cli.main import app
from cloudnet.cli.ovn_options import cluster_members, listen_address, set_encap
from cloudnet.config import AgentConfig
from cloudnet.ovn import cluster

OVN_AGENT = ["agent", "--dataplane", "ovn", "--ovn-sb", "tcp:192.0.2.1:6642"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["serve", "--ovn-listen", "192.0.2.1"], "--ovn-listen needs --dataplane ovn"),
        (["up", "--dataplane", "ovn", "--ovn-nb", "tcp:192.0.2.9:6641", "--ovn-sb", "tcp:192.0.2.9:6642",
          "--ovn-listen", "192.0.2.1"], "not --ovn-nb/--ovn-sb"),
        (["serve", "--dataplane", "ovn", "--ovn-listen", "0.0.0.0"], "one address of this host"),
        (["serve", "--dataplane", "ovn", "--ovn-listen", "::"], "one address of this host"),
        (["serve", "--dataplane", "ovn", "--ovn-listen", "ptcp:6642"], "must be an IP address"),
        ([*OVN_AGENT, "--encap-ip", "192.0.2.7/24"], "goes with --encap-iface"),
        ([*OVN_AGENT, "--encap-iface", "eth1", "--encap-ip", "192.0.2.7"], "needs --encap-ip ADDR/PREFIX"),
        ([*OVN_AGENT, "--encap-iface", "eth1", "--encap-ip", "192.0.2.7/32"], "needs --encap-ip ADDR/PREFIX"),
        ([*OVN_AGENT, "--encap-iface", "../eth1", "--encap-ip", "192.0.2.7/24"], "must be an interface name"),
        ([*OVN_AGENT, "--encap-iface", "br-int", "--encap-ip", "192.0.2.7/24"], "must be an interface name"),
        ([*OVN_AGENT, "--encap-iface", "x" * 16, "--encap-ip", "192.0.2.7/24"], "must be an interface name"),
        ([*OVN_AGENT, "--encap-ip", "not-an-ip"], "--encap-ip must look like"),
        ([*OVN_AGENT, "--encap-ip", "224.0.0.1"], "own unicast address"),
        ([*OVN_AGENT, "--sriov", "physnet2:pf0"], "SR-IOV direct ports are not supported on the OVN dataplane"),
        (["up", "--dataplane", "ovn", "--sriov", "physnet2:pf0"], "not supported on the OVN dataplane"),
        (["agent", "--encap-iface", "eth1", "--encap-ip", "192.0.2.7/24"], "need --dataplane ovn"),
        (["up", "--encap-ip", "192.0.2.7"], "need --dataplane ovn"),
    ],
)  # fmt: skip
def test_invalid_multi_host_options_are_refused_before_anything_starts(argv: list[str], message: str) -> None:
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 1, result.output
    assert message in result.output, result.output


def test_valid_options_land_in_the_configuration() -> None:
    assert listen_address("2001:db8::1", "ovn", False) == "2001:db8::1"
    assert listen_address(None, "linux", False) is None
    config = AgentConfig(host="h")
    set_encap(config, "100.64.0.2/24", "ul0", "ovn")
    assert (config.encap_ip, config.encap_port) == ("100.64.0.2", ("ul0", 24))
    set_encap(config, "10.0.0.5", None, "ovn")
    assert (config.encap_ip, config.encap_port) == ("10.0.0.5", None)


CLUSTER = ["serve", "--dataplane", "ovn", "--ovn-listen", "192.0.2.1", "--ovn-cluster"]
JOIN = ["ovn", "join", "--ovn-listen", "192.0.2.1", "--ovn-cluster"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*CLUSTER, "192.0.2.1,192.0.2.2"], "odd number of members"),
        ([*CLUSTER, "192.0.2.1,192.0.2.2,192.0.2.3,192.0.2.4"], "odd number of members"),
        ([*CLUSTER, ",".join(f"192.0.2.{i}" for i in range(1, 10))], "at most 7"),
        ([*CLUSTER, "192.0.2.1,192.0.2.1,192.0.2.3"], "names an address twice"),
        ([*CLUSTER, "192.0.2.1,0.0.0.0,192.0.2.3"], "one address of this host"),
        ([*CLUSTER, "192.0.2.1,224.0.0.1,192.0.2.3"], "one address of this host"),
        ([*CLUSTER, "192.0.2.1,tcp:192.0.2.2:6641,192.0.2.3"], "must be an IP address"),
        ([*CLUSTER, "192.0.2.1,192.0.2.2;touch /tmp/x,192.0.2.3"], "must be an IP address"),
        ([*CLUSTER, "192.0.2.1,pssl:6643,192.0.2.3"], "must be an IP address"),
        ([*CLUSTER, "192.0.2.7,192.0.2.2,192.0.2.3"], "this host's own address in the list"),
        (["serve", "--dataplane", "ovn", "--ovn-cluster", "192.0.2.1,192.0.2.2,192.0.2.3"], "needs --ovn-listen"),
        (["serve", "--ovn-listen", "192.0.2.1", "--ovn-cluster", "192.0.2.1"], "--ovn-listen needs --dataplane ovn"),
        (["up", "--dataplane", "ovn", "--ovn-nb", "tcp:192.0.2.9:6641", "--ovn-sb", "tcp:192.0.2.9:6642",
          "--ovn-cluster", "192.0.2.1,192.0.2.2,192.0.2.3"], "needs --ovn-listen"),
        ([*JOIN, "192.0.2.1,192.0.2.2"], "odd number of members"),
        ([*JOIN, "192.0.2.5,192.0.2.2,192.0.2.3"], "this host's own address in the list"),
        (["ovn", "join", "--ovn-listen", "192.0.2.1"], "needs --ovn-cluster"),
        (["ovn", "join", "--ovn-listen", "::", "--ovn-cluster", "::,192.0.2.2,192.0.2.3"], "one address of this host"),
    ],
)  # fmt: skip
def test_invalid_cluster_members_are_refused_before_anything_starts(argv: list[str], message: str) -> None:
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 1, result.output
    assert message in result.output, result.output


def test_cluster_members_land_in_the_configuration() -> None:
    assert cluster_members("192.0.2.1, 192.0.2.2,192.0.2.3", "192.0.2.2") == ("192.0.2.1", "192.0.2.2", "192.0.2.3")
    assert cluster_members("2001:db8::1", "2001:db8::1") == ("2001:db8::1",)
    assert cluster_members(None, "192.0.2.1") == ()
    members = cluster.Members("2001:db8::2", ("2001:db8::1", "2001:db8::2", "2001:db8::3"))
    assert not members.creates
    assert members.clients("sb") == "tcp:[2001:db8::1]:6642,tcp:[2001:db8::2]:6642,tcp:[2001:db8::3]:6642"
    assert members.raft("nb", "2001:db8::1") == "tcp:[2001:db8::1]:6643"


def test_ovn_leave_without_running_members_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["ovn", "leave", "--state-dir", str(tmp_path)])
    assert result.exit_code == 1 and "no running cluster members" in result.output, result.output
