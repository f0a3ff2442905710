"""What a VM may not send, whatever OVN's version: an nftables `bridge` table in the namespace ovs-vswitchd runs in,
whose forward hook sees every frame a VM's tap sends into its per-port bridge (vm_ports.py, the hybrid plug) before
it reaches br-int. It drops, from devices in the VM tap group (names.VM_TAP_GROUP):
- ICMPv6 router advertisements (134) and redirects (137): OVN lets every nd_ra through its ACL stage (23.03:
  ls_in_acl 65532 `nd || nd_ra || ...` -> next) and its port security does not look at them (23.03 and 25.03 alike:
  a guest's RA reached its neighbours on both), so no NB row stops one;
- DHCPv4 server messages (UDP from port 67) and DHCPv6 server messages (UDP from port 547): OVN answers DHCP
  itself; (NB also drops them for ports with port security, this does for every VM);
- VLAN-tagged frames: a VM's NIC is an untagged port, and a tag would carry the frame past the matches above.
The transport header is found past IPv6 extension headers (`meta l4proto`, not `ip6 nexthdr`).

The table is one for all VMs of the namespace (the group, not names, picks the taps), written whole in one
transaction (`add` + `flush` + the rules: idempotent, never a moment without them), before any tap joins a bridge.
"""

from __future__ import annotations

import json
from typing import Any

import nftables

from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.ovn.names import VM_TAP_GROUP

TABLE = "cloudnet_ovn_vm_guard"
CHAIN = "from_vms"


def script() -> str:
    guest = f"iifgroup {VM_TAP_GROUP:#x}"
    return f"""
add table bridge {TABLE}
add chain bridge {TABLE} {CHAIN} {{ type filter hook forward priority filter; policy accept; }}
flush chain bridge {TABLE} {CHAIN}
add rule bridge {TABLE} {CHAIN} {guest} ether type {{ 8021q, 8021ad }} drop
add rule bridge {TABLE} {CHAIN} {guest} meta l4proto ipv6-icmp icmpv6 type {{ nd-router-advert, nd-redirect }} drop
add rule bridge {TABLE} {CHAIN} {guest} meta l4proto udp udp sport {{ 67, 547 }} drop
"""


class GuardError(RuntimeError):
    pass


def _run(ctx: Any, text: str) -> str:
    rc, out, err = ctx.cmd(text)
    if rc != 0:
        raise GuardError(f"nftables: {err.strip() or out.strip()}")
    return str(out)


def ensure(ns: str) -> None:
    """The guard table in namespace `ns`, as script() says (one transaction)."""
    with netns.entered(ns):
        ctx = nftables.Nftables()
        _run(ctx, script())


def present(ns: str) -> bool:
    """Whether the guard's chain is in `ns` with its rules (read back, for tests and checks)."""
    with netns.entered(ns):
        ctx = nftables.Nftables()
        ctx.set_json_output(True)
        rc, out, _err = ctx.cmd(f"list chain bridge {TABLE} {CHAIN}")
    if rc != 0:
        return False
    return sum(1 for item in json.loads(out)["nftables"] if "rule" in item) == 3
