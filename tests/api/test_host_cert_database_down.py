"""An agent's request over its host certificate while PostgreSQL is down (found by tests/ovn/test_fleet.py's restart):
the revocation check the guard makes before any route reads the database, and its failure was answered as an
unhandled error (500, a traceback in the log). It is answered as the routes answer a database away, 503
DatabaseUnavailable with Retry-After, and the same request succeeds once the database is back."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudnet.store.db import Store
from cloudnet.store.migrate import upgrade
from tests.support.postgres import FAST, PostgresServer
from tests.support.tls import tls_serve

pytestmark = pytest.mark.postgres


def test_a_host_certificate_request_gets_503_while_the_database_is_down(tmp_path: Path) -> None:
    # (commits durable: an immediate stop must not lose the join's certificate record, as FAST's would under load)
    pg = PostgresServer.start({"synchronous_commit": "on"})
    try:
        pg.psql("CREATE DATABASE cloudnet")
        store = Store(pg.url("cloudnet"))
        upgrade(store)
        store.dispose()
        with tls_serve(tmp_path / "state", "--db", pg.url("cloudnet")) as server:
            cert = server.join("h1", tmp_path / "h1")
            with server.client(None, cert) as agent:  # (its certificate alone, as a joined agent sends)
                first = agent.get("/hosts/h1/state")
                assert first.status_code == 200, first.text
                pg.pg_ctl("-m", "immediate", "stop")
                try:
                    r = agent.get("/hosts/h1/state")
                finally:
                    pg.run_server({**FAST, "synchronous_commit": "on"})
                assert r.status_code == 503, r.text
                assert r.json()["NeutronError"]["type"] == "DatabaseUnavailable" and r.headers["Retry-After"] == "5"
                server.until_logged("database unavailable checking host h1's certificate")
                again = agent.get("/hosts/h1/state")
                assert again.status_code == 200, again.text
    finally:
        pg.stop()
