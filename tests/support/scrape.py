"""GET /metrics read as Prometheus reads it (prometheus_client's own text parser): samples by name and labels."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

Labels = frozenset[tuple[str, str]]


@dataclass
class Scrape:
    families: dict[str, str]  # family name -> type
    samples: dict[tuple[str, Labels], float]

    def value(self, name: str, **labels: str) -> float:
        """The sample's value (0 when absent: a counter not yet counted)."""
        return self.samples.get((name, frozenset(labels.items())), 0.0)

    def total(self, name: str, **labels: str) -> float:
        """Sum over every sample of `name` whose labels include `labels`."""
        want = set(labels.items())
        return sum(v for (n, ls), v in self.samples.items() if n == name and want <= ls)

    def label_values(self, name: str, label: str) -> set[str]:
        return {dict(ls)[label] for (n, ls) in self.samples if n == name and label in dict(ls)}


def parse(text: str) -> Scrape:
    families: dict[str, str] = {}
    samples: dict[tuple[str, Labels], float] = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = family.type
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return Scrape(families, samples)


def scrape(base_url: str, token: str = "admin") -> Scrape:
    """The server's /metrics (`base_url`: the server's root, not /v2.0)."""
    r = httpx.get(base_url + "/metrics", headers={"X-Auth-Token": token}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(r.text)
