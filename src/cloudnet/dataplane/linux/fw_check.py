"""The firewall's tables against the kernel: what it holds compared with what was applied, and which parts it refuses.

Both work in a throwaway network namespace (nft_state.scratch), so that nothing is assumed about how nft prints
what it was given and no check touches the host's tables: the parts applied are written there and listed back, as
the wanted state of both tables (declarations, rules, elements) that the host's must equal; and the parts a
transaction was refused for are found by bisection, the skeleton written once and the parts added in halves.
"""

from __future__ import annotations

from collections.abc import Mapping

import nftables

from cloudnet.dataplane.linux import fw_script, nft, nft_state
from cloudnet.dataplane.linux.fw_render import TABLE, Part
from cloudnet.dataplane.linux.nft_state import TableState

FAMILIES = ("bridge", "inet")


def expected(parts: Mapping[str, Part]) -> dict[str, TableState]:
    """Both tables as the kernel lists them when they hold the skeleton and `parts`."""

    def work(ctx: nftables.Nftables) -> dict[str, TableState]:
        nft_state.command(ctx, fw_script.whole(parts))
        return {family: nft_state.parse(nft_state.listing(ctx, family)) for family in FAMILIES}

    return nft_state.scratch(work)


def differences(namespace: str, wanted: Mapping[str, TableState]) -> list[str]:
    """How the namespace's tables differ from `wanted` (expected), one line per difference."""
    found = []
    for family in FAMILIES:
        have, want = nft_state.read(namespace, family), wanted[family]
        wrong = ["missing"] if have is None else [*nft_state.differences(have, want),
                                                   *nft_state.element_differences(have, want)]  # fmt: skip
        found += [f"table {family} {TABLE}: {w}" for w in wrong]
    return found


def refused(parts: Mapping[str, Part]) -> dict[str, str]:
    """The parts the kernel refuses, with its reason: the skeleton is written, then the parts are added, a refused
    batch split in halves until each refused part stands alone (about 2 x the parts' size in all for one refused
    part, against a transaction per part). A part is checked with the ones accepted before it, so one that clashes
    with another is refused too. Raises NftError when the skeleton itself is refused."""

    def work(ctx: nftables.Nftables) -> dict[str, str]:
        nft_state.command(ctx, fw_script.whole({}))
        bad: dict[str, str] = {}
        batches = [sorted(parts)]
        while batches:
            keys = batches.pop()
            try:
                nft_state.command(ctx, fw_script.diff({}, {k: parts[k] for k in keys}))
            except nft.NftError as exc:
                if len(keys) == 1:
                    bad[keys[0]] = str(exc)
                else:
                    half = len(keys) // 2
                    batches += [keys[half:], keys[:half]]  # (the first half next)
        return bad

    return nft_state.scratch(work)
