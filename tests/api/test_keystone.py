"""The Keystone v3 face against a real `cloudnet serve`: password and token logins, scoping, validation, the
hostile cases, and clouds.yaml with `auth_type: password` for the real `openstack` CLI and openstacksdk."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openstack
import pytest
import yaml

from tests.support.process import CLOUDNET, serve

PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw", "root": "root-pw", "eve": "eve-pw"}


def _cli(state: Path, *args: str, stdin: str = "") -> str:
    done = subprocess.run([CLOUDNET, *args, "--state-dir", str(state)], input=stdin, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, str]]:
    """(URL, state dir, an admin static token) of a server whose users were made by `cloudnet user set`."""
    state = tmp_path_factory.mktemp("keystone")
    _cli(state, "user", "set", "alice", "--project", "alice", "--project", "shared", "--password-stdin",
         stdin="alice-pw\n")  # fmt: skip
    _cli(state, "user", "set", "bob", "--project", "bob", "--password-stdin", stdin="bob-pw\n")
    _cli(state, "user", "set", "root", "--project", "ops", "--role", "admin", "--password-stdin", stdin="root-pw\n")
    _cli(state, "user", "set", "eve", "--project", "eve", "--password-stdin", stdin="eve-pw\n")
    admin = _cli(state, "token", "create", "--project", "ops", "--role", "admin")
    assert "alice-pw" not in (state / "tokens.json").read_text()
    assert (state / "tokens.json").stat().st_mode & 0o077 == 0
    with serve(state, "--metadata-listen", "off", "--pool-min", "0") as (_proc, url):
        yield url, state, admin


def _login(url: str, user: str, password: str | None = None, **scope: Any) -> httpx.Response:
    auth: dict[str, Any] = {"identity": {"methods": ["password"], "password": {"user": {
        "name": user, "domain": {"id": "default"}, "password": password or PASSWORDS[user]}}}}  # fmt: skip
    if scope:
        auth["scope"] = scope
    return httpx.post(url + "/v3/auth/tokens", json={"auth": auth}, timeout=30)


def _project(name: str) -> dict[str, Any]:
    return {"project": {"name": name, "domain": {"name": "Default"}}}


def test_password_login_gives_a_scoped_token_with_a_catalog(cloud: tuple[str, Path, str]) -> None:
    url, _state, _admin = cloud
    r = _login(url, "alice", **_project("shared"))
    assert r.status_code == 201, r.text
    token, body = r.headers["X-Subject-Token"], r.json()["token"]
    assert body["project"]["id"] == "shared" and body["user"]["name"] == "alice"
    assert {role["name"] for role in body["roles"]} == {"member", "reader"}
    network = next(s for s in body["catalog"] if s["type"] == "network")
    assert {e["interface"]: e["url"] for e in network["endpoints"]} == dict.fromkeys(("public", "internal", "admin"),
                                                                                     url)  # fmt: skip
    # the Neutron API takes it, as a member of that project
    net = httpx.post(url + "/v2.0/networks", json={"network": {"name": "n"}}, headers={"X-Auth-Token": token})
    assert net.status_code == 201 and net.json()["network"]["project_id"] == "shared"
    other = httpx.post(url + "/v2.0/networks", json={"network": {"name": "x", "project_id": "bob"}},
                       headers={"X-Auth-Token": token})  # fmt: skip
    assert other.status_code in (400, 403)
    # token method: rescoped to another of alice's projects, never to one of bob's
    rescope = {"identity": {"methods": ["token"], "token": {"id": token}}}
    r = httpx.post(url + "/v3/auth/tokens", json={"auth": {**rescope, "scope": _project("alice")}})
    assert r.status_code == 201 and r.json()["token"]["project"]["id"] == "alice"
    assert r.json()["token"]["expires_at"] <= body["expires_at"]
    r = httpx.post(url + "/v3/auth/tokens", json={"auth": {**rescope, "scope": _project("bob")}})
    assert r.status_code == 401


def test_hostile_logins_are_401_with_nothing_told(cloud: tuple[str, Path, str]) -> None:
    url, _state, _admin = cloud
    refused = [_login(url, "bob", "alice-pw"), _login(url, "nobody", "x"), _login(url, "alice", **_project("bob")),
               _login(url, "alice", **_project("no-such-project"))]  # fmt: skip
    for r in refused:
        assert r.status_code == 401 and "X-Subject-Token" not in r.headers
        assert r.json()["error"]["message"] == "The request you have made requires authentication."
    assert httpx.get(url + "/v2.0/networks", headers={"X-Auth-Token": "cnk1.forged.mac"}).status_code == 401
    big = httpx.post(url + "/v3/auth/tokens", content=b'{"auth": "' + b"x" * 20000 + b'"}')
    assert big.status_code == 400 and "too large" in big.json()["error"]["message"]
    assert httpx.post(url + "/v3/auth/tokens", content=b"{not json").status_code == 400
    # malformed shapes are refused in Keystone's body, never a 500 (schemathesis found methods: [{}])
    for identity in ({"methods": [{}]}, {"methods": [["password"]]}, {"methods": "password"}, {"methods": []}):
        r = httpx.post(url + "/v3/auth/tokens", json={"auth": {"identity": identity}})
        assert r.status_code in (400, 401) and r.json()["error"]["message"], (identity, r.text)


def test_failed_attempts_are_limited_per_user(cloud: tuple[str, Path, str]) -> None:
    url, _state, _admin = cloud
    statuses = [_login(url, "eve", f"guess-{i}").status_code for i in range(6)]
    assert statuses == [401] * 5 + [429]
    r = _login(url, "eve")  # even the right password waits: the limit is checked before the password
    assert r.status_code == 429 and int(r.headers["Retry-After"]) > 0
    assert _login(url, "alice").status_code == 201  # other users are not held back


def test_validation_and_my_projects(cloud: tuple[str, Path, str]) -> None:
    url, _state, admin = cloud
    alice = _login(url, "alice", **_project("alice")).headers["X-Subject-Token"]
    root = _login(url, "root").headers["X-Subject-Token"]  # scoped to its only project
    r = httpx.get(url + "/v3/auth/tokens", headers={"X-Auth-Token": alice, "X-Subject-Token": alice})
    assert r.status_code == 200 and r.json()["token"]["project"]["id"] == "alice"
    for caller in (root, admin):
        r = httpx.get(url + "/v3/auth/tokens", headers={"X-Auth-Token": caller, "X-Subject-Token": alice})
        assert r.status_code == 200 and r.json()["token"]["user"]["id"] == "alice"
    r = httpx.get(url + "/v3/auth/tokens", headers={"X-Auth-Token": alice, "X-Subject-Token": root})
    assert r.status_code == 403
    r = httpx.get(url + "/v3/auth/projects", headers={"X-Auth-Token": alice})
    assert [p["id"] for p in r.json()["projects"]] == ["alice", "shared"]
    r = httpx.get(url + "/v3/users/alice/projects", headers={"X-Auth-Token": alice})
    assert [p["id"] for p in r.json()["projects"]] == ["alice", "shared"]
    assert httpx.get(url + "/v3/users/root/projects", headers={"X-Auth-Token": alice}).status_code == 404
    assert httpx.get(url + "/v3/auth/projects", headers={"X-Auth-Token": "nope"}).status_code == 401
    for headers in ({}, {"X-Auth-Token": "nope"}):  # Keystone's face answers Keystone's 401
        r = httpx.get(url + "/v3/users/alice/projects", headers=headers)
        assert r.status_code == 401 and r.json()["error"]["code"] == 401 and "WWW-Authenticate" in r.headers


def test_a_deleted_user_s_tokens_stop_working(cloud: tuple[str, Path, str]) -> None:
    url, state, _admin = cloud
    _cli(state, "user", "set", "carol", "--project", "carol", "--password-stdin", stdin="carol-pw\n")
    token = None
    for _ in range(100):  # the server re-reads the file within a second
        r = _login(url, "carol", "carol-pw")
        if r.status_code == 201:
            token = r.headers["X-Subject-Token"]
            break
        httpx.get(url + "/", timeout=5)  # (a request's worth of wait, not a sleep)
    assert token is not None
    assert httpx.get(url + "/v2.0/networks", headers={"X-Auth-Token": token}).status_code == 200
    _cli(state, "user", "delete", "carol")
    statuses = []
    for _ in range(200):
        statuses.append(httpx.get(url + "/v2.0/networks", headers={"X-Auth-Token": token}).status_code)
        if statuses[-1] == 401:
            break
    assert statuses[-1] == 401


def _clouds(tmp_path: Path, url: str, user: str, project: str) -> Path:
    clouds = tmp_path / "clouds.yaml"
    clouds.write_text(yaml.safe_dump({"clouds": {"cloudnet": {"auth_type": "password", "region_name": "RegionOne",
        "auth": {"auth_url": url + "/v3", "username": user, "password": PASSWORDS[user], "project_name": project,
                 "user_domain_name": "Default", "project_domain_name": "Default"}}}}))  # fmt: skip
    return clouds


def test_openstack_cli_with_password_auth(cloud: tuple[str, Path, str], tmp_path: Path) -> None:
    url, _state, _admin = cloud
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env.update(OS_CLIENT_CONFIG_FILE=str(_clouds(tmp_path, url, "alice", "alice")), OS_CLOUD="cloudnet")
    exe = str(Path(sys.executable).parent / "openstack")

    def openstack_cli(*args: str) -> Any:
        done = subprocess.run([exe, *args, "-f", "json"], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        return yaml.safe_load(done.stdout)

    issued = openstack_cli("token", "issue")
    assert issued["project_id"] == "alice" and issued["user_id"] == "alice" and issued["id"].startswith("cnk1.")
    openstack_cli("network", "create", "cli-net")
    assert "cli-net" in [n["Name"] for n in openstack_cli("network", "list")]
    quota = {row["Resource"]: row["Limit"] for row in openstack_cli("quota", "show")}
    assert quota["networks"] == 100 and quota["ports"] == 500


def test_openstacksdk_with_password_auth(cloud: tuple[str, Path, str], tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    url, _state, _admin = cloud
    for name in [k for k in os.environ if k.startswith("OS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(_clouds(tmp_path, url, "root", "ops")))
    conn = openstack.connect(cloud="cloudnet")
    net = conn.network.create_network(name="sdk-net")
    assert net.project_id == "ops" and conn.current_project_id == "ops"
    assert conn.network.get_quota("ops").networks == 100
    conn.network.delete_network(net)


def test_head_validates_without_a_body(cloud: tuple[str, Path, str]) -> None:
    url, _state, _admin = cloud
    alice = _login(url, "alice", **_project("alice")).headers["X-Subject-Token"]
    r = httpx.head(url + "/v3/auth/tokens", headers={"X-Auth-Token": alice, "X-Subject-Token": alice})
    assert r.status_code == 200 and r.headers["X-Subject-Token"] == alice and r.content == b""
    r = httpx.head(url + "/v3/auth/tokens", headers={"X-Auth-Token": alice, "X-Subject-Token": "cnk1.x.y"})
    assert r.status_code == 403
