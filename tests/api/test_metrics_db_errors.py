"""A database that refuses writes (a full disk, a real tmpfs) shows in /metrics: the failed write transactions
counted as database errors, the 503s beside the route that answered them, reads still timed."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from cloudnet.store.db import Store
from tests.api.test_storage_unavailable import fill, post_until_unavailable, sqlite_on_tiny, tiny  # noqa: F401
from tests.support.scrape import scrape

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mounts a tmpfs)")
ERRORS = "cloudnet_db_transaction_errors_total"
ANSWERS = {"method": "POST", "route": "/v2.0/networks", "status": "503"}


def test_a_full_disk_counts_database_errors(sqlite_on_tiny: tuple[httpx.Client, Store], tiny: Path) -> None:  # noqa: F811
    client, _store = sqlite_on_tiny
    base = str(client.base_url).removesuffix("/v2.0/").removesuffix("/v2.0")
    before = scrape(base)
    filler = fill(tiny)
    try:
        assert post_until_unavailable(client).status_code == 503
        after = scrape(base)  # (a scrape only reads: it works on a full disk)
    finally:
        filler.unlink()
    assert after.value(ERRORS, kind="write") > before.value(ERRORS, kind="write")
    assert after.value(ERRORS, kind="read") == before.value(ERRORS, kind="read")
    assert (
        after.value("cloudnet_api_requests_total", **ANSWERS) - before.value("cloudnet_api_requests_total", **ANSWERS)
        == 1
    )
    assert after.value("cloudnet_db_transaction_duration_seconds_count", kind="read") > before.value(
        "cloudnet_db_transaction_duration_seconds_count", kind="read")  # fmt: skip
