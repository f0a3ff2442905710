"""The driver's protocol tests: SQLite (the database is not what is tested), the driver on a socket of its own."""

from __future__ import annotations

import pytest

from tests.support.docker_driver import driver_for

__all__ = ["driver_for"]


@pytest.fixture
def backend() -> str:
    return "sqlite"
