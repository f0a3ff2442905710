"""Shared fixtures: a database per test (SQLite, or a real PostgreSQL started here), a live API server."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from cloudnet.config import ServerConfig
from cloudnet.store import tables_rbac  # noqa: F401  (its table is on the same MetaData)
from cloudnet.store.db import Store
from cloudnet.store.migrate import upgrade
from cloudnet.store.tables import metadata
from tests.support.podman import describe
from tests.support.postgres import PostgresServer
from tests.support.server import RunningServer
from tests.support.vm_fixtures import ACCEL_PROPERTY

TEST_DB = "cloudnet_test"
# Modules that take longest (`make test PYTEST_ARGS=--durations=200`, summed by module), started first: with
# `--dist loadfile` the suite's wall time is its busiest worker's, and a long module handed out last runs alone.
# (xdist's own order, by number of tests, put these last: the Makefile turns it off for this one.)
SLOW_FIRST = (
    "tests/integration/test_vm_debian.py", "tests/integration/test_readme.py", "tests/api/test_multi_server.py",
    "tests/integration/test_churn.py", "tests/api/test_schemathesis.py", "tests/api/test_ipam_concurrency.py",
    "tests/metadata/test_service.py", "tests/integration/test_guests.py", "tests/ovn/test_gateway_failover.py",
    "tests/ovn/test_cluster.py",
)  # fmt: skip
PLATFORM = Path(__file__).resolve().parent.parent / "scripts" / "platform.sh"


def pytest_report_header() -> list[str]:
    """Which Debian release and which podman/OVN/PostgreSQL the run found (the paths the tests take follow them)."""
    platform = subprocess.run([str(PLATFORM)], capture_output=True, text=True).stdout.strip()
    return [platform, describe()]  # the second: which podman the podman tests drive, through which plugin


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """SLOW_FIRST's modules first, then the others by their number of tests, most first (xdist's default order)."""
    module = {item.nodeid: item.nodeid.split("::", 1)[0] for item in items}
    counts = Counter(module.values())
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: (rank.get(module[item.nodeid], len(rank)), -counts[module[item.nodeid]],
                                 module[item.nodeid]))  # fmt: skip


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Which accelerator the VM tests' QEMU used (KVM only where it really runs a guest), from their reports."""
    used = Counter(
        value for reports in terminalreporter.stats.values() for report in reports
        if getattr(report, "when", "") == "call"
        for name, value in getattr(report, "user_properties", ()) if name == ACCEL_PROPERTY
    )  # fmt: skip
    if used:
        terminalreporter.write_line("QEMU guests ran under: " + "; ".join(f"{a}: {n} tests" for a, n in used.items()))


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer.start()
    try:
        server.psql(f"CREATE DATABASE {TEST_DB}")
        store = Store(server.url(TEST_DB))
        upgrade(store)
        store.dispose()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def _pg_admin(postgres: PostgresServer) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(host=str(postgres.socket_dir), user=postgres.user, dbname=TEST_DB, autocommit=True) as conn:
        # A test that leaks a connection holding locks must fail loudly, not hang the suite.
        conn.execute("SET lock_timeout = '10s'")
        yield conn


def _reset_postgres(conn: psycopg.Connection[Any]) -> None:
    """Empty every table of the test database (as fresh as a new one, in a fraction of the time)."""
    names = ", ".join(t.name for t in metadata.sorted_tables)
    conn.execute(f"TRUNCATE {names} CASCADE")
    conn.execute("INSERT INTO revision_counter (id, value) VALUES (1, 0)")


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "cloudnet.db"
    store = Store(f"sqlite:///{path}")
    upgrade(store)
    store.dispose()
    return path


def new_db_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database of `backend` (also for module-scoped fixtures: tests/api/test_project_isolation.py)."""
    if backend == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        target = tmp_path / "state" / "cloudnet.db"
        target.parent.mkdir(exist_ok=True)
        shutil.copyfile(template, target)
        return f"sqlite:///{target}"
    pg: PostgresServer = request.getfixturevalue("postgres")
    _reset_postgres(request.getfixturevalue("_pg_admin"))
    return pg.url(TEST_DB)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return new_db_url(backend, request, tmp_path)


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store(db_url)
    upgrade(s)  # a no-op on the migrated copy, but proves start-up on an existing schema works
    yield s
    s.dispose()


@pytest.fixture
def server_config(tmp_path: Path) -> ServerConfig:
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    return ServerConfig(state_dir=state)


@pytest.fixture
def server(server_config: ServerConfig, store: Store, request: pytest.FixtureRequest) -> Iterator[RunningServer]:
    if "tokens" in request.fixturenames:
        request.getfixturevalue("tokens")  # the tokens file must exist before the server reads it
    if request.node.get_closest_marker("ovn_dataplane"):
        server_config.dataplane = "ovn"  # (the API's rules of --dataplane ovn, such as many hosts; no OVN starts)
    srv = RunningServer.start(server_config, store)
    yield srv
    srv.stop()


@pytest.fixture
def api(server: RunningServer) -> Iterator[httpx.Client]:
    """An admin client of the /v2.0 API (no tokens file: every token is admin on loopback)."""
    with httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=30) as client:
        yield client


@pytest.fixture
def tokens(server_config: ServerConfig) -> dict[str, dict[str, object]]:
    """Write a tokens file with an admin and two projects; the server picks it up within a second."""
    data = {
        "admin-token": {"project_id": "ops", "admin": True},
        "alice-token": {"project_id": "alice", "admin": False},
        "bob-token": {"project_id": "bob", "admin": False},
    }
    server_config.tokens_file.write_text(json.dumps({"tokens": data}))
    return data


@pytest.fixture
def users(server: RunningServer, tokens: dict[str, dict[str, object]]) -> Iterator[dict[str, httpx.Client]]:
    """Clients for the tokens file: `admin` (project ops), `alice` and `bob` (plain members)."""
    clients = {
        name: httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": f"{name}-token"}, timeout=30)
        for name in ("admin", "alice", "bob")
    }
    yield clients
    for client in clients.values():
        client.close()
