"""Fixtures of the API tests beyond the shared ones (tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cloudnet.store.db import Store
from tests.support import migrations
from tests.support.process import serve


@pytest.fixture
def other(tmp_path: Path, db_url: str) -> Iterator[httpx.Client]:
    """An admin client of a second `cloudnet serve` process on the same database (no tokens file: every
    token is admin)."""
    with (
        serve(tmp_path / "other", "--db", db_url, "--metadata-listen", "off", "--pool-min", "0") as (_proc, url),
        httpx.Client(base_url=url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=60) as client,
    ):
        yield client


@pytest.fixture
def old_store(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """An empty database for a migration test (test_migration_*.py) to bring to an earlier schema."""
    return migrations.old_store(backend, request, tmp_path, "m" + request.module.__name__.rpartition("_")[2])
