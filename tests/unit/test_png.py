"""The UI tests' PNG reader (tests/support/png.py) against images encoded here with each of PNG's row filters."""

from __future__ import annotations

import random
import struct
import zlib

from tests.support.png import drawn_share, pixels


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def _encode(rows: list[bytes], width: int, bpp: int) -> bytes:
    """A PNG of these rows, row y filtered with filter y % 5."""
    raw, prev = b"", bytes(width * bpp)
    for y, row in enumerate(rows):
        kind, out = y % 5, bytearray()
        for i, x in enumerate(row):
            a, b, c = row[i - bpp] if i >= bpp else 0, prev[i], prev[i - bpp] if i >= bpp else 0
            pred = [0, a, b, (a + b) // 2, _paeth(a, b, c)][kind]
            out.append((x - pred) & 0xFF)
        raw += bytes([kind]) + bytes(out)
        prev = row

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, len(rows), 8, 6 if bpp == 4 else 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def test_every_filter_reads_back() -> None:
    rng = random.Random(30)
    for bpp in (3, 4):
        rows = [bytes(rng.randrange(256) for _ in range(7 * bpp)) for _ in range(10)]
        assert pixels(_encode(rows, 7, bpp)) == (7, 10, rows)


def test_drawn_share_is_what_differs_from_the_background() -> None:
    white, ink = b"\xff\xff\xff", b"\x10\x20\x30"
    blank = [white * 10 for _ in range(10)]
    assert drawn_share(_encode(blank, 10, 3)) == 0
    marked = [white * 10 for _ in range(8)] + [ink * 10 for _ in range(2)]
    assert abs(drawn_share(_encode(marked, 10, 3)) - 0.2) < 1e-9
