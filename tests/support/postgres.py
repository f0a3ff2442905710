"""A throwaway PostgreSQL server for the tests: its own data directory, Unix socket only.

It listens on no TCP port at all, so it cannot clash with another run or a distro-started server.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path


def _bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not found:
        raise RuntimeError("PostgreSQL is not installed (Debian package 'postgresql'); run `make test`")
    return Path(found[-1]).parent


# Fast and unsafe: the suite's databases are thrown away (a test of durability asks for synchronous_commit=on).
FAST = {"fsync": "off", "full_page_writes": "off", "synchronous_commit": "off", "max_connections": "200"}


@dataclass
class PostgresServer:
    root: Path
    bindir: Path
    user: str

    @property
    def socket_dir(self) -> Path:
        return self.root / "sock"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{self.user}@/{database}?host={self.socket_dir}"

    def psql(self, sql: str, database: str = "postgres") -> None:
        self._run([str(self.bindir / "psql"), "-h", str(self.socket_dir), "-U", self.user, "-d", database,
                   "-v", "ON_ERROR_STOP=1", "-q", "-c", sql])  # fmt: skip

    def _run(self, cmd: list[str]) -> None:
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, text=True)

    @classmethod
    def start(cls, settings: dict[str, str] | None = None) -> PostgresServer:
        """A new server (initdb), fast and unsafe by default (`settings` override: e.g. synchronous_commit=on)."""
        server = cls._make()
        server._run([str(server.bindir / "initdb"), "-D", str(server.data), "-A", "trust", "-U", server.user,
                     "--no-sync", "-E", "UTF8"])  # fmt: skip
        server.run_server({**FAST, **(settings or {})})
        return server

    @classmethod
    def standby_of(cls, primary: PostgresServer) -> PostgresServer:
        """A streaming replica of `primary` (pg_basebackup -R: it follows the primary until promoted)."""
        server = cls._make()
        server._run([str(server.bindir / "pg_basebackup"), "-h", str(primary.socket_dir), "-U", server.user,
                     "-D", str(server.data), "-R", "-X", "stream", "--no-sync"])  # fmt: skip
        server.run_server(FAST)
        return server

    @classmethod
    def _make(cls) -> PostgresServer:
        bindir = _bindir()
        # initdb refuses to run as root: run the server as the `postgres` account Debian creates.
        user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        root = Path(tempfile.mkdtemp(prefix="cloudnet-pg-"))
        os.chmod(root, 0o755)
        server = cls(root=root, bindir=bindir, user=user)
        (root / "sock").mkdir()
        if os.geteuid() == 0:
            shutil.chown(root / "sock", user)
            (root / "data").mkdir(mode=0o700)
            shutil.chown(root / "data", user)
        return server

    @property
    def data(self) -> Path:
        return self.root / "data"

    def run_server(self, settings: dict[str, str]) -> None:
        options = " ".join(f"-c {k}={v}" for k, v in settings.items())
        self._run([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.socket_dir / "log"), "-w",
                   "start", "-o", f"-c listen_addresses='' -k {self.socket_dir} {options}"])  # fmt: skip

    def pg_ctl(self, *args: str) -> None:
        self._run([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-w", *args])

    def stop(self) -> None:
        try:
            self.pg_ctl("-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
