"""Options of `cloudnet up|serve|agent --dataplane ovn` for more than one host: where OVN's databases listen for
other hosts' chassis (--ovn-listen), and the underlay a chassis tunnels over (--encap-ip, --encap-iface)."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated

import typer

from cloudnet.cli.errors import CliError
from cloudnet.config import AgentConfig
from cloudnet.ovn.daemons import ENCAP_BRIDGE, INTEGRATION_BRIDGE, NB_PORT, SB_PORT

OvnListen = Annotated[
    str | None,
    typer.Option(metavar="ADDR", help=f"Also serve OVN's NB/SB databases started here on TCP {NB_PORT}/{SB_PORT} at "
                 "this address of this host, for other hosts' chassis (plain TCP: a trusted underlay only)."),
]  # fmt: skip
EncapIp = Annotated[
    str,
    typer.Option(metavar="ADDR[/PREFIX]", help="This chassis' Geneve tunnel address (with --encap-iface: and the "
                 "underlay's prefix length)."),
]  # fmt: skip
EncapIface = Annotated[
    str | None,
    typer.Option(metavar="IFACE", help="The underlay interface the tunnel address goes on (userspace datapath: it "
                 f"becomes a port of OVS bridge {ENCAP_BRIDGE}, which takes the address; use a dedicated one)."),
]  # fmt: skip

IFACE = re.compile(r"[A-Za-z0-9_.@:-]{1,15}")  # (a Linux interface name: IFNAMSIZ, no '/' or blanks)


def listen_address(value: str | None, dataplane: str, external: bool) -> str | None:
    """--ovn-listen: one unicast address of this host (never every address: SB on plain TCP is the whole cloud)."""
    if value is None:
        return None
    if dataplane != "ovn" or external:
        raise CliError("--ovn-listen needs --dataplane ovn with OVN's databases started here (not --ovn-nb/--ovn-sb)")
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        raise CliError(f"--ovn-listen must be an IP address of this host, not {value!r}") from None
    if address.is_unspecified or address.is_multicast:
        raise CliError(f"--ovn-listen must name one address of this host (the underlay's), not {value}")
    return str(address)


def set_encap(config: AgentConfig, ip: str, iface: str | None, dataplane: str) -> None:
    """--encap-ip ADDR[/PREFIX] and --encap-iface IFACE into the agent's configuration (a prefix with an interface
    only: it is what the address is given there)."""
    if dataplane != "ovn" and (iface is not None or ip != AgentConfig.encap_ip):
        raise CliError("--encap-ip/--encap-iface are for a chassis: they need --dataplane ovn")
    try:
        addr = ipaddress.ip_interface(ip)
    except ValueError:
        raise CliError(f"--encap-ip must look like ADDR or ADDR/PREFIX, not {ip!r}") from None
    if addr.ip.is_unspecified or addr.ip.is_multicast:
        raise CliError(f"--encap-ip must be this chassis' own unicast address, not {addr.ip}")
    if iface is None:
        if "/" in ip:
            raise CliError("--encap-ip ADDR/PREFIX goes with --encap-iface IFACE (the interface it is put on)")
        config.encap_ip, config.encap_port = str(addr.ip), None
        return
    if not IFACE.fullmatch(iface) or iface in (".", "..", INTEGRATION_BRIDGE, ENCAP_BRIDGE):
        raise CliError(f"--encap-iface must be an interface name, not {iface!r}")
    if "/" not in ip or addr.network.num_addresses == 1:
        raise CliError("--encap-iface needs --encap-ip ADDR/PREFIX: the underlay's prefix length, e.g. 10.0.0.5/24")
    config.encap_ip, config.encap_port = str(addr.ip), (iface, addr.network.prefixlen)
