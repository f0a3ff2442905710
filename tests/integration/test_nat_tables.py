"""Router NAT in a real namespace (root): converged from the desired state, whatever the kernel held before.

Issue 17 case 1: a DNAT entry left in cloudnet's maps, then a forward re-created on its listen address, made
every later pass fail with `File exists`. Here leftovers, missing entries and foreign rules are planted by hand
and the next pass must repair them (and say what it found) instead of failing.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from cloudnet.dataplane.linux import nft, nft_state
from cloudnet.dataplane.linux.nat import NatTables
from cloudnet.dataplane.linux.nat_plan import Structure, forward_elements, merge

STRUCTURES = {
    4: Structure(4, "qg-x", ("10.0.0.0/24",), ((("10.0.0.0/24",), "192.0.2.60"),), "192.0.2.2"),
    6: Structure(6, "qg-x", ("fd00::/64",), (), None),
}


def fwd(fid: str, listen: str, target: str, rev: int = 0, **extra: Any) -> dict[str, Any]:
    ports = [{"protocol": "tcp", "listen_port": "80,1000-1999", "target_address": target}]
    return {"id": fid, "revision_number": rev, "listen_address": listen, "config": {}, "ports": ports, **extra}


def nft_cmd(ns: str, script: str) -> None:
    subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=script, text=True, check=True)


def kernel(ns: str) -> dict[int, dict[str, dict[str, str]]]:
    """Map elements as the kernel holds them, per IP version (maps left empty omitted)."""
    out = {}
    for version, family in ((4, "ip"), (6, "ip6")):
        state = nft_state.read(ns, family)
        assert state is not None
        out[version] = {name: items for name, items in state.elements.items() if items}
    return out


def desired(forwards: list[dict[str, Any]]) -> dict[int, dict[str, dict[str, str]]]:
    parts = [forward_elements(f) for f in forwards]
    return {v: merge(els for ver, els in parts if ver == v) for v in (4, 6)}


def test_forward_changes_leave_exactly_the_desired_elements(ns: str) -> None:
    tables = NatTables()
    tables.forget(ns, new=True)
    a, b = fwd("a", "192.0.2.10", "10.0.0.5"), fwd("b", "2001:db8::10", "fd00::5")
    assert tables.apply(ns, STRUCTURES, [a, b]) == []
    assert kernel(ns) == desired([a, b])
    # Updated (a new revision), removed, added; and a structure change of one family in the same pass.
    a2 = fwd("a", "192.0.2.10", "10.0.0.6", rev=1, config={"target_address": "10.0.0.7"})
    c = fwd("c", "2001:db8::11", "fd00::6")
    changed = {**STRUCTURES, 4: Structure(4, "qg-x", ("10.0.0.0/24", "10.1.0.0/24"), (), "192.0.2.2")}
    assert tables.apply(ns, changed, [a2, c]) == []
    assert kernel(ns) == desired([a2, c])
    generation = nft.generation(ns)
    assert tables.apply(ns, changed, [a2, c]) == []  # nothing to do: nothing committed
    assert nft.generation(ns) == generation


LEFTOVERS = [("192.0.2.20", "10.0.0.5", "10.0.0.99"), ("2001:db8::20", "fd00::5", "fd00::99")]


@pytest.mark.parametrize(("listen", "target", "planted"), LEFTOVERS)
def test_a_conflicting_leftover_does_not_stop_a_new_forward(ns: str, listen: str, target: str, planted: str) -> None:
    tables = NatTables()
    tables.forget(ns, new=True)
    tables.apply(ns, STRUCTURES, [])
    family = "ip" if "." in listen else "ip6"
    nft_cmd(ns, f"add element {family} cloudnet fwd_tcp_1 {{ {listen} . 80 : {planted} . 80 }}\n")
    found = tables.apply(ns, STRUCTURES, [fwd("n", listen, target)])
    assert kernel(ns) == desired([fwd("n", listen, target)])
    assert any(f"{listen} . 80 : {planted} . 80 (not {target} . 80)" in d for d in found), found


def test_what_was_removed_or_planted_by_hand_is_found_and_repaired(ns: str) -> None:
    tables = NatTables()
    tables.forget(ns, new=True)
    forwards = [fwd("a", "192.0.2.10", "10.0.0.5"), fwd("b", "2001:db8::10", "fd00::5")]
    tables.apply(ns, STRUCTURES, forwards)
    nft_cmd(ns, "delete element ip cloudnet fwd_tcp_1 { 192.0.2.10 . 80 }\n"
                "add element ip6 cloudnet fwd_default { 2001:db8::99 : fd00::99 }\n")  # fmt: skip
    found = tables.apply(ns, STRUCTURES, forwards)  # the generation moved: read back, though not asked to
    assert kernel(ns) == desired(forwards)
    assert any("1 missing element(s): 192.0.2.10 . 80 : 10.0.0.5 . 80" in d for d in found), found
    assert any("1 stale element(s): 2001:db8::99 : fd00::99" in d for d in found), found
    assert tables.apply(ns, STRUCTURES, forwards, check=True) == []  # a check now finds nothing


def test_foreign_rules_chains_and_a_deleted_table_are_repaired(ns: str) -> None:
    tables = NatTables()
    tables.forget(ns, new=True)
    forwards = [fwd("a", "192.0.2.10", "10.0.0.5")]
    tables.apply(ns, STRUCTURES, forwards)
    nft_cmd(ns, "add rule ip cloudnet prerouting ip saddr 203.0.113.9 drop\nadd chain ip cloudnet mine\n"
                "delete table ip6 cloudnet\n")  # fmt: skip
    found = tables.apply(ns, STRUCTURES, forwards)
    assert "table ip cloudnet: foreign chain mine" in found
    assert "table ip cloudnet: 1 foreign rule(s) in chain prerouting" in found
    assert "table ip6 cloudnet: missing" in found
    assert kernel(ns) == desired(forwards)
    assert nft_state.differences(nft_state.read(ns, "ip"), nft_state.expected("ip", STRUCTURES[4].render())) == []
    assert tables.apply(ns, STRUCTURES, forwards, check=True) == []


def test_a_new_agent_converges_what_the_last_one_left(ns: str) -> None:
    """After a restart (a new NatTables, nothing known) the kernel is read back, not assumed empty or right."""
    old = NatTables()
    old.forget(ns, new=True)
    old.apply(ns, STRUCTURES, [fwd("a", "192.0.2.10", "10.0.0.5"), fwd("b", "2001:db8::10", "fd00::5")])
    now = [fwd("b", "2001:db8::10", "fd00::6", rev=1), fwd("c", "192.0.2.11", "10.0.0.7")]
    found = NatTables().apply(ns, STRUCTURES, now)
    assert kernel(ns) == desired(now)
    assert found  # the elements of a and of b's old revision were stale
