"""A database that cannot take writes (a full disk, a read-only database) answers 503 with a clear message, changes
nothing, and the server recovers by itself once the operator fixes it. Real file systems: a small tmpfs holds the
SQLite database, or a PostgreSQL tablespace."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cloudnet.config import ServerConfig
from cloudnet.store.db import Store
from cloudnet.store.migrate import upgrade
from tests.support.api import check_error
from tests.support.postgres import PostgresServer
from tests.support.server import RunningServer

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mounts a tmpfs)")


@pytest.fixture
def tiny() -> Iterator[Path]:
    """A 4 MiB tmpfs (owned by `postgres` when that account exists, for a tablespace), on a path that account can
    reach (pytest's own temporary directories are root's alone)."""
    parent = Path(tempfile.mkdtemp(prefix="cloudnet-tiny-"))
    os.chmod(parent, 0o755)
    mnt = parent / "tiny"
    mnt.mkdir()
    try:
        owner = pwd.getpwnam("postgres")
        opts = f"size=4m,mode=0700,uid={owner.pw_uid},gid={owner.pw_gid}"
    except KeyError:
        opts = "size=4m,mode=0700"
    subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        shutil.rmtree(parent, ignore_errors=True)


def fill(directory: Path) -> Path:
    """Take every free byte of the file system `directory` is on."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (65536, 512, 1):  # until not even a byte fits
            try:
                while os.write(fd, b"\0" * size):
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def post_until_unavailable(client: httpx.Client, tries: int = 200) -> httpx.Response:
    """Networks with long descriptions until the database refuses one (answered 503); the refused answer."""
    for i in range(tries):
        r = client.post("/networks", json={"network": {"name": f"n{i}", "description": "d" * 255}})
        if r.status_code != 201:
            return r
    raise AssertionError("the database never ran out of space")


def assert_unavailable(r: httpx.Response, words: str) -> None:
    err = check_error(r, 503, "DatabaseUnavailable", words, "Nothing was changed")
    assert r.headers["retry-after"] == "5", err


def names_of(client: httpx.Client) -> set[str]:
    return {n["name"] for n in client.get("/networks").json()["networks"]}


@pytest.fixture
def sqlite_on_tiny(tiny: Path, sqlite_template: Path) -> Iterator[tuple[httpx.Client, Store]]:
    shutil.copyfile(sqlite_template, tiny / "cloudnet.db")
    store = Store(f"sqlite:///{tiny / 'cloudnet.db'}")
    upgrade(store)
    server = RunningServer.start(ServerConfig(state_dir=tiny), store)
    with httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=30) as client:
        yield client, store
    server.stop()
    store.dispose()


def test_sqlite_full_disk_is_503_and_passes(sqlite_on_tiny: tuple[httpx.Client, Store], tiny: Path) -> None:
    client, _store = sqlite_on_tiny
    assert client.post("/networks", json={"network": {"name": "before"}}).status_code == 201
    filler = fill(tiny)
    refused = post_until_unavailable(client)
    assert_unavailable(refused, "disk")
    stored = names_of(client)  # reads still work
    assert "before" in stored
    filler.unlink()  # the operator frees space: the very next write works, no restart
    r = client.post("/networks", json={"network": {"name": "after"}})
    assert r.status_code == 201, r.text
    assert names_of(client) == stored | {"after"}


def test_sqlite_read_only_file_system_is_503_and_passes(sqlite_on_tiny: tuple[httpx.Client, Store],
                                                         tiny: Path) -> None:  # fmt: skip
    client, store = sqlite_on_tiny
    assert client.post("/networks", json={"network": {"name": "before"}}).status_code == 201
    store.dispose()  # (a file system goes read-only under files open for writing only by force)
    subprocess.run(["mount", "-o", "remount,ro", str(tiny)], check=True)
    try:
        assert_unavailable(client.post("/networks", json={"network": {"name": "x"}}), "read-only")
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(tiny)], check=True)
    r = client.post("/networks", json={"network": {"name": "after"}})
    assert r.status_code == 201, r.text
    assert names_of(client) == {"before", "after"}


@pytest.fixture
def pg_on_tiny(postgres: PostgresServer, tiny: Path) -> Iterator[tuple[httpx.Client, Store, str]]:
    """A database of its own whose tables live in a tablespace on the tmpfs."""
    name = f"cn_tiny_{uuid.uuid4().hex[:8]}"
    space = f"tiny_{name}"
    postgres.psql(f"CREATE TABLESPACE {space} LOCATION '{tiny}'")
    postgres.psql(f"CREATE DATABASE {name} TABLESPACE {space}")
    store = Store(postgres.url(name))
    upgrade(store)
    state = tiny.parent / "state"
    state.mkdir()
    # No network quota: PostgreSQL may have extended a table by many pages before the disk filled (it adds extra
    # blocks when others wait for the extension lock), so more than the default 100 rows may still fit.
    server = RunningServer.start(ServerConfig(state_dir=state, quotas={"network": -1}), store)
    try:
        with httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": "admin"}, timeout=30) as client:
            yield client, store, name
    finally:
        server.stop()
        store.dispose()
        (tiny / "filler").unlink(missing_ok=True)
        # FORCE: a pooled connection the stopped server left behind must not fail the teardown.
        postgres.psql(f"DROP DATABASE {name} WITH (FORCE)")
        postgres.psql(f"DROP TABLESPACE {space}")


@pytest.mark.postgres
def test_postgresql_full_disk_is_503_and_passes(pg_on_tiny: tuple[httpx.Client, Store, str], tiny: Path) -> None:
    client, _store, _name = pg_on_tiny
    assert client.post("/networks", json={"network": {"name": "before"}}).status_code == 201
    filler = fill(tiny)
    assert_unavailable(post_until_unavailable(client, tries=5000), "disk")
    stored = names_of(client)
    filler.unlink()
    r = client.post("/networks", json={"network": {"name": "after"}})
    assert r.status_code == 201, r.text
    assert names_of(client) == stored | {"after"}


@pytest.mark.postgres
def test_postgresql_read_only_is_503_and_passes(pg_on_tiny: tuple[httpx.Client, Store, str],
                                                postgres: PostgresServer) -> None:  # fmt: skip
    client, store, name = pg_on_tiny
    postgres.psql(f"ALTER DATABASE {name} SET default_transaction_read_only = on")
    store.engine.dispose()  # (as after a fail-over: new connections, to a database that is read-only now)
    assert_unavailable(client.post("/networks", json={"network": {"name": "x"}}), "read-only")
    assert client.get("/networks").status_code == 200
    postgres.psql(f"ALTER DATABASE {name} RESET default_transaction_read_only")
    store.engine.dispose()
    r = client.post("/networks", json={"network": {"name": "after"}})
    assert r.status_code == 201, r.text
    assert names_of(client) == {"after"}
