"""PostgreSQL's own high availability under cloudnet (issue 29; root: the servers run as `postgres`): cloudnet
writes through the restart of its primary and through the promotion of a synchronous standby, and every write it
acknowledged (201) is there afterwards. Real servers: a primary and a streaming standby made by pg_basebackup, each
on a Unix socket of its own; cloudnet's database URL lists both hosts with `target_session_attrs=read-write`
(libpq's way to find the primary), as the README's set-up says. While the database is away cloudnet answers 503
(DatabaseUnavailable, nothing changed) and recovers by itself."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cloudnet.config import ServerConfig
from cloudnet.store.db import Store
from cloudnet.store.migrate import upgrade
from tests.support.postgres import PostgresServer
from tests.support.server import RunningServer

pytestmark = pytest.mark.postgres
DURABLE = {"synchronous_commit": "on"}  # (the suite's own servers turn it off: an acknowledged write could go)
RECOVERY = 60.0  # seconds for cloudnet to write again once the database is back


class Churn:
    """Networks created one after another from a thread; the names the API acknowledged (201), and how many were
    refused while the database was away (503)."""

    def __init__(self, client: httpx.Client) -> None:
        self.client, self.acknowledged, self.refused = client, list[str](), 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            name = f"churn-{i}"
            i += 1
            try:
                r = self.client.post("/networks", json={"network": {"name": name}})
            except httpx.HTTPError:
                continue
            if r.status_code == 201:
                self.acknowledged.append(name)
            else:
                assert r.status_code == 503 and "DatabaseUnavailable" in r.text, r.text
                self.refused += 1
                time.sleep(0.05)  # (a client backing off, as Retry-After asks)

    def until_acknowledged(self, more: int, timeout: float = RECOVERY) -> None:
        """Wait until `more` writes beyond the current count are acknowledged."""
        target = len(self.acknowledged) + more
        deadline = time.monotonic() + timeout
        while len(self.acknowledged) < target:
            assert self.thread.is_alive(), "the churn stopped"
            assert time.monotonic() < deadline, f"no write acknowledged in {timeout:g} s ({self.refused} refused)"
            time.sleep(0.05)

    def finish(self) -> list[str]:
        self.stop.set()
        self.thread.join(30)
        return list(self.acknowledged)


def _serve(url: str, state: Path) -> tuple[RunningServer, Store]:
    store = Store(url)
    upgrade(store)
    return RunningServer.start(ServerConfig(state_dir=state, quotas={"network": -1}), store), store


def _names(client: httpx.Client) -> set[str]:
    return {n["name"] for n in client.get("/networks").json()["networks"]}


@contextlib.contextmanager
def _client(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=30) as client:
        yield client


def test_a_restarted_primary_loses_no_acknowledged_write(tmp_path: Path) -> None:
    pg = PostgresServer.start(DURABLE)
    try:
        pg.psql("CREATE DATABASE cloudnet")
        server, store = _serve(pg.url("cloudnet"), tmp_path)
        try:
            with _client(server) as client:
                churn = Churn(client)
                churn.until_acknowledged(20)
                # A crash (no checkpoint, every backend killed), then a start (its log a file: pg_ctl's pipes close).
                pg.pg_ctl("-m", "immediate", "-l", str(pg.socket_dir / "log"), "restart")
                churn.until_acknowledged(20)
                acknowledged = churn.finish()
                assert set(acknowledged) <= _names(client)
        finally:
            server.stop()
            store.dispose()
    finally:
        pg.stop()


def test_a_promoted_synchronous_standby_loses_no_acknowledged_write(tmp_path: Path) -> None:
    primary = PostgresServer.start(DURABLE)
    standby: PostgresServer | None = None
    try:
        standby = PostgresServer.standby_of(primary)
        # Synchronous: a commit is acknowledged once the standby has it (asynchronous replication can lose the last
        # acknowledged writes on a fail-over, whatever cloudnet does).
        primary.psql("ALTER SYSTEM SET synchronous_standby_names = '*'")
        primary.psql("SELECT pg_reload_conf()")
        primary.psql("CREATE DATABASE cloudnet")
        url = (f"postgresql+psycopg://{primary.user}@/cloudnet?host={primary.socket_dir},{standby.socket_dir}"
               "&target_session_attrs=read-write")  # fmt: skip
        server, store = _serve(url, tmp_path)
        try:
            with _client(server) as client:
                churn = Churn(client)
                churn.until_acknowledged(20)
                primary.pg_ctl("-m", "immediate", "stop")  # the primary's host goes
                standby.pg_ctl("promote")
                churn.until_acknowledged(20)
                acknowledged = churn.finish()
                assert churn.refused > 0  # (the database was away: cloudnet said so and went on)
                assert set(acknowledged) <= _names(client)
        finally:
            server.stop()
            store.dispose()
    finally:
        with contextlib.suppress(Exception):
            primary.stop()
        if standby is not None:
            standby.stop()
