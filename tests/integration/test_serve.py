"""`cloudnet serve` as a real process: start-up, migrations, persistence, SIGTERM, auth policy."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
from pathlib import Path

import httpx
from alembic.script import ScriptDirectory

from cloudnet.store.migrate import MIGRATIONS
from tests.support.process import CLOUDNET, free_port, serve


def test_serve_migrates_persists_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    with serve(tmp_path) as (proc, url):
        r = httpx.post(url + "/v2.0/networks", json={"network": {"name": "persisted"}})
        assert r.status_code == 201
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
        assert proc.returncode == 0, out
        assert "accepting any token as admin" in out  # the open mode is announced
    db = tmp_path / "cloudnet.db"
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        head = ScriptDirectory(str(MIGRATIONS)).get_current_head()
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone()[0] == head
    with serve(tmp_path) as (_proc, url):  # second start: schema already current, data still there
        names = [n["name"] for n in httpx.get(url + "/v2.0/networks").json()["networks"]]
        assert names == ["persisted"]


def test_serve_on_postgresql(tmp_path: Path, postgres) -> None:  # type: ignore[no-untyped-def]
    postgres.psql("CREATE DATABASE serve_test")
    with serve(tmp_path, "--db", postgres.url("serve_test")) as (proc, url):
        assert httpx.post(url + "/v2.0/networks", json={"network": {"name": "pg"}}).status_code == 201
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    assert not (tmp_path / "cloudnet.db").exists()


def test_refuses_non_loopback_bind_without_tokens(tmp_path: Path) -> None:
    proc = subprocess.run(
        [CLOUDNET, "serve", "--state-dir", str(tmp_path), "--host", "0.0.0.0", "--port", str(free_port())],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "tokens" in proc.stderr and "0.0.0.0" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_malformed_tokens_file_is_a_clear_startup_error(tmp_path: Path) -> None:
    (tmp_path / "tokens.json").write_text('{"tokens": ')
    proc = subprocess.run(
        [CLOUDNET, "serve", "--state-dir", str(tmp_path), "--port", str(free_port())],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.startswith("Error: cannot start: cannot read tokens file")
    assert "Traceback" not in proc.stderr


def test_a_second_up_says_in_one_line_that_cloudnet_runs(tmp_path: Path) -> None:
    with serve(tmp_path / "first", "--metadata-listen", "off") as (proc, url):
        port = url.rsplit(":", 1)[1]
        second = subprocess.run(
            [CLOUDNET, "up", "--state-dir", str(tmp_path / "second"), "--port", port, "--agent-host", "x"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert second.returncode == 1
        assert second.stderr == f"Error: cannot start: cloudnet already runs (pid {proc.pid}, {url})\n"
        assert second.stdout == ""
        assert not (tmp_path / "second").exists()  # stopped before touching anything


def test_an_address_held_by_another_program_is_named(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as holder:
        port = holder.getsockname()[1]
        done = subprocess.run([CLOUDNET, "serve", "--state-dir", str(tmp_path), "--port", str(port)],
                              capture_output=True, text=True, timeout=30)  # fmt: skip
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith(f"Error: cannot start: http://127.0.0.1:{port} is in use by another process (pid ")
    assert f"pid {os.getpid()}," in done.stderr
