"""/v2.0/instances/{id}/metadata[/{key}] (both database backends) and `cloudnet instance metadata ...`.

Where a key lands follows the SmartOS rules guests see over their metadata socket: `*_pw` keys and
`operator-script` go to internal metadata, `sdc:` and internal namespaces are read-only, and only an admin
writes internal metadata explicitly.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.cli import Cli
from tests.support.server import RunningServer

Json = dict[str, Any]
MISSING = "5f0e3f2c-0d7e-4c39-9a3e-2b8f8a0c9d11"


def error(r: httpx.Response, status: int, type_: str | None = None) -> str:
    assert r.status_code == status, r.text
    err = r.json()["NeutronError"]
    if type_ is not None:
        assert err["type"] == type_, err
    return str(err["message"])


def revision(r: httpx.Response) -> int:
    return int(r.headers["X-Cloudnet-Revision"])


def new_instance(c: httpx.Client, name: str = "vm", **body: Any) -> Json:
    c.put("/hosts/node-1", json={"host": {"agent_version": "test"}})  # admins only; a no-op for others
    r = c.post("/instances", json={"instance": {"name": name, **body}})  # (cloudnet makes its namespace)
    assert r.status_code == 201, r.text
    return dict(r.json()["instance"])


@pytest.fixture
def vm(api: httpx.Client) -> Json:
    return new_instance(api, metadata={"role": "web"})


def test_get_put_delete(api: httpx.Client, vm: Json) -> None:
    base = f"/instances/{vm['id']}/metadata"
    r = api.get(base)
    assert r.status_code == 200
    assert r.json() == {"metadata": {"role": "web"}, "internal_metadata": {}}
    start = revision(r)

    r = api.put(f"{base}/user-script", json={"value": "#!/bin/sh\necho hi\n"})
    assert r.status_code == 200, r.text
    assert r.json()["metadata"] == {"role": "web", "user-script": "#!/bin/sh\necho hi\n"}
    assert revision(r) > start
    # The instance's own `metadata` is the same map, and the change is an update event agents follow.
    inst = api.get(f"/instances/{vm['id']}").json()["instance"]
    assert inst["metadata"]["user-script"] == "#!/bin/sh\necho hi\n"
    assert inst["revision_number"] == vm["revision_number"] + 1
    events = api.get("/events", params={"since": start, "timeout": 0}).json()["events"]
    assert [(e["resource"], e["operation"]) for e in events] == [("instance", "update")]

    assert api.get(f"{base}/user-script").json() == {
        "metadata_item": {"key": "user-script", "value": "#!/bin/sh\necho hi\n"}
    }
    # Setting the same value again changes nothing.
    again = api.put(f"{base}/user-script", json={"value": "#!/bin/sh\necho hi\n"})
    assert revision(again) == revision(r)

    r = api.delete(f"{base}/role")
    assert r.status_code == 204 and revision(r) > revision(again)
    assert api.get(base).json()["metadata"] == {"user-script": "#!/bin/sh\necho hi\n"}
    error(api.delete(f"{base}/role"), 404, "MetadataItemNotFound")
    error(api.get(f"{base}/role"), 404, "MetadataItemNotFound")


def test_where_keys_land(api: httpx.Client, vm: Json) -> None:
    base = f"/instances/{vm['id']}/metadata"
    assert api.put(f"{base}/root_pw", json={"value": "s3cret"}).json()["internal_metadata"] == {"root_pw": "s3cret"}
    api.put(f"{base}/operator-script", json={"value": "#!/bin/sh\n"})
    body = api.get(base).json()
    assert body["metadata"] == {"role": "web"}
    assert body["internal_metadata"] == {"root_pw": "s3cret", "operator-script": "#!/bin/sh\n"}
    assert api.get(f"{base}/root_pw").json()["metadata_item"]["value"] == "s3cret"

    msg = error(api.put(f"{base}/sdc:uuid", json={"value": "x"}), 403, "MetadataKeyReadOnly")
    assert msg == 'Cannot update the "sdc" Namespace.'
    error(api.delete(f"{base}/sdc:uuid"), 403, "MetadataKeyReadOnly")

    # An admin puts a key in an internal namespace explicitly; from then on that namespace is read-only.
    r = api.put(f"{base}/docker:cmd", json={"value": "sleep 1", "internal": True})
    assert r.json()["internal_metadata"]["docker:cmd"] == "sleep 1"
    msg = error(api.put(f"{base}/docker:env", json={"value": "x"}), 403, "MetadataKeyReadOnly")
    assert msg == 'Cannot update the "docker" Namespace.'
    assert api.get(f"{base}/docker:cmd").json()["metadata_item"]["value"] == "sleep 1"
    error(api.delete(f"{base}/docker:cmd"), 403)
    assert api.delete(f"{base}/docker:cmd", params={"internal": "true"}).status_code == 204
    assert api.put(f"{base}/docker:env", json={"value": "x"}).json()["metadata"]["docker:env"] == "x"


@pytest.mark.parametrize("key", ["com.example:role", "a/b/c", "with space", "dots.", "..", ".", "ünï"])
def test_any_key_is_one_path_segment(api: httpx.Client, vm: Json, key: str) -> None:
    from urllib.parse import quote

    segment = quote(key, safe="")
    segment = segment.replace(".", "%2E") if segment in (".", "..") else segment
    path = f"/instances/{vm['id']}/metadata/{segment}"
    assert api.put(path, json={"value": "v"}).status_code == 200
    assert api.get(path).json()["metadata_item"] == {"key": key, "value": "v"}
    assert api.delete(path).status_code == 204


def test_bad_requests(api: httpx.Client, vm: Json) -> None:
    base = f"/instances/{vm['id']}/metadata"
    error(api.put(f"{base}/%20k", json={"value": "v"}), 400, "InvalidInput")
    error(api.put(f"{base}/a%07b", json={"value": "v"}), 400, "InvalidInput")
    error(api.put(f"{base}/a%00b", json={"value": "v"}), 400)
    error(api.put(f"{base}/", json={"value": "v"}), 400)
    error(api.put(f"{base}/k", json={}), 400)
    error(api.put(f"{base}/k", json={"value": 3}), 400)
    error(api.put(f"{base}/k", json={"value": "v", "extra": 1}), 400)
    error(api.put(f"{base}/k", json={"value": "x" * 65537}), 400)
    error(api.put(f"{base}/k", content=b"not json"), 400)
    error(api.put(f"{base}/k", json={"value": "a\x00b"}), 400)
    assert api.get(base).json()["metadata"] == {"role": "web"}
    error(api.get(f"/instances/{MISSING}/metadata"), 404, "InstanceNotFound")
    error(api.put(f"/instances/{MISSING}/metadata/k", json={"value": "v"}), 404, "InstanceNotFound")
    error(api.delete(f"/instances/{MISSING}/metadata/k"), 404, "InstanceNotFound")
    error(api.get("/instances/not-a-uuid/metadata"), 404)


def test_owner_and_other_projects(server: RunningServer, tokens: dict[str, Any]) -> None:
    def client(name: str) -> httpx.Client:
        return httpx.Client(base_url=server.url + "/v2.0", headers={"X-Auth-Token": f"{name}-token"}, timeout=30)

    admin, alice, bob = client("admin"), client("alice"), client("bob")
    try:
        admin.put("/hosts/node-1", json={"host": {"agent_version": "test"}})
        vm = new_instance(alice, metadata={"role": "web"})
        base = f"/instances/{vm['id']}/metadata"
        assert alice.put(f"{base}/k", json={"value": "v"}).status_code == 200
        assert alice.put(f"{base}/admin_pw", json={"value": "pw"}).status_code == 200
        error(alice.put(f"{base}/acme:k", json={"value": "v", "internal": True}), 403)
        assert admin.put(f"{base}/acme:k", json={"value": "v", "internal": True}).status_code == 200
        assert admin.put(f"{base}/operator-script", json={"value": "op", "internal": True}).status_code == 200
        # The owner sees the internal keys the guest can read, not the platform's others.
        assert alice.get(base).json() == {
            "metadata": {"role": "web", "k": "v"},
            "internal_metadata": {"admin_pw": "pw", "acme:k": "v"},
        }
        assert admin.get(base).json()["internal_metadata"] == {"admin_pw": "pw", "acme:k": "v", "operator-script": "op"}
        error(alice.put(f"{base}/acme:x", json={"value": "v"}), 403, "MetadataKeyReadOnly")
        for call in (bob.get(base), bob.put(f"{base}/k", json={"value": "x"}), bob.delete(f"{base}/k")):
            error(call, 404, "InstanceNotFound")
        assert alice.get(f"{base}/k").json()["metadata_item"]["value"] == "v"
    finally:
        for c in (admin, alice, bob):
            c.close()


# -- CLI ----------------------------------------------------------------------------------------


@pytest.fixture
def cli(server: RunningServer) -> Cli:
    return Cli(server.url)


def test_cli(cli: Cli, api: httpx.Client, vm: Json, tmp_path: Any) -> None:
    assert cli.json("instance", "metadata", "set", "vm", "user-script", "#!/bin/sh") == {
        "key": "user-script", "value": "#!/bin/sh", "store": "customer"}  # fmt: skip
    script = tmp_path / "v.txt"
    script.write_text("multi\nline\n")
    assert cli.json("instance", "metadata", "set", vm["id"], "root_pw", "--file", str(script)) == {
        "key": "root_pw", "value": "multi\nline\n", "store": "internal"}  # fmt: skip

    assert cli.json("instance", "metadata", "list", "vm") == [
        {"key": "role", "value": "web", "store": "customer"},
        {"key": "user-script", "value": "#!/bin/sh", "store": "customer"},
        {"key": "root_pw", "value": "multi\nline\n", "store": "internal"},
    ]
    assert cli.json("instance", "metadata", "get", "vm", "role") == {"key": "role", "value": "web"}
    out = cli.out("instance", "metadata", "list", "vm")
    assert "user-script" in out and "Store" in out

    assert "could not be found" in cli.fail("instance", "metadata", "get", "vm", "nope")
    assert 'Cannot update the "sdc" Namespace.' in cli.fail("instance", "metadata", "set", "vm", "sdc:uuid", "x")
    assert "either" in cli.fail("instance", "metadata", "set", "vm", "k")
    cli.ok("instance", "metadata", "set", "vm", "k", "v", "--internal")
    assert api.get(f"/instances/{vm['id']}/metadata").json()["internal_metadata"]["k"] == "v"

    cli.ok("instance", "metadata", "unset", "vm", "role", "user-script")
    cli.ok("instance", "metadata", "unset", "vm", "k", "--internal")
    partly = cli.run("instance", "metadata", "unset", "vm", "role", "root_pw")  # one line per miss, then the sum
    assert partly.exit_code == 1 and partly.stderr.splitlines()[-1] == "Error: Failed to remove 1 of 2 metadata keys"
    assert api.get(f"/instances/{vm['id']}/metadata").json() == {"metadata": {}, "internal_metadata": {}}
    assert "No instance found" in cli.fail("instance", "metadata", "list", "no-such-vm")
