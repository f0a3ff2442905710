"""`cloudnet serve`/`up` options of the API's TLS and the cloud's CA."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cloudnet.cli.errors import CliError
from cloudnet.config import ServerConfig

Tls = Annotated[
    bool,
    typer.Option("--tls/--no-tls", help="Serve the API over HTTPS with a certificate the cloud's CA signs at start "
                 "(client certificates verified against the CA; hosts join with `cloudnet host join-token`)."),
]  # fmt: skip
TlsCert = Annotated[Path | None, typer.Option(metavar="FILE", help="The API's certificate (PEM) instead of one made "
                                              "at start (implies --tls; with --tls-key).")]  # fmt: skip
TlsKey = Annotated[Path | None, typer.Option(metavar="FILE", help="The key of --tls-cert (PEM).")]
TlsSan = Annotated[
    list[str] | None,
    typer.Option(metavar="NAME|IP", help="A name or address the API answers to, beside the bound address, this "
                 "host's name and loopback (repeatable): the certificate made at start names it."),
]  # fmt: skip
CaCert = Annotated[Path | None, typer.Option(metavar="FILE", help="The cloud's CA certificate (default: "
                                             "<state-dir>/pki/ca.crt, made at first start).")]  # fmt: skip
CaKey = Annotated[Path | None, typer.Option(metavar="FILE", help="The key of --ca-cert (PEM, ECDSA P-256).")]


def apply_tls(config: ServerConfig, tls: bool, cert: Path | None, key: Path | None, sans: list[str] | None,
              ca_cert: Path | None, ca_key: Path | None) -> ServerConfig:  # fmt: skip
    if (cert is None) != (key is None):
        raise CliError("--tls-cert and --tls-key go together")
    if (ca_cert is None) != (ca_key is None):
        raise CliError("--ca-cert and --ca-key go together")
    config.tls = tls or cert is not None
    config.tls_cert, config.tls_key, config.tls_sans = cert, key, list(sans or [])
    config.ca_cert, config.ca_key = ca_cert, ca_key
    return config
