"""/metrics of a real `cloudnet serve --tls`: scraped over HTTPS with an admin token, as Prometheus would (its
Bearer header); a joined host's certificate gets nothing (members' tokens: tests/api/test_metrics.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.scrape import parse
from tests.support.tls import ADMIN, TlsServer, tls_serve


@pytest.fixture
def server(tmp_path: Path) -> Iterator[TlsServer]:
    with tls_serve(tmp_path / "server") as s:
        yield s


def test_a_host_certificate_scrapes_nothing(server: TlsServer, tmp_path: Path) -> None:
    cert = server.join("mx-tls", tmp_path / "host")
    with server.client(None) as anyone:
        r = anyone.get(server.url + "/metrics", headers={"Authorization": f"Bearer {ADMIN}"})
        assert r.status_code == 200, r.text
        assert "cloudnet_api_requests" in parse(r.text).families
    with server.client(None, cert) as host:
        r = host.get(server.url + "/metrics")
        assert r.status_code == 403, r.text
        assert r.json()["NeutronError"]["type"] == "HostCertificateRefused"
        assert host.put("/hosts/mx-tls", json={"host": {"report": {}}}).status_code == 200  # (its own calls work)
