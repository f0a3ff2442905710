"""The OpenStack and EC2 trees as pure functions of an instance view (no server, no database)."""

from __future__ import annotations

import base64
import json

import pytest

from cloudnet.metadata import trees
from cloudnet.metadata.model import InstanceView, Port, Settings, Subnet
from cloudnet.wire import metadata_paths

V4 = Subnet(
    "s4", "n1", "10.0.0.0/24", 4, "10.0.0.1", ("10.0.0.53", "9.9.9.9"), (("172.16.0.0/12", "10.0.0.254"),), "10.0.0.2"
)
V6 = Subnet("s6", "n1", "2001:db8::/64", 6, "2001:db8::1", ("2001:db8::53",))
OTHER = Subnet("s9", "n2", "192.168.5.0/24", 4, "192.168.5.1", ("9.9.9.9",), (), "192.168.5.2")
VIEW = InstanceView(
    id="0b1f7c2e-1111-4000-8000-000000000010",
    name="web",
    hostname="web",
    project_id="p1",
    user_data=b"#!/bin/sh\necho hi\n",
    meta={"role": "web"},
    ssh_keys=(("k1", "ssh-ed25519 AAAA1 one"),),
    ports=(
        Port(
            "a1b2c3d4-0000-4000-8000-00000000000a",
            "n1",
            "fa:16:3e:00:00:0a",
            1450,
            fixed_ips=(("10.0.0.10", "s4"), ("2001:db8::10", "s6")),
        ),
        Port(
            "b1b2c3d4-0000-4000-8000-00000000000b",
            "n2",
            "fa:16:3e:00:00:0b",
            1500,
            "direct",
            fixed_ips=(("192.168.5.7", "s9"),),
        ),
    ),
    subnets={"s4": V4, "s6": V6, "s9": OTHER},
    security_groups=("default", "web"),
    public_ipv4="192.0.2.10",
)
SETTINGS = Settings(vendor_data={"a": 1})


def get(path: str, view: InstanceView = VIEW, remote_ip: str | None = None, today: str = "2026-11-22") -> trees.Reply:
    return trees.render(view, SETTINGS, path, remote_ip=remote_ip, today=today)


def text(path: str, **kw: object) -> str:
    reply = get(path, **kw)  # type: ignore[arg-type]
    assert reply.status == 200, path
    return reply.body.decode()


@pytest.mark.parametrize(
    ("path", "parts"),
    [("/", ["ec2"]), ("", ["ec2"]), ("//", ["ec2"]), ("/openstack/", ["openstack"]), ("/latest", ["ec2", "latest"]),
     ("/openstack/latest/../2012-08-10/", ["openstack", "2012-08-10"]), ("/ec2/latest", ["ec2", "latest"]),
     ("/a/../..", ["ec2"]), ("/latest//meta-data///", ["ec2", "latest", "meta-data"])],
)  # fmt: skip
def test_paths_normalise_like_nova(path: str, parts: list[str]) -> None:
    assert metadata_paths.tokens(path) == tuple(parts)


def test_openstack_version_list_hides_future_versions() -> None:
    assert text("/openstack", today="2026-11-22").split("\n")[-2:] == ["2025-04-04", "latest"]
    hidden = text("/openstack", today="2019-01-01").split("\n")
    assert hidden[-2:] == ["2018-08-27", "latest"]
    assert get("/openstack/2025-04-04/meta_data.json", today="2019-01-01").status == 200  # still requestable


def test_meta_data_keys_by_version() -> None:
    old = json.loads(get("/openstack/2012-08-10/meta_data.json").payload())
    assert set(old) == {"uuid", "meta", "public_keys", "keys", "hostname", "name", "launch_index", "availability_zone"}
    reply = get("/openstack/latest/meta_data.json")
    latest = json.loads(reply.payload())
    assert set(latest) - set(old) == {"random_seed", "project_id", "devices", "dedicated_cpus"}
    assert latest["hostname"] == "web.novalocal" and latest["project_id"] == "p1"
    # Everything but random_seed is rendered once; the seed is new in every answer.
    assert reply.random_seed and json.loads(reply.payload())["random_seed"] != latest["random_seed"]
    assert "random_seed" not in json.loads(reply.body) and not get("/openstack/2012-08-10/meta_data.json").random_seed


def test_random_seeds_are_512_random_bytes_in_canonical_base64() -> None:
    seeds = [trees.random_seed() for _ in range(2000)]  # more than one draw of the pool
    assert len(set(seeds)) == len(seeds)
    counts = [0] * 256
    for seed in seeds:
        assert len(seed) == 684 and seed.endswith(b"=") and not seed.endswith(b"==")
        raw = base64.b64decode(seed, validate=True)
        assert len(raw) == 512 and base64.b64encode(raw) == seed  # canonical: re-encodes to itself
        for byte in raw:
            counts[byte] += 1
    # Every byte value about equally often (1,024,000 bytes: 4,000 each, give or take a few hundred).
    assert min(counts) > 3500 and max(counts) < 4500


def test_answers_are_rendered_once_and_seeded_ones_get_a_fresh_seed() -> None:
    from cloudnet.metadata.answers import Answer
    from cloudnet.wire.http1 import render_response

    plain = Answer(get("/latest/meta-data/hostname"))
    first, second = plain.response(), plain.response()
    assert first is second and first.body == b"web.novalocal"
    assert first.wire == render_response(200, [("Content-Type", trees.TEXT)], b"web.novalocal", True)
    seeded = Answer(get("/openstack/latest/meta_data.json"))
    one, two = seeded.response(), seeded.response()
    assert json.loads(one.body)["random_seed"] != json.loads(two.body)["random_seed"]
    assert one.wire == render_response(200, [("Content-Type", trees.JSON)], one.body, True)
    assert json.loads(one.body)["uuid"] == VIEW.id


def test_hostname_domain() -> None:
    assert trees.hostname(VIEW, Settings(dhcp_domain="")) == "web"
    assert trees.hostname(VIEW, Settings(dhcp_domain="example.org")) == "web.example.org"
    fqdn = InstanceView(id="x", name="n", hostname="db.corp.example", project_id="p")
    assert trees.hostname(fqdn, Settings()) == "db.corp.example"


def test_network_data_static_per_address_with_one_default_route() -> None:
    nd = json.loads(get("/openstack/latest/network_data.json").body)
    assert [link["id"] for link in nd["links"]] == ["tapa1b2c3d4-00", "tapb1b2c3d4-00"]
    assert [n["link"] for n in nd["networks"]] == ["tapa1b2c3d4-00", "tapa1b2c3d4-00", "tapb1b2c3d4-00"]
    assert [link["type"] for link in nd["links"]] == ["phy", "hw_veb"]
    assert [(n["type"], n["ip_address"], n["netmask"]) for n in nd["networks"]] == [
        ("ipv4", "10.0.0.10", "255.255.255.0"),
        ("ipv6", "2001:db8::10", "ffff:ffff:ffff:ffff::"),
        ("ipv4", "192.168.5.7", "255.255.255.0"),
    ]
    v4, v6, second = nd["networks"]
    assert v4["routes"] == [
        {"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "10.0.0.1"},
        {"network": "172.16.0.0", "netmask": "255.240.0.0", "gateway": "10.0.0.254"},
        {"network": "169.254.169.254", "netmask": "255.255.255.255", "gateway": "10.0.0.2"},  # eth0 only
    ]
    assert v6["routes"] == [{"network": "::", "netmask": "::", "gateway": "2001:db8::1"}]
    assert second["routes"] == []  # the default route goes through eth0 only, as the dataplane sets it
    assert [s["address"] for s in nd["services"]] == ["10.0.0.53", "9.9.9.9", "2001:db8::53"]
    assert get("/openstack/latest/network_data.json").content_type.startswith("text/plain")


def test_openstack_files_and_404s() -> None:
    assert get("/openstack/latest/user_data").body == VIEW.user_data
    assert json.loads(get("/openstack/2013-10-17/vendor_data.json").body) == {"a": 1}
    assert json.loads(get("/openstack/2016-10-06/vendor_data2.json").body) == {"static": {"a": 1}}
    missing = ["/openstack/2013-04-04/vendor_data.json", "/openstack/2013-10-17/network_data.json",
               "/openstack/2016-06-30/vendor_data2.json", "/openstack/2012-08-10/password", "/openstack/1999-01-01",
               "/openstack/latest/meta_data.json/x", "/openstack/content/0000", "/openstack/latest/x"]  # fmt: skip
    for path in missing:
        assert get(path).status == 404, path
    assert trees.is_password("/openstack/latest/password/") and not trees.is_password("/openstack/2012-08-10/password")
    assert metadata_paths.is_token_request("/latest/api/token")
    assert not metadata_paths.is_token_request("/2009-04-04/api/token")


def test_ec2_tree() -> None:
    assert text("/latest").split("\n") == ["meta-data/", "user-data"]
    assert text("/latest/meta-data/local-ipv4") == "10.0.0.10"
    assert text("/latest/meta-data/public-ipv4") == "192.0.2.10"
    assert text("/latest/meta-data/security-groups") == "default\nweb"
    assert text("/latest/meta-data/public-keys") == "0=k1"
    assert text("/latest/meta-data/public-keys/0") == "openssh-key"
    assert text("/latest/meta-data/placement/") == "availability-zone"
    assert text("/latest/meta-data/instance-id") == "i-0b1f7c2e"
    assert text("/latest/meta-data/reservation-id") == "r-11114000"
    assert text("/latest/user-data") == "#!/bin/sh\necho hi\n"
    assert "public-ipv4" not in text("/1.0/meta-data/").split("\n")
    for path in ("/2016-09-02/meta-data/", "/latest/meta-data/placement/zone", "/latest/meta-data/ami-id/x"):
        assert get(path).status == 404, path


def test_local_ipv4_falls_back_to_the_caller_address() -> None:
    bare = InstanceView(id="0b1f7c2e-1111-4000-8000-000000000011", name="b", hostname="b", project_id="p1")
    reply = get("/latest/meta-data/local-ipv4", view=bare, remote_ip="10.9.9.9")
    assert reply.body == b"10.9.9.9" and reply.cacheable is False
    assert get("/latest/meta-data/local-ipv4").cacheable is True
    assert get("/latest/user-data", view=bare).status == 404


def test_link_ids_stay_unique_when_port_ids_share_a_prefix() -> None:
    twin = Port(
        "a1b2c3d4-0000-4000-8000-0000000000ff", "n2", "fa:16:3e:00:00:ff", 1500, fixed_ips=(("192.168.5.8", "s9"),)
    )
    view = InstanceView(
        id="i", name="n", hostname="n", project_id="p", ports=(VIEW.ports[0], twin), subnets=VIEW.subnets
    )
    nd = trees.network_data(view)
    assert [link["id"] for link in nd["links"]] == ["tapa1b2c3d4-00", f"tap{twin.id}"]
    assert nd["networks"][-1]["link"] == f"tap{twin.id}"
