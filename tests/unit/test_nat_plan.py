"""The NAT plan (dataplane/linux/nat_plan.py): forwards as hash-map elements, ranges as aligned port blocks."""

from __future__ import annotations

import random

import pytest

from cloudnet.dataplane.linux.nat_plan import BLOCKS, blocks, forward_elements, map_names


def covered(elements: dict[str, dict[str, str]], proto: str) -> dict[int, str]:
    """listen port -> "target . port" as the kernel's lookups would resolve them (blocks expanded)."""
    out: dict[int, str] = {}
    for name, items in elements.items():
        kind, map_proto, size = [*name.split("_"), "", ""][:3]
        if map_proto != proto:
            continue
        for key, value in items.items():
            first = int(key.split(" . ")[1])
            for port in range(first, first + int(size)):
                assert port not in out, f"port {port} in two elements"
                out[port] = value if kind == "fwd" else f"{value} . {port}"
    return out


@pytest.mark.parametrize("seed", range(20))
def test_blocks_cover_a_range_exactly_and_are_aligned(seed: int) -> None:
    rng = random.Random(seed)
    lo = rng.randint(1, 65535)
    hi = rng.randint(lo, 65535)
    parts = list(blocks(lo, hi))
    ports = [p for first, size in parts for p in range(first, first + size)]
    assert ports == list(range(lo, hi + 1))
    assert all(size in BLOCKS and first % size == 0 for first, size in parts)
    assert len(parts) <= 2 * 15 * (len(BLOCKS) - 1) + 15  # a few dozen elements, whatever the width


def test_the_whole_port_range_is_sixty_elements() -> None:
    assert len(list(blocks(1, 65535))) == 60


def test_each_kind_of_port_mapping() -> None:
    fwd = {"listen_address": "2001:DB8::7", "config": {"target_address": "fd00::9"}, "ports": [
        {"protocol": "tcp", "listen_port": "8080", "target_address": "fd00::5"},                     # same port
        {"protocol": "tcp", "listen_port": "1000-1100", "target_address": "fd00::5"},                # kept range
        {"protocol": "udp", "listen_port": "53,5000-5999", "target_port": "5353", "target_address": "fd00::6"},
        {"protocol": "tcp", "listen_port": "82-83,84", "target_port": "90,91-92", "target_address": "fd00::6"},
    ]}  # fmt: skip
    version, els = forward_elements(fwd)
    assert version == 6
    assert set(els) <= set(map_names())
    assert els["fwd_default"] == {"2001:db8::7": "fd00::9"}
    tcp = covered(els, "tcp")
    assert tcp[8080] == "fd00::5 . 8080"
    assert {tcp[p] for p in range(1000, 1101)} == {f"fd00::5 . {p}" for p in range(1000, 1101)}
    assert [tcp[p] for p in (82, 83, 84)] == ["fd00::6 . 90", "fd00::6 . 91", "fd00::6 . 92"]
    assert set(tcp) == {8080, 82, 83, 84, *range(1000, 1101)}
    udp = covered(els, "udp")
    assert set(udp) == {53, *range(5000, 6000)} and set(udp.values()) == {"fd00::6 . 5353"}
    assert sum(len(items) for items in els.values()) < 60  # 1,105 ports in a few dozen elements
