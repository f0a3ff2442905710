"""Options of `cloudnet up|serve|agent --dataplane ovn` for more than one host: where OVN's databases listen for
other hosts' chassis (--ovn-listen), the server hosts whose databases form Raft clusters (--ovn-cluster), and the
underlay a chassis tunnels over (--encap-ip, --encap-iface)."""

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
OvnCluster = Annotated[
    str | None,
    typer.Option(metavar="ADDR,ADDR,ADDR", help="Run OVN's NB and SB databases as Raft clusters of these server "
                 "hosts (3 or 5 underlay addresses, the same list on each host, this one's own --ovn-listen): the "
                 "first creates the clusters, the others join them; clients get every member and follow the leader. "
                 "With --tls: Raft and clients over SSL with the cloud's CA (other members: `cloudnet ovn join "
                 "--join URL TOKEN`)."),
]  # fmt: skip
ChassisSb = Annotated[
    str | None,
    typer.Option(metavar="URL", help="OVN SB database this chassis joins (a cluster: every member, comma-separated, "
                 "as the server prints it)."),
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

MAX_MEMBERS = 7
IFACE = re.compile(r"[A-Za-z0-9_.@:-]{1,15}")  # (a Linux interface name: IFNAMSIZ, no '/' or blanks)


def listen_address(value: str | None, dataplane: str, external: bool) -> str | None:
    """--ovn-listen: one unicast address of this host (never every address: SB on plain TCP is the whole cloud)."""
    if value is None:
        return None
    if dataplane != "ovn" or external:
        raise CliError("--ovn-listen needs --dataplane ovn with OVN's databases started here (not --ovn-nb/--ovn-sb)")
    return _unicast(value, "--ovn-listen")


def _unicast(value: str, option: str) -> str:
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        raise CliError(f"{option} must be an IP address of this host, not {value!r}") from None
    if address.is_unspecified or address.is_multicast:
        raise CliError(f"{option} must name one address of this host (the underlay's), not {value}")
    return str(address)


def cluster_members(value: str | None, listen: str | None) -> tuple[str, ...]:
    """--ovn-cluster A,B,C: every member's address, distinct, an odd number of them (an even one survives no more
    failures than one fewer), this host's own (--ovn-listen, already checked) among them. () without."""
    if value is None:
        return ()
    members = tuple(_unicast(a.strip(), "each address of --ovn-cluster") for a in value.split(","))
    if len(set(members)) != len(members):
        raise CliError(f"--ovn-cluster names an address twice: {value}")
    if len(members) % 2 == 0 or len(members) > MAX_MEMBERS:
        raise CliError(f"--ovn-cluster takes an odd number of members, at most {MAX_MEMBERS} (3 survive one "
                       f"failure, 5 two), not {len(members)}")  # fmt: skip
    if listen is None or listen not in members:
        raise CliError("--ovn-cluster needs --ovn-listen ADDR, this host's own address in the list")
    return members


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
