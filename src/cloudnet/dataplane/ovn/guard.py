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


# What the kernel listed of the chain right after this process wrote it, per namespace: a plug finds the chain as
# it was written with one listing (about 1 ms) instead of writing it again (10-20 ms: a commit waits for RCU).
_written: dict[str, list[Any]] = {}


def ensure(ns: str) -> None:
    """The guard table in namespace `ns`, as script() says: written (one transaction) unless the chain lists as it
    did when this process wrote it."""
    if ns in _written and _rules(ns) == _written[ns]:
        return
    with netns.entered(ns):
        ctx = nftables.Nftables()
        _run(ctx, script())
    listed = _rules(ns)
    if listed is None:
        raise GuardError(f"the guard's chain is not in namespace {ns} after it was written")
    _written[ns] = listed


def _rules(ns: str) -> list[Any] | None:
    """The rules of the guard's chain in `ns` (their expressions, as nftables lists them), or None without it."""
    with netns.entered(ns):
        ctx = nftables.Nftables()
        ctx.set_json_output(True)
        rc, out, _err = ctx.cmd(f"list chain bridge {TABLE} {CHAIN}")
    if rc != 0:
        return None
    items = json.loads(out)["nftables"]
    chains = [i["chain"] for i in items if "chain" in i]
    return [chains, *(i["rule"]["expr"] for i in items if "rule" in i)]


def present(ns: str) -> bool:
    """Whether the guard's chain is in `ns` with its three rules (read back, for tests and checks)."""
    listed = _rules(ns)
    return listed is not None and len(listed) == 4
