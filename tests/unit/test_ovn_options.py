"""`--ovn-listen`, `--encap-ip`/`--encap-iface` and `--sriov` with `--dataplane ovn`: what is refused, before
anything starts (every command line here is invalid; tests/ovn/test_join.py runs valid ones)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cloudnet.cli.main import app
from cloudnet.cli.ovn_options import listen_address, set_encap
from cloudnet.config import AgentConfig

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
