"""Authentication and project isolation: open mode, the tokens file, and the start-up bind check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudnet.config import ServerConfig
from cloudnet.server import StartupError, prepare
from tests.support.api import create, error
from tests.support.server import RunningServer


def client(server: RunningServer, token: str | None) -> httpx.Client:
    headers = {"X-Auth-Token": token} if token is not None else {}
    return httpx.Client(base_url=server.url + "/v2.0", headers=headers, timeout=30)


# -- open mode (no tokens file) -----------------------------------------------------------------


def test_without_tokens_file_every_token_is_admin(server: RunningServer) -> None:
    for token in ("anything", "notused", None):
        with client(server, token) as c:
            r = c.get("/networks")
            assert r.status_code == 200, (token, r.text)
            # admin powers: create in another project, read the revision log
            net = create(c, "networks", "network", name=f"n-{token}", project_id="someone")
            assert net["project_id"] == "someone"
            assert c.get("/events").status_code == 200
    with client(server, "x") as c:
        assert len(c.get("/networks").json()["networks"]) == 3
        # the acting project comes from X-Project-Id, "admin" otherwise
        assert create(c, "routers", "router")["project_id"] == "admin"
        r = c.post("/routers", json={"router": {}}, headers={"X-Project-Id": "demo"})
        assert r.status_code == 201
        assert r.json()["router"]["project_id"] == "demo"


# -- with a tokens file ---------------------------------------------------------------------------


def test_missing_or_unknown_token_is_401(server: RunningServer, tokens: dict[str, Any]) -> None:
    for token in (None, "", "nope", "ALICE-TOKEN"):
        with client(server, token) as c:
            for method, path in (
                ("GET", "/networks"),
                ("POST", "/networks"),
                ("GET", "/ports/8d3c1b7a-0e2f-4a6b-9c5d-1e2f3a4b5c6d"),
                ("DELETE", "/routers/8d3c1b7a-0e2f-4a6b-9c5d-1e2f3a4b5c6d"),
                ("GET", "/security-groups"),
                ("GET", "/networks/8d3c1b7a-0e2f-4a6b-9c5d-1e2f3a4b5c6d/tags"),
                ("GET", "/events"),
                ("GET", "/extensions"),
                ("GET", "/extensions/router"),
            ):
                r = c.request(method, path, json={"network": {"name": "x"}} if method == "POST" else None)
                error(r, 401, "HTTPUnauthorized")
    with client(server, "admin-token") as admin:
        assert admin.get("/networks").json()["networks"] == []
        assert admin.get("/security-groups").json()["security_groups"][0]["project_id"] == "ops"
    # the version documents stay public (keystoneauth discovers versions before authenticating)
    assert httpx.get(server.url + "/").status_code == 200
    assert httpx.get(server.url + "/v2.0").json()["version"]["id"] == "v2.0"


def test_a_token_added_to_the_file_works_at_once(
    server: RunningServer, server_config: ServerConfig, tokens: dict[str, Any]
) -> None:
    """`cloudnet token create` and then its first use (a runtime's plugin, the README's podman blocks) meet no
    401 while the periodic reload is still a second away."""
    with client(server, "admin-token") as admin:  # the file is loaded, and was just checked
        assert admin.get("/networks").status_code == 200
    data = {**tokens, "carol-token": {"project_id": "carol", "admin": False}}
    server_config.tokens_file.write_text(json.dumps({"tokens": data}))
    with client(server, "carol-token") as carol:
        assert carol.get("/networks").status_code == 200


def test_projects_see_only_their_own(users: dict[str, httpx.Client]) -> None:
    alice, bob, admin = users["alice"], users["bob"], users["admin"]
    a_net = create(alice, "networks", "network", name="a-net")
    a_sub = create(alice, "subnets", "subnet", network_id=a_net["id"], cidr="10.1.0.0/24")
    a_port = create(alice, "ports", "port", network_id=a_net["id"])
    a_router = create(alice, "routers", "router", name="a-router")
    b_net = create(bob, "networks", "network", name="b-net")
    b_sub = create(bob, "subnets", "subnet", network_id=b_net["id"], cidr="10.2.0.0/24")
    b_net = bob.get(f"/networks/{b_net['id']}").json()["network"]
    b_port = create(bob, "ports", "port", network_id=b_net["id"])
    b_router = create(bob, "routers", "router", name="b-router")
    shared = create(admin, "networks", "network", name="shared", shared=True)
    shared_sub = create(admin, "subnets", "subnet", network_id=shared["id"], cidr="10.3.0.0/24")
    public = create(admin, "networks", "network", name="public", **{"router:external": True})
    private = create(admin, "networks", "network", name="ops-private")

    assert a_net["project_id"] == "alice"
    assert b_router["project_id"] == "bob"

    def names(c: httpx.Client, collection: str) -> list[str]:
        r = c.get(f"/{collection}", params={"sort_key": "name"})
        assert r.status_code == 200, r.text
        return [x["name"] for x in r.json()[collection.replace("-", "_")]]

    assert names(alice, "networks") == ["a-net", "public", "shared"]
    assert names(bob, "networks") == ["b-net", "public", "shared"]
    assert names(admin, "networks") == ["a-net", "b-net", "ops-private", "public", "shared"]
    assert {s["id"] for s in alice.get("/subnets").json()["subnets"]} == {a_sub["id"], shared_sub["id"]}
    assert [p["id"] for p in alice.get("/ports").json()["ports"]] == [a_port["id"]]
    assert names(alice, "routers") == ["a-router"]
    assert names(admin, "routers") == ["a-router", "b-router"]
    assert {p["id"] for p in admin.get("/ports").json()["ports"]} == {a_port["id"], b_port["id"]}

    # bob's things do not exist for alice, whatever she tries
    for path, kind in (
        (f"/networks/{b_net['id']}", "NetworkNotFound"),
        (f"/subnets/{b_sub['id']}", "SubnetNotFound"),
        (f"/ports/{b_port['id']}", "PortNotFound"),
        (f"/routers/{b_router['id']}", "RouterNotFound"),
        (f"/networks/{private['id']}", "NetworkNotFound"),
    ):
        error(alice.get(path), 404, kind)
        member = path.split("/")[1][:-1]
        error(alice.put(path, json={member: {"name": "mine now"}}), 404, kind)
        error(alice.delete(path), 404, kind)
    assert alice.get(f"/networks/{shared['id']}").status_code == 200
    assert alice.get(f"/networks/{public['id']}").status_code == 200
    # filters cannot reach across projects either
    assert alice.get("/networks", params={"id": b_net["id"]}).json()["networks"] == []
    assert alice.get("/ports", params={"network_id": b_net["id"]}).json()["ports"] == []
    # nothing was changed by those attempts
    assert bob.get(f"/networks/{b_net['id']}").json()["network"] == b_net
    assert bob.get(f"/routers/{b_router['id']}").json()["router"]["name"] == "b-router"

    # alice cannot attach bob's things to her router, nor put ports on his network
    r = alice.put(f"/routers/{a_router['id']}/add_router_interface", json={"subnet_id": b_sub["id"]})
    error(r, 404, "SubnetNotFound")
    error(alice.post("/ports", json={"port": {"network_id": b_net["id"]}}), 404, "NetworkNotFound")
    error(alice.post("/subnets", json={"subnet": {"network_id": b_net["id"], "cidr": "10.9.0.0/24"}}), 404)
    # a port on the shared network is hers
    on_shared = create(alice, "ports", "port", network_id=shared["id"])
    assert on_shared["project_id"] == "alice"
    error(bob.get(f"/ports/{on_shared['id']}"), 404, "PortNotFound")


def test_non_admin_cannot_act_for_another_project(users: dict[str, httpx.Client]) -> None:
    alice, admin = users["alice"], users["admin"]
    for collection, member, body in (
        ("networks", "network", {"name": "x", "project_id": "bob"}),
        ("networks", "network", {"name": "x", "tenant_id": "bob"}),
        ("routers", "router", {"name": "x", "project_id": "bob"}),
        ("security-groups", "security_group", {"name": "x", "project_id": "bob"}),
    ):
        error(alice.post(f"/{collection}", json={member: body}), 403, "PolicyNotAuthorized")
    # naming her own project is fine
    assert create(alice, "networks", "network", name="own", project_id="alice")["project_id"] == "alice"
    # admin-only attributes
    error(alice.post("/networks", json={"network": {"name": "s", "shared": True}}), 403)
    error(alice.post("/networks", json={"network": {"name": "e", "router:external": True}}), 403)
    error(alice.get("/events", params={"project_id": "bob"}), 403, "PolicyNotAuthorized")  # (her own she may follow)
    # nothing was created for bob, and the admin may do it
    assert admin.get("/networks", params={"project_id": "bob"}).json()["networks"] == []
    assert create(admin, "networks", "network", name="for-bob", project_id="bob")["project_id"] == "bob"
    assert [n["name"] for n in users["bob"].get("/networks").json()["networks"]] == ["for-bob"]


# -- start-up -------------------------------------------------------------------------------------


def test_non_loopback_bind_needs_a_tokens_file(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with pytest.raises(StartupError, match="tokens"):
        prepare(ServerConfig(host="0.0.0.0", state_dir=state))
    config = ServerConfig(host="0.0.0.0", state_dir=state)
    config.tokens_file.write_text(json.dumps({"tokens": {"t": {"project_id": "p", "admin": True}}}))
    store, auth = prepare(config)
    try:
        assert not auth.open_mode
        assert auth.authenticate("t", None).is_admin
        assert store.current_revision() == 0
    finally:
        store.dispose()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
def test_loopback_bind_may_run_open(tmp_path: Path, host: str) -> None:
    store, auth = prepare(ServerConfig(host=host, state_dir=tmp_path / "state"))
    try:
        assert auth.open_mode
        assert auth.authenticate(None, None).is_admin
    finally:
        store.dispose()
