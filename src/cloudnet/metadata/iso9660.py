"""ISO 9660 images made in memory, with Rock Ridge and Joliet names, as Nova's `genisoimage -J -r` writes a config
drive. pycdlib writes them (pure Python: no temporary tree on disk, no child process)."""

from __future__ import annotations

import io
from collections.abc import Mapping

import pycdlib


def image(label: str, files: Mapping[str, bytes], publisher: str = "cloudnet") -> bytes:
    """An image labelled `label` holding `files` (relative POSIX paths -> content); directories are made as the
    paths need them. Interchange level 4 lets the plain ISO 9660 names be the files' own (lowercase, dashes,
    several dots), as Nova's `-l -allow-lowercase -allow-multidot` do, for readers that know neither extension."""
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=4, vol_ident=label, joliet=3, rock_ridge="1.09", pub_ident_str=publisher,
            app_ident_str=publisher)  # fmt: skip
    try:
        made: set[str] = set()
        for path, data in sorted(files.items()):
            parts = path.split("/")
            for depth in range(1, len(parts)):
                directory = "/" + "/".join(parts[:depth])
                if directory not in made:
                    iso.add_directory(directory, rr_name=parts[depth - 1], joliet_path=directory)
                    made.add(directory)
            iso.add_fp(io.BytesIO(data), len(data), "/" + path, rr_name=parts[-1], joliet_path="/" + path)
        out = io.BytesIO()
        iso.write_fp(out)
        return out.getvalue()
    finally:
        iso.close()
