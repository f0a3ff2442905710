"""Two member projects beside the admin for RBAC's dataplane tests (Linux and OVN): the tokens file (the `admin`
token stays the agent's and the `api` fixture's), the members' clients, and the calls both tests make."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cloudnet.config import ServerConfig
from tests.support.server import RunningServer

TOKENS = {
    "admin": {"project_id": "ops", "role": "admin"},
    "alice-token": {"project_id": "alice", "role": "member"},
    "bob-token": {"project_id": "bob", "role": "member"},
}


@pytest.fixture
def tokens(server_config: ServerConfig) -> dict[str, Any]:
    server_config.tokens_file.write_text(json.dumps({"tokens": TOKENS}))
    return TOKENS


@pytest.fixture
def members(server: RunningServer, tokens: dict[str, Any]) -> Iterator[dict[str, httpx.Client]]:
    made = {who: httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": f"{who}-token"}, timeout=30)
            for who in ("alice", "bob")}  # fmt: skip
    yield made
    for client in made.values():
        client.close()


def made(r: httpx.Response, member: str) -> dict[str, Any]:
    assert r.status_code == 201, r.text
    return dict(r.json()[member])


def share_with_bob(client: httpx.Client, object_type: str, object_id: str) -> dict[str, Any]:
    body = {"object_type": object_type, "object_id": object_id, "action": "access_as_shared", "target_tenant": "bob"}
    return made(client.post("/rbac-policies", json={"rbac_policy": body}), "rbac_policy")


def peers_group(alice: httpx.Client) -> dict[str, Any]:
    """alice's group that lets in ICMP from its own members only."""
    group = made(alice.post("/security-groups", json={"security_group": {"name": "peers"}}), "security_group")
    rule = {"security_group_id": group["id"], "direction": "ingress", "ethertype": "IPv4", "protocol": "icmp",
            "remote_group_id": group["id"]}  # fmt: skip
    made(alice.post("/security-group-rules", json={"security_group_rule": rule}), "security_group_rule")
    return group
