"""The metadata API over real HTTP, on SQLite and PostgreSQL: the proxy contract (400/403/404), both trees
as a guest reads them, the cache following changes, and the guest's one write (its password)."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import httpx
import pytest

from cloudnet.store import tables as t
from cloudnet.store.db import Store
from cloudnet.wire import signing
from tests.metadata.conftest import KEYS, SECRET, USER_DATA, VENDOR, create
from tests.support.metadata import Guest, RunningMetadata, identity

EC2_VERSIONS = (
    "1.0\n2007-01-19\n2007-03-01\n2007-08-29\n2007-10-10\n2007-12-15\n2008-02-01\n2008-09-01\n2009-04-04\nlatest"
)


def wait_until(check: Any, timeout: float = 5) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


# -- the proxy contract -------------------------------------------------------------------------------


def test_root_answers_the_ec2_versions_before_any_identity_check(md: httpx.Client) -> None:
    for path in ("/", "//", "/ec2/..", "/openstack/.."):
        r = md.get(path)
        assert r.status_code == 200 and r.text == EC2_VERSIONS, path
        assert r.headers["content-type"].startswith("text/plain")


@pytest.mark.parametrize(
    ("missing", "message"),
    [
        ("X-Instance-ID", "X-Instance-ID header is missing from request."),
        ("X-Instance-ID-Signature", "X-Instance-ID-Signature header is missing from request."),
        ("X-Tenant-ID", "X-Tenant-ID header is missing from request."),
    ],
)
def test_a_missing_identity_header_is_a_400(
    md: httpx.Client, instance: dict[str, Any], missing: str, message: str
) -> None:
    headers = identity(SECRET, instance["id"], instance["project_id"])
    del headers[missing]
    r = md.get("/openstack/latest/meta_data.json", headers=headers)
    assert r.status_code == 400 and r.text == message


def test_a_wrong_signature_is_a_403(md: httpx.Client, instance: dict[str, Any]) -> None:
    good = identity(SECRET, instance["id"], instance["project_id"])
    other_id = "6b8f0c39-2f5e-4f3c-9d1e-0a6c1b2d3e4f"
    for signature in (
        "",  # an empty signature never validates
        signing.sign("another-secret", instance["id"]),
        signing.sign(SECRET, other_id),  # a valid signature, of another instance
        good["X-Instance-ID-Signature"].upper(),  # hex is compared exactly, as nova does
        good["X-Instance-ID-Signature"][:-1],
        ("é" * 64).encode(),  # not even ASCII
    ):
        r = md.get("/openstack/latest/meta_data.json", headers={**good, "X-Instance-ID-Signature": signature})
        assert r.status_code == 403 and r.text == "Invalid proxy request signature.", signature
    # A second X-Instance-ID cannot smuggle another identity past a signature of the first.
    r = md.get(
        "/openstack/latest/meta_data.json",
        headers=[*good.items(), ("X-Instance-ID", other_id)],
    )
    assert r.status_code == 403


def test_identified_heads_are_remembered_only_when_signed_and_small(
    md: httpx.Client, metadata: RunningMetadata[Any], instance: dict[str, Any]
) -> None:
    good = identity(SECRET, instance["id"], instance["project_id"])
    path = "/openstack/latest/meta_data.json"
    assert md.get(path, headers=good).status_code == 200
    assert md.get(path, headers=good).status_code == 200  # answered from the remembered identity
    remembered = len(metadata.app._identified)
    assert remembered >= 1
    # The same lines but for the signature: checked again, and a forgery is never remembered.
    forged = {**good, "X-Instance-ID-Signature": signing.sign("another-secret", instance["id"])}
    for _ in range(2):
        assert md.get(path, headers=forged).status_code == 403
    assert len(metadata.app._identified) == remembered
    # A long (guest-chosen) header: answered, not remembered.
    r = md.get(path, headers={**good, "User-Agent": "x" * 4096})
    assert r.status_code == 200
    assert len(metadata.app._identified) == remembered


def test_unknown_instance_or_other_project_is_a_404(md: httpx.Client, instance: dict[str, Any]) -> None:
    unknown = "6b8f0c39-2f5e-4f3c-9d1e-0a6c1b2d3e4f"
    r = md.get("/openstack/latest/meta_data.json", headers=identity(SECRET, unknown, instance["project_id"]))
    assert r.status_code == 404
    r = md.get("/openstack/latest/meta_data.json", headers=identity(SECRET, instance["id"], "another-project"))
    assert r.status_code == 404
    r = md.get("/openstack/latest/meta_data.json", headers=identity(SECRET, instance["id"], instance["project_id"]))
    assert r.status_code == 200


def test_only_get_and_head_on_the_trees(guest: Guest) -> None:
    r = guest.request("POST", "/openstack/latest/meta_data.json", content=b"{}")
    assert r.status_code == 405
    r = guest.request("DELETE", "/latest/meta-data/instance-id")
    assert r.status_code == 405
    head = guest.request("HEAD", "/latest/meta-data/instance-id")
    assert head.status_code == 200 and head.content == b""
    assert int(head.headers["content-length"]) == len(guest.get("/latest/meta-data/instance-id").content)


# -- OpenStack tree ----------------------------------------------------------------------------------


def test_openstack_versions_and_file_listings(guest: Guest) -> None:
    r = guest.get("/openstack")
    assert r.status_code == 200
    versions = r.text.split("\n")
    assert versions[-1] == "latest" and "2018-08-27" in versions and versions[0] == "2012-08-10"
    assert guest.get("/openstack/").text == r.text
    assert guest.get("/openstack/latest").text.split("\n") == [
        "meta_data.json", "user_data", "password", "vendor_data.json", "network_data.json", "vendor_data2.json",
    ]  # fmt: skip
    assert guest.get("/openstack/2012-08-10/").text.split("\n") == ["meta_data.json", "user_data"]
    for missing in ("/openstack/2011-01-01", "/openstack/2011-01-01/meta_data.json", "/openstack/latest/nope",
                    "/openstack/content/0000", "/openstack/latest/meta_data.json/uuid",
                    "/openstack/2013-04-04/network_data.json", "/openstack/2015-10-15/vendor_data2.json"):  # fmt: skip
        assert guest.get(missing).status_code == 404, missing


def test_meta_data_json(guest: Guest, instance: dict[str, Any]) -> None:
    r = guest.get("/openstack/latest/meta_data.json")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    md = r.json()
    assert md["uuid"] == instance["id"]
    assert md["name"] == "vm1" and md["hostname"] == "vm1.novalocal"
    assert md["project_id"] == instance["project_id"]
    assert md["availability_zone"] == "nova" and md["launch_index"] == 0
    assert md["meta"] == {"role": "web"}
    assert md["public_keys"] == {k["name"]: k["key"] for k in KEYS}
    assert md["keys"] == [{"name": k["name"], "type": "ssh", "data": k["key"]} for k in KEYS]
    assert len(base64.b64decode(md["random_seed"])) == 512
    assert guest.get("/openstack/latest/meta_data.json").json()["random_seed"] != md["random_seed"]
    old = guest.get("/openstack/2012-08-10/meta_data.json").json()
    assert "random_seed" not in old and "project_id" not in old and old["uuid"] == instance["id"]


def test_user_data_vendor_data_and_password_get(guest: Guest) -> None:
    assert guest.get("/openstack/latest/user_data").content == USER_DATA.encode()
    r = guest.get("/openstack/2018-08-27/vendor_data.json")
    assert r.headers["content-type"] == "application/json" and r.json() == VENDOR
    assert guest.get("/openstack/latest/vendor_data2.json").json() == {"static": VENDOR}
    r = guest.get("/openstack/latest/password")
    assert r.status_code == 200 and r.content == b""


def test_network_data_from_ports_and_subnets(
    api: httpx.Client, guest: Guest, instance: dict[str, Any], network: Any
) -> None:
    net, sub = network
    (metadata_port,) = api.get(
        "/ports", params={"network_id": net["id"], "device_owner": "network:distributed"}
    ).json()["ports"]
    hop = metadata_port["fixed_ips"][0]["ip_address"]
    r = guest.get("/openstack/latest/network_data.json")
    assert r.status_code == 200
    nd = r.json()
    port = instance["nets"][0]
    assert nd["links"] == [{"id": f"tap{port['port_id'][:11]}", "vif_id": port["port_id"], "type": "phy",
                            "mtu": 1450, "ethernet_mac_address": port["mac_address"]}]  # fmt: skip
    assert nd["networks"] == [
        {
            "id": "network0", "type": "ipv4", "link": f"tap{port['port_id'][:11]}", "ip_address": "10.70.0.10",
            "netmask": "255.255.255.0", "network_id": net["id"],
            "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": sub["gateway_ip"]},
                       {"network": "172.16.0.0", "netmask": "255.255.0.0", "gateway": "10.70.0.254"},
                       # to the metadata namespace, as the dataplane routes it
                       {"network": "169.254.169.254", "netmask": "255.255.255.255", "gateway": hop}],
            "services": [{"type": "dns", "address": "10.70.0.53"}],
        }
    ]  # fmt: skip
    assert nd["services"] == [{"type": "dns", "address": "10.70.0.53"}]


def test_instance_without_user_data_or_keys(api: httpx.Client, md: httpx.Client, host: str) -> None:
    bare = create(api, "instances", "instance", name="bare", netns="ns-bare", host=host)
    guest = Guest(md, SECRET, bare)
    assert guest.get("/openstack/latest/user_data").status_code == 404
    assert "user_data" not in guest.get("/openstack/latest").text.split("\n")
    md_json = guest.get("/openstack/latest/meta_data.json").json()
    assert "public_keys" not in md_json and "keys" not in md_json and "meta" not in md_json
    assert guest.get("/openstack/latest/network_data.json").json() == {"links": [], "networks": [], "services": []}
    assert guest.get("/latest").text == "meta-data/"
    assert guest.get("/latest/user-data").status_code == 404
    assert "public-keys/" not in guest.get("/latest/meta-data/").text.split("\n")
    # No fixed IPv4: local-ipv4 is the address the request came from, as nova answers.
    assert guest.get("/latest/meta-data/local-ipv4").text == "10.0.0.5"


# -- EC2 tree ----------------------------------------------------------------------------------------


def test_ec2_meta_data_listing_and_leaves(guest: Guest, instance: dict[str, Any]) -> None:
    listing = guest.get("/latest/meta-data/")
    assert listing.status_code == 200
    assert listing.text.split("\n") == [
        "ami-id", "ami-launch-index", "ami-manifest-path", "block-device-mapping/", "hostname", "instance-action",
        "instance-id", "instance-type", "local-hostname", "local-ipv4", "placement/", "public-hostname",
        "public-ipv4", "public-keys/", "reservation-id", "security-groups",
    ]  # fmt: skip
    assert guest.get("/latest/meta-data").text == listing.text  # normalised like nova
    assert guest.get("/ec2/latest/meta-data/").text == listing.text
    # Every listed child answers 200, or cloud-init's EC2 crawl fails as a whole.
    for key in listing.text.split("\n"):
        assert guest.get(f"/latest/meta-data/{key}").status_code == 200, key
    leaves = {k: guest.get(f"/2009-04-04/meta-data/{k}").text for k in (
        "instance-id", "hostname", "local-hostname", "local-ipv4", "public-ipv4", "security-groups",
        "placement/availability-zone", "block-device-mapping/", "block-device-mapping/root", "instance-action",
    )}  # fmt: skip
    assert leaves == {
        "instance-id": "i-" + instance["id"].replace("-", "")[:8], "hostname": "vm1.novalocal",
        "local-hostname": "vm1.novalocal", "local-ipv4": "10.70.0.10", "public-ipv4": "",
        "security-groups": "default", "placement/availability-zone": "nova",
        "block-device-mapping/": "ami\nroot", "block-device-mapping/root": "/dev/vda", "instance-action": "none",
    }  # fmt: skip


def test_ec2_public_keys_and_user_data(guest: Guest) -> None:
    assert guest.get("/latest/meta-data/public-keys/").text == "0=k1\n1=k2"
    assert guest.get("/latest/meta-data/public-keys/0/").text == "openssh-key"
    assert guest.get("/latest/meta-data/public-keys/1/openssh-key").text == KEYS[1]["key"]
    assert guest.get("/latest/meta-data/public-keys/2").status_code == 404
    assert guest.get("/latest").text == "meta-data/\nuser-data"
    r = guest.get("/2009-04-04/user-data")
    assert r.status_code == 200 and r.content == USER_DATA.encode()


def test_ec2_versions_and_404_rules(guest: Guest) -> None:
    assert guest.get("/1.0/meta-data/instance-id").status_code == 200
    old = guest.get("/1.0/meta-data/").text.split("\n")
    assert "placement/" not in old and "local-hostname" not in old and "instance-type" not in old
    for missing in ("/2016-09-02/meta-data/instance-id", "/2021-03-23/meta-data/instance-id", "/latest/nope",
                    "/latest/meta-data/nope", "/latest/meta-data/instance-id/more", "/latest/user-data/x",
                    "/latest/meta-data/public-keys/0/_name", "/latest/api/token"):  # fmt: skip
        assert guest.get(missing).status_code == 404, missing


def test_public_ipv4_from_a_forward_to_the_instance(guest: Guest, store: Store, instance: dict[str, Any]) -> None:
    assert guest.get("/latest/meta-data/public-ipv4").text == ""
    with store.write() as tx:  # as the forwards service will write one (with its event)
        tx.conn.execute(
            t.forwards.insert().values(
                id="f0000000-0000-4000-8000-000000000001", network_id=instance["nets"][0]["network_id"],
                listen_address="192.0.2.40", description="", config={"target_address": "10.70.0.10"}, ports=[],
                project_id=instance["project_id"], created_at=tx.now, updated_at=tx.now, revision_number=0,
            )
        )  # fmt: skip
        tx.record("forward", "f0000000-0000-4000-8000-000000000001", "create", instance["project_id"])
    assert guest.get("/latest/meta-data/public-ipv4").text == "192.0.2.40"


# -- the cache follows changes ---------------------------------------------------------------------


def test_views_follow_api_changes(api: httpx.Client, guest: Guest, instance: dict[str, Any]) -> None:
    assert guest.get("/openstack/latest/user_data").content == USER_DATA.encode()
    assert guest.get("/openstack/latest/meta_data.json").json()["meta"] == {"role": "web"}
    r = api.put(f"/instances/{instance['id']}", json={"instance": {"user_data": "#!/bin/sh\necho new\n",
                                                                    "metadata": {"role": "db"}}})  # fmt: skip
    assert r.status_code == 200, r.text
    assert guest.get("/openstack/latest/user_data").content == b"#!/bin/sh\necho new\n"
    assert guest.get("/latest/user-data").content == b"#!/bin/sh\necho new\n"
    assert guest.get("/openstack/latest/meta_data.json").json()["meta"] == {"role": "db"}
    sub_id = instance["nets"][0]["fixed_ips"][0]["subnet_id"]
    r = api.put(f"/subnets/{sub_id}", json={"subnet": {"dns_nameservers": ["10.70.0.54"]}})
    assert r.status_code == 200, r.text
    assert guest.get("/openstack/latest/network_data.json").json()["services"] == [
        {"type": "dns", "address": "10.70.0.54"}
    ]
    assert api.delete(f"/instances/{instance['id']}").status_code == 204
    assert guest.get("/openstack/latest/meta_data.json").status_code == 404


def test_views_follow_commits_of_other_processes(
    guest: Guest, instance: dict[str, Any], db_url: str, metadata: RunningMetadata
) -> None:
    assert guest.get("/openstack/latest/user_data").content == USER_DATA.encode()
    assert instance["id"] in metadata.app.views.cached()
    other = Store(db_url)  # another server: its commits never call this process's listeners
    try:
        with other.write() as tx:
            tx.conn.execute(t.instances.update().where(t.instances.c.id == instance["id"]).values(user_data="other"))
            tx.record("instance", instance["id"], "update", instance["project_id"])
    finally:
        other.dispose()
    wait_until(lambda: guest.get("/openstack/latest/user_data").content == b"other")


# -- password ----------------------------------------------------------------------------------------


def test_password_is_stored_once(guest: Guest, api: httpx.Client, instance: dict[str, Any]) -> None:
    assert guest.request("POST", "/openstack/2013-04-04/password", content=b"x" * 1021).status_code == 400
    assert guest.request("PUT", "/openstack/latest/password", content=b"x").status_code == 400
    assert guest.request("PUT", "/openstack/latest/password").text == "GET and POST only are supported."
    assert guest.request("POST", "/openstack/2012-08-10/password", content=b"x").status_code == 404
    encrypted = base64.b64encode(b"\x01" * 512)[:1020]
    r = guest.request("POST", "/openstack/latest/password", content=encrypted)
    assert r.status_code == 200, r.text
    assert guest.get("/openstack/latest/password").content == encrypted
    assert guest.get("/openstack/2013-04-04/password/").content == encrypted
    r = guest.request("POST", "/openstack/latest/password", content=b"again")
    assert r.status_code == 409
    assert guest.get("/openstack/latest/password").content == encrypted


def test_password_body_may_come_in_chunks(guest: Guest) -> None:
    def chunks() -> Any:
        yield b"abc"
        yield b"def"

    r = guest.request("POST", "/openstack/latest/password", content=chunks())
    assert r.status_code == 200, r.text
    assert guest.get("/openstack/latest/password").text == "abcdef"


def test_two_instances_get_their_own_answers(api: httpx.Client, md: httpx.Client, host: str, network: Any) -> None:
    net, _sub = network
    a = create(api, "instances", "instance", name="a", netns="ns-a", host=host, nets=[{"network": net["id"]}])
    b = create(api, "instances", "instance", name="b", netns="ns-b", host=host, nets=[{"network": net["id"]}])
    for inst in (a, b):
        got = Guest(md, SECRET, inst).get("/openstack/latest/meta_data.json").json()
        assert got["uuid"] == inst["id"] and got["name"] == inst["name"]
        ip = Guest(md, SECRET, inst).get("/latest/meta-data/local-ipv4").text
        assert ip == inst["nets"][0]["fixed_ips"][0]["ip_address"]
    assert json.loads(Guest(md, SECRET, a).get("/openstack/latest/network_data.json").text)["networks"]


def test_availability_zone_is_the_instance_hosts(
    api: httpx.Client, md: httpx.Client, host: str, network: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    """Nova answers the instance's zone: the one its host's agent reports; a host reporting none, the setting's."""
    net, _sub = network
    zone = f"az-md-{uuid.uuid4().hex[:6]}"
    beat = api.put("/hosts/node-az", json={"host": {"agent_version": "test", "availability_zone": zone}})
    assert beat.status_code == 200, beat.text
    made = {name: create(api, "instances", "instance", name=name, hostname=name, netns=f"ns-{name}", host=host,
                         nets=[{"network": net["id"]}])
            for name, host in (("vm-az", "node-az"), ("vm-noaz", host))}  # fmt: skip
    for name, expected in (("vm-az", zone), ("vm-noaz", "nova")):
        guest = Guest(md, SECRET, made[name])
        assert guest.get("/openstack/latest/meta_data.json").json()["availability_zone"] == expected
        assert guest.get("/latest/meta-data/placement/availability-zone").text == expected
