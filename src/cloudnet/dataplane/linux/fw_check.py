"""The firewall's tables against the kernel: which parts it refuses.

Found in a throwaway network namespace (nft_state.scratch), so that no check touches the host's tables: the
skeleton is written once and the parts added in halves (bisection).
"""

from __future__ import annotations

from collections.abc import Mapping

import nftables

from cloudnet.dataplane.linux import fw_script, nft, nft_state
from cloudnet.dataplane.linux.fw_render import Part


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
