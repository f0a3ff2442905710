"""The metadata API as `cloudnet serve` runs it: its listening socket and its settings.

It listens apart from the REST API (nova's 8775 beside neutron's 9696), on TCP or on a Unix socket
(`unix:/path`, for an agent on the same host). Only requests signed by an agent are answered, so the address
needs no firewalling of its own, but it should not face guests directly either.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloudnet.config import ServerConfig
from cloudnet.metadata.model import Settings

DISABLED = ("", "off", "none")


class MetadataConfigError(ValueError):
    """A metadata setting cannot be used (bad listen address, unreadable vendor data)."""


@dataclass(frozen=True)
class Listen:
    host: str | None = None
    port: int | None = None
    path: Path | None = None

    def __str__(self) -> str:
        if self.path is not None:
            return f"unix:{self.path}"
        return f"[{self.host}]:{self.port}" if self.host and ":" in self.host else f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host if self.host and ':' not in self.host else f'[{self.host}]'}:{self.port}"


def parse_listen(value: str) -> Listen | None:
    """`127.0.0.1:8775`, `[::1]:8775`, `unix:/run/cloudnet/metadata.sock`; None when disabled."""
    value = value.strip()
    if value.lower() in DISABLED:
        return None
    if value.startswith("unix:"):
        path = value[len("unix:") :]
        if not path.startswith("/"):
            raise MetadataConfigError(f"metadata listen address {value!r}: a Unix socket needs an absolute path")
        return Listen(path=Path(path))
    host, sep, port = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise MetadataConfigError(f"metadata listen address {value!r} must look like HOST:PORT or unix:/PATH")
    return Listen(host=host, port=int(port))


def bind(listen: Listen) -> socket.socket:
    """The listening socket, bound now so that a clash is a start-up error and not a log line later."""
    if listen.path is not None:
        path = listen.path
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(path.lstat().st_mode):
                path.unlink()  # left over by a previous run: nothing can be listening on it any more
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(path))
            # Only root (the agent) talks to it; the signature is the real check, this keeps the noise out.
            os.chmod(path, 0o600)
            sock.listen(1024)
        except OSError as exc:
            sock.close()
            raise MetadataConfigError(f"cannot listen on unix:{path} for metadata: {exc.strerror}") from None
        return sock
    family = socket.AF_INET6 if ":" in (listen.host or "") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Several stateless `cloudnet serve` processes on one host may share the address (the kernel spreads
        # connections over them); tokens and views need no shared memory, so any of them can answer.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((listen.host, listen.port))
        sock.listen(1024)
    except OSError as exc:
        sock.close()
        raise MetadataConfigError(f"cannot listen on {listen} for metadata: {exc.strerror}") from None
    return sock


def load_vendor_data(path: Path | None) -> dict[str, Any]:
    """The StaticJSON vendor data (nova's vendordata_jsonfile_path): a JSON object, `{}` without a file."""
    if path is None:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise MetadataConfigError(f"cannot read vendor data {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise MetadataConfigError(f"vendor data {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise MetadataConfigError(f"vendor data {path} must hold a JSON object, not {type(data).__name__}")
    return data


def settings(config: ServerConfig) -> Settings:
    """The service-wide answers (vendor data read now): the metadata API's, and the API's for config drives."""
    return Settings(
        dhcp_domain=config.metadata_domain, availability_zone=config.availability_zone,
        vendor_data=load_vendor_data(config.metadata_vendor_data),
    )  # fmt: skip
