"""An agent's metric samples, as its heartbeat brings them (cloudnet/metrics.py: `samples()`), checked and rendered
once, when the heartbeat is stored: a scrape then only joins text (100 hosts' ~15,000 series in a few ms, where
checking and rendering them at every scrape took ~130 ms).

They come from a host (or anyone holding an admin token): only the families an agent may send (AGENT_FAMILIES), with
their own label names, values of a plain alphabet and finite numbers, at most MAX_SAMPLES; anything else is dropped.
So a hostile report can neither forge a server family nor break the text format nor blow up a scrape's cardinality.
"""

from __future__ import annotations

import math
import re
from typing import Any

from prometheus_client.utils import floatToGoString

from cloudnet import metrics

MAX_SAMPLES = 500  # per host: its families have few label values (kinds, trees, statuses, commands)
LABEL_VALUE = re.compile(r"^[A-Za-z0-9_.:+-]{0,64}$")  # (nothing the text format would need to escape)
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
KEY = "metrics"  # in the host's report: the agent's samples as sent, then {family: its text lines} as stored


def _line(host: str, item: Any) -> tuple[str, str] | None:
    """(family, its exposition line) of one sample, if it is one an agent may send."""
    if not isinstance(item, list) or len(item) != 4:
        return None
    family, name, labels, value = item
    spec = metrics.AGENT_FAMILIES.get(family) if isinstance(family, str) else None
    if spec is None or not isinstance(name, str) or not isinstance(labels, dict) or not name.startswith(family):
        return None
    kind, names = spec
    suffix = name[len(family) :]
    if suffix not in SUFFIXES[kind] or set(labels) != set(names) | ({"le"} if suffix == "_bucket" else set()):
        return None
    if not all(isinstance(v, str) and LABEL_VALUE.match(v) for v in labels.values()):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    pairs = "".join(f',{k}="{labels[k]}"' for k in sorted(labels))
    return family, f'{name}{{host="{host}"{pairs}}} {floatToGoString(value)}\n'


def rendered(host: str, report: dict[str, Any]) -> dict[str, Any]:
    """The report to store: its samples (if any) as text lines by family, with the host's name."""
    raw = report.get(KEY)
    if raw is None:
        return report
    lines: dict[str, list[str]] = {}
    host = host.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    for item in raw[:MAX_SAMPLES] if isinstance(raw, list) else ():
        found = _line(host, item)
        if found is not None:
            lines.setdefault(found[0], []).append(found[1])
    return {**report, KEY: {family: "".join(text) for family, text in lines.items()}}


def stored(report: Any) -> dict[str, str]:
    """{family: text} of a stored report (nothing from one stored otherwise)."""
    chunks = report.get(KEY) if isinstance(report, dict) else None
    if not isinstance(chunks, dict):
        return {}
    return {f: text for f, text in chunks.items() if f in metrics.AGENT_FAMILIES and isinstance(text, str)}
