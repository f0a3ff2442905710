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
    def start(cls) -> PostgresServer:
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
        server._run([str(bindir / "initdb"), "-D", str(root / "data"), "-A", "trust", "-U", user, "--no-sync",
                     "-E", "UTF8"])  # fmt: skip
        server._run(
            [
                str(bindir / "pg_ctl"), "-D", str(root / "data"), "-l", str(root / "sock" / "log"), "-w", "start",
                "-o", f"-c listen_addresses='' -k {root / 'sock'} -c fsync=off -c full_page_writes=off "
                "-c synchronous_commit=off -c max_connections=200",
            ]
        )  # fmt: skip
        return server

    def stop(self) -> None:
        try:
            self._run([str(self.bindir / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop"])
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
