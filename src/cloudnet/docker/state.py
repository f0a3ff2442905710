"""What the driver remembers between dockerd's calls: its pools, the cloudnet network behind each docker network,
the port (and instance) behind each endpoint. A JSON file, replaced whole on each change, so a restarted driver
serves the networks and endpoints dockerd still has."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Pool:
    space: str
    cidr: str
    subnet_id: str | None = None  # an existing cloudnet subnet named by --ipam-opt cloudnet.subnet


@dataclass
class Network:
    network_id: str  # cloudnet's
    created: bool  # made for this docker network (deleted with it), or an existing one (left alone)
    subnets: dict[str, str] = field(default_factory=dict)  # pool id (or "space/cidr") -> cloudnet subnet id


@dataclass
class Endpoint:
    network: str  # docker's network id
    port_id: str
    owned_port: bool  # made by CreateEndpoint (deleted with the endpoint), not by IPAM nor pre-created
    instance_id: str | None = None  # while joined
    device: str | None = None  # the device handed to dockerd
    sandbox: str | None = None  # dockerd's sandbox it joined (a container's other networks are other endpoints)


@dataclass
class State:
    path: Path | None
    pools: dict[str, Pool] = field(default_factory=dict)
    networks: dict[str, Network] = field(default_factory=dict)
    endpoints: dict[str, Endpoint] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path | None) -> State:
        state = cls(path)
        if path is None or not path.exists():
            return state
        data: dict[str, Any] = json.loads(path.read_text())
        state.pools = {k: Pool(**v) for k, v in data.get("pools", {}).items()}
        state.networks = {k: Network(**v) for k, v in data.get("networks", {}).items()}
        state.endpoints = {k: Endpoint(**v) for k, v in data.get("endpoints", {}).items()}
        return state

    def save(self) -> None:
        if self.path is None:
            return
        data = {"pools": {k: asdict(v) for k, v in self.pools.items()},
                "networks": {k: asdict(v) for k, v in self.networks.items()},
                "endpoints": {k: asdict(v) for k, v in self.endpoints.items()}}  # fmt: skip
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, self.path)
