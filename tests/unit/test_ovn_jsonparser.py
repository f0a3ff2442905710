"""The OVSDB JSON parser cloudnet makes the `ovs` library use: the system's C one when present, parsing exactly as
the Python one does; a file that is no such extension is never used."""

from __future__ import annotations

import json
from pathlib import Path

import ovs.json

from cloudnet.ovn import jsonparser
from tests.support.installed import require


def test_the_parser_in_use_reads_ovsdb_json_as_json_does() -> None:
    jsonparser.use_c_parser()
    text = json.dumps(
        {
            "id": 3,
            "result": [
                {
                    "rows": [
                        {
                            "vips": ["map", [["[2001:db8::1]:80", "10.0.0.5:8080"]]],
                            "s": '\u00e9\n"\\',
                            "n": -1.5,
                            "big": 2**40,
                            "t": True,
                        }
                    ]
                }
            ],
        }
    )
    assert ovs.json.from_string(text) == json.loads(text)


def test_the_c_parser_is_used_where_debian_ships_it() -> None:
    present = any(path.is_file() for path in jsonparser._candidates())
    require(present, "the OVSDB JSON parser in C", "python3-openvswitch")
    assert jsonparser.use_c_parser() and ovs.json.PARSER == ovs.json.PARSER_C


def test_a_file_that_is_no_parser_is_not_loaded(tmp_path: Path) -> None:
    fake = tmp_path / "ovs" / "_json.so"
    fake.parent.mkdir()
    fake.write_bytes(b"\x7fELF not really")
    assert jsonparser._load(fake) is None
