"""The cloud's CA as a server's configuration names it: --ca-cert/--ca-key, else <state>/pki/ca.{crt,key} (made at
first start)."""

from __future__ import annotations

from pathlib import Path

from cloudnet.config import ServerConfig
from cloudnet.pki import x509


def ca_file(config: ServerConfig) -> Path:
    return config.ca_cert or config.pki_dir / "ca.crt"


def authority(config: ServerConfig) -> x509.Authority:
    if (config.ca_cert is None) != (config.ca_key is None):
        raise x509.PkiError("--ca-cert and --ca-key go together")
    if config.ca_cert is not None and config.ca_key is not None:
        return x509.load_authority(config.ca_cert, config.ca_key)
    return x509.load_or_create_authority(config.pki_dir / "ca.crt", config.pki_dir / "ca.key")
