"""Candidate nftables shapes for forwards, measured raw (libnftables in process, one transaction an operation).

Issue 17: removing one forward port took p99 23-31 ms at 100,000 forwards (target 10 ms, the same at 1k and
100k). Each shape holds N elements in a throwaway namespace, then times adding and removing one more:

  interval   ranges in one concatenated interval map (`flags interval`: a pipapo set): the shape before issue 17
             for port ranges. N range elements.
  per-addr   one map (and chain) per listen address, dispatched by a verdict map on daddr. N addresses.
  expanded   every port an exact element of one hash map: a forward of a 1,000-port range is 1,000 elements.
             N elements; the forward added and removed is such a range.
  blocks     hash maps only, ranges as aligned blocks of 1/16/256/4096 ports looked up with the port masked
             (what nat_plan.py does). N elements; the forward added and removed is a 1,000-port range.

Usage (root): .venv/bin/python bench/forward_shapes.py [--sizes 1000,10000,100000] [--samples 100]
The per-address shape is only run up to 10,000 (its cost grows with every set the table holds: at 10,000
addresses one operation takes seconds).
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from common import machine_load, ms, percentile, row

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux import nft
from cloudnet.dataplane.linux.nat_plan import blocks

T = "ip bench"


def address(i: int) -> str:
    a = 0xC6120000 + i  # 198.18.0.0/15 and up
    return f"{a >> 24}.{(a >> 16) & 255}.{(a >> 8) & 255}.{a & 255}"


def fill(ns: str, lines: list[str], chunk: int = 5000) -> None:
    for k in range(0, len(lines), chunk):
        nft.run(ns, "\n".join(lines[k : k + chunk]) + "\n")


def elements(name: str, items: list[str], chunk: int = 5000) -> list[str]:
    return [f"add element {T} {name} {{ {', '.join(items[k : k + chunk])} }}" for k in range(0, len(items), chunk)]


def timed(ns: str, add: Callable[[int], str], remove: Callable[[int], str], samples: int) -> tuple[list[float], ...]:
    adds, removes = [], []
    for k in range(samples):
        t0 = time.perf_counter()
        nft.run(ns, add(k))
        adds.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        nft.run(ns, remove(k))
        removes.append(time.perf_counter() - t0)
    return adds, removes


def interval(ns: str, n: int, samples: int) -> tuple[list[float], ...]:
    nft.run(ns, f"table {T} {{\n map r {{ type ipv4_addr . inet_service : ipv4_addr; flags interval; }}\n}}\n")
    fill(ns, elements("r", [f"{address(i // 2)} . {1000 + 2000 * (i % 2)}-{1999 + 2000 * (i % 2)} : 10.0.0.1"
                            for i in range(n)]))  # fmt: skip
    return timed(ns, lambda k: f"add element {T} r {{ 203.0.113.{k % 250 + 1} . 5000-5999 : 10.0.0.2 }}\n",
                 lambda k: f"delete element {T} r {{ 203.0.113.{k % 250 + 1} . 5000-5999 }}\n", samples)  # fmt: skip


def per_address(ns: str, n: int, samples: int) -> tuple[list[float], ...]:
    nft.run(ns, f"table {T} {{\n map d {{ type ipv4_addr : verdict; }}\n}}\n")

    def objects(i: int, a: str) -> list[str]:
        return [f"add map {T} m{i} {{ type inet_service : ipv4_addr . inet_service; }}", f"add chain {T} c{i}",
                f"add rule {T} c{i} dnat ip to tcp dport map @m{i}", f"add element {T} m{i} {{ 80 : 10.0.0.1 . 8080 }}",
                f"add element {T} d {{ {a} : goto c{i} }}"]  # fmt: skip

    fill(ns, [line for i in range(n) for line in objects(i, address(i))], chunk=2000)

    def remove(k: int) -> str:
        i = n + k
        return (f"delete element {T} d {{ 203.0.113.{k % 250 + 1} }}\nflush chain {T} c{i}\ndelete chain {T} c{i}\n"
                f"delete map {T} m{i}\n")  # fmt: skip

    return timed(ns, lambda k: "\n".join(objects(n + k, f"203.0.113.{k % 250 + 1}")) + "\n", remove, samples)


def expanded(ns: str, n: int, samples: int) -> tuple[list[float], ...]:
    nft.run(ns, f"table {T} {{\n map e {{ type ipv4_addr . inet_service : ipv4_addr . inet_service; }}\n}}\n")
    fill(ns, elements("e", [f"{address(i // 250)} . {10000 + i % 250} : 10.0.0.1 . {10000 + i % 250}"
                            for i in range(n)]))  # fmt: skip
    ports = range(5000, 6000)
    return timed(ns, lambda k: "\n".join(elements("e", [f"203.0.113.{k % 250 + 1} . {p} : 10.0.0.2 . {p}"
                                                        for p in ports])) + "\n",
                 lambda k: f"delete element {T} e {{ {', '.join(f'203.0.113.{k % 250 + 1} . {p}' for p in ports)} }}\n",
                 samples)  # fmt: skip


def aligned_blocks(ns: str, n: int, samples: int) -> tuple[list[float], ...]:
    sizes = (1, 16, 256, 4096)
    nft.run(ns, f"table {T} {{\n" + "\n".join(f"map k{s} {{ type ipv4_addr . inet_service : ipv4_addr; }}"
                                               for s in sizes) + "\n}\n")  # fmt: skip
    # N elements, as 250-port port-preserving ranges would give them (10 exact ports and 15 blocks of 16 each).
    per = [(p, s) for p, s in blocks(10000, 10249)]
    items: dict[int, list[str]] = {s: [] for s in sizes}
    for i in range(n):
        first, size = per[i % len(per)]
        items[size].append(f"{address(i // len(per))} . {first} : 10.0.0.1")
    fill(ns, [line for s in sizes for line in elements(f"k{s}", items[s])])
    one = list(blocks(5000, 5999))

    def add(k: int) -> str:
        return "\n".join(f"add element {T} k{s} {{ 203.0.113.{k % 250 + 1} . {p} : 10.0.0.2 }}" for p, s in one) + "\n"

    def remove(k: int) -> str:
        by_size: dict[int, list[str]] = {}
        for p, s in one:
            by_size.setdefault(s, []).append(f"203.0.113.{k % 250 + 1} . {p}")
        return "\n".join(f"delete element {T} k{s} {{ {', '.join(keys)} }}" for s, keys in by_size.items()) + "\n"

    return timed(ns, add, remove, samples)


SHAPES = {"interval": (interval, None), "per-addr": (per_address, 10_000), "expanded": (expanded, None),
          "blocks": (aligned_blocks, None)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    args = parser.parse_args()
    machine_load()
    for name in args.shapes.split(","):
        shape, limit = SHAPES[name]
        for size in (int(s) for s in args.sizes.split(",")):
            if limit is not None and size > limit:
                print(f"{name} at {size:,}: not run (see above)")
                continue
            ns = f"cnbs-{uuid.uuid4().hex[:6]}"
            netns.ensure(ns)
            try:
                t0 = time.perf_counter()
                samples = args.samples if limit is None or size < limit else max(3, args.samples // 30)
                adds, removes = shape(ns, size, samples)
                print(f"{name} at {size:,} elements ({len(adds)} samples, {time.perf_counter() - t0:.1f} s):")
                for label, values in (("add", adds), ("remove", removes)):
                    p50, p99 = percentile(values, 50), percentile(values, 99)
                    row(f"{label} p50 / p99", f"{ms(p50)} / {ms(p99)}", "p99 <= 10 ms", p99 <= 0.010)
            finally:
                nft.forget(ns)
                netns.remove(ns)


if __name__ == "__main__":
    main()
