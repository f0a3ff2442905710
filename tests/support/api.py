"""Small helpers the API tests share: create a resource, check a Neutron error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from cloudnet.config import ServerConfig

Json = dict[str, Any]


def create(api: httpx.Client, collection: str, member: str, **body: Any) -> Json:
    """POST one resource and return it (asserting 201)."""
    r = api.post(f"/{collection}", json={member: body})
    assert r.status_code == 201, r.text
    return dict(r.json()[member])


def error(r: httpx.Response, status: int, type_: str | None = None) -> str:
    """The response is a NeutronError with this status (and type); returns its message."""
    assert r.status_code == status, r.text
    err = r.json()["NeutronError"]
    if type_ is not None:
        assert err["type"] == type_, err
    assert err["message"]
    return str(err["message"])


def check_error(resp: httpx.Response, status: int, type_: str, *fragments: str) -> Json:
    """The response is a NeutronError with this status and type whose message contains every fragment."""
    assert resp.status_code == status, resp.text
    err = resp.json()["NeutronError"]
    assert err["type"] == type_, err
    for fragment in fragments:
        assert fragment in err["message"], (fragment, err["message"])
    return dict(err)


def create_network(client: httpx.Client, **attrs: Any) -> Json:
    return create(client, "networks", "network", **attrs)


def create_subnet(client: httpx.Client, network_id: str, cidr: str, **attrs: Any) -> Json:
    return create(client, "subnets", "subnet", network_id=network_id, cidr=cidr, **attrs)


def network_on_host(client: httpx.Client, host: str, name: str, cidr: str) -> Json:
    """A registered host (as its agent would register it) and a network with one subnet."""
    r = client.put(f"/hosts/{host}", json={"host": {"agent_version": "test"}})
    assert r.status_code == 200, r.text
    network = create_network(client, name=name)
    create_subnet(client, network["id"], cidr)
    return network


def pool_config(tmp_path: Path, **options: Any) -> ServerConfig:
    """A server with small pools whose maintenance does not run on its own during a test (update_interval
    3600); `options` override the rest."""
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    return ServerConfig(**{"state_dir": state, "pool_min": 2, "pool_batch": 4, "pool_update_interval": 3600,
                           **options})  # fmt: skip
