"""OVSDB's JSON parser in C for the `ovs` library, when the system has it.

The `ovs` package from PyPI (what ovsdbapp pulls into the virtualenv) parses OVSDB's JSON-RPC in pure Python unless
it was built against libopenvswitch; its parser then dominates every NB/SB transaction with big rows (a load balancer
with 10,000 VIPs: 0.4 s to parse its update, against 15 ms in C). Debian's python3-openvswitch (a dependency of
openvswitch-switch, which the installer adds) ships that parser as the extension module `ovs._json`. If the `ovs` in
use has none, the system's is loaded in its place, after a check that it parses a sample exactly as the Python
parser does (otherwise the Python one stays).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import logging
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import ovs
import ovs.json

log = logging.getLogger(__name__)
_lock = threading.Lock()
SAMPLE = ('{"id":7,"method":"update2","params":["m",{"T":{"8b1c":{"modify":{"vips":["map",[["[2001:db8::1]:80",'
          '"10.0.0.5:8080"]]],"n":-1.5e3,"big":1099511627776,"s":"\\u00e9\\n\\"\\\\x","t":true,"f":false,'
          '"z":null}}}}]}')  # fmt: skip


def _candidates() -> list[Path]:
    return [Path(entry, "ovs", f"_json{suffix}") for entry in sys.path if entry
            for suffix in importlib.machinery.EXTENSION_SUFFIXES]  # fmt: skip


def _load(path: Path) -> ModuleType | None:
    try:
        loader = importlib.machinery.ExtensionFileLoader("ovs._json", str(path))
        spec = importlib.util.spec_from_file_location("ovs._json", str(path), loader=loader)
        if spec is None:
            return None
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        return module
    except (ImportError, OSError) as exc:
        log.debug("OVSDB JSON parser %s not usable: %s", path, exc)
        return None


def _parse(parser: Any) -> Any:
    for start in range(0, len(SAMPLE), 16):  # (fed in pieces, as a socket delivers it)
        parser.feed(SAMPLE[start : start + 16])
    return parser.finish()


def use_c_parser() -> bool:
    """Make `ovs` parse JSON in C if it can (idempotent); whether it does."""
    with _lock:
        if ovs.json.PARSER == ovs.json.PARSER_C:
            return True
        expected = _parse(ovs.json.Parser())
        for path in _candidates():
            if not path.is_file() or (module := _load(path)) is None:
                continue
            try:
                same = _parse(module.Parser()) == expected
            except Exception:  # a foreign extension: whatever it raises, it is not used
                same = False
            if not same:
                log.debug("OVSDB JSON parser %s parses differently: not used", path)
                continue
            ovs._json = module  # type: ignore[attr-defined]
            ovs.json.ovs = ovs  # type: ignore[attr-defined]  (ovs/json.py names it through its own import)
            sys.modules["ovs._json"] = module
            ovs.json.PARSER = ovs.json.PARSER_C
            log.info("OVSDB JSON parser: %s", path)
            return True
        return False
