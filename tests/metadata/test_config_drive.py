"""GET /v2.0/instances/{id}/config-drive and `cloudnet instance config-drive`: Nova's config drive, read back by real
readers and compared with what the metadata API serves the same instance.

blkid probes the image as cloud-init finds a drive (TYPE iso9660, LABEL config-2); libarchive's bsdtar reads its
file tree (the kernel of this machine has no iso9660 to mount, and pycdlib, the writer, is no judge of its own
images); cloud-init's own ConfigDrive reader then reads that tree with Debian's python3.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudnet.config import ServerConfig
from tests.metadata.conftest import USER_DATA, VENDOR
from tests.support.api import create, error
from tests.support.cli import Cli
from tests.support.guest_metadata import READER
from tests.support.installed import DEBIAN_PYTHON, require_cloud_init, require_commands
from tests.support.metadata import Guest
from tests.support.server import RunningServer

ISO = "application/x-iso9660-image"
READS = "2018-08-27"  # the newest OpenStack version cloud-init knows: the one its reader picks
MISSING = "5f0e3f2c-0d7e-4c39-9a3e-2b8f8a0c9d11"


@pytest.fixture
def server_config(tmp_path: Path) -> ServerConfig:
    """The API's metadata settings equal to the metadata API's in these tests (tests/metadata/conftest.py): the
    vendor data from a file, as `cloudnet serve --metadata-vendor-data` reads it."""
    state = tmp_path / "state"
    state.mkdir()
    vendor = tmp_path / "vendor.json"
    vendor.write_text(json.dumps(VENDOR))
    return ServerConfig(state_dir=state, metadata_vendor_data=vendor)


def drive(client: httpx.Client, instance_id: str) -> bytes:
    r = client.get(f"/instances/{instance_id}/config-drive")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == ISO
    return r.content


def unpack(image: bytes, where: Path) -> Path:
    """The drive's tree, after checking it is what cloud-init looks for (blkid's TYPE and LABEL)."""
    require_commands("libarchive-tools", "bsdtar")
    iso = where / "drive.iso"
    iso.write_bytes(image)
    probe = subprocess.run(["blkid", "-p", "-o", "export", str(iso)], capture_output=True, text=True, check=True)
    found = dict(line.split("=", 1) for line in probe.stdout.splitlines() if "=" in line)
    assert (found.get("TYPE"), found.get("LABEL")) == ("iso9660", "config-2"), probe.stdout
    tree = where / "drive"
    tree.mkdir()
    subprocess.run(["bsdtar", "-xf", str(iso), "-C", str(tree)], check=True, capture_output=True)
    return tree


def cloud_init(tree: Path) -> dict[str, Any]:
    require_cloud_init()
    done = subprocess.run([DEBIAN_PYTHON, READER, "--config-drive", str(tree)], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def served_ec2(guest: Guest, path: str) -> dict[str, Any]:
    """The EC2 tree the metadata API serves under `path`, crawled (directories end in `/`, keys are `0=name`)."""
    tree: dict[str, Any] = {}
    for line in guest.get(path + "/").text.splitlines():
        name = line.split("=")[0].rstrip("/")
        tree[name] = served_ec2(guest, f"{path}/{name}") if line.endswith("/") or "=" in line else None
        if tree[name] is None:
            r = guest.get(f"{path}/{name}")
            assert r.status_code == 200, (path, name)
            tree[name] = r.text
    return tree


def as_served(node: Any) -> Any:
    """A drive's EC2 meta-data.json as the metadata API prints it (lists are newline-joined there)."""
    if isinstance(node, dict):
        return {key: as_served(value) for key, value in node.items()}
    return "\n".join(node) if isinstance(node, list) else node


def without_seed(body: bytes) -> dict[str, Any]:
    document = json.loads(body)
    assert len(base64.b64decode(document.pop("random_seed"), validate=True)) == 512
    return dict(document)


def test_cloud_init_reads_what_the_metadata_api_serves(
    api: httpx.Client, instance: dict[str, Any], guest: Guest, tmp_path: Path
) -> None:
    read = cloud_init(unpack(drive(api, instance["id"]), tmp_path))
    served = without_seed(guest.get(f"/openstack/{READS}/meta_data.json").content)
    assert read["metadata"]["uuid"] == instance["id"]
    # (cloud-init adds its own names of some keys, such as instance-id, beside nova's)
    assert {key: read["metadata"][key] for key in served} == served
    assert read["random_seed_bytes"] == 512
    assert read["networkdata"] == guest.get("/openstack/latest/network_data.json").json()
    link = read["networkdata"]["links"][0]
    assert link["ethernet_mac_address"] == instance["nets"][0]["mac_address"]
    assert read["networkdata"]["networks"][0]["ip_address"] == "10.70.0.10"
    assert base64.b64decode(read["userdata_b64"]) == guest.get("/openstack/latest/user_data").content
    assert base64.b64decode(read["userdata_b64"]) == USER_DATA.encode()
    assert read["vendordata"] == VENDOR == guest.get("/openstack/latest/vendor_data.json").json()
    assert read["vendordata2"] == {"static": VENDOR} == guest.get("/openstack/latest/vendor_data2.json").json()
    assert as_served(read["ec2-metadata"]) == served_ec2(guest, "/latest/meta-data")
    assert read["ec2-metadata"]["local-ipv4"] == "10.70.0.10"
    assert read["ec2-metadata"]["public-keys"]["0"]["openssh-key"].startswith("ssh-ed25519 ")


def test_every_file_is_the_metadata_apis(
    api: httpx.Client, instance: dict[str, Any], guest: Guest, tmp_path: Path
) -> None:
    tree = unpack(drive(api, instance["id"]), tmp_path)
    assert sorted(os.listdir(tree)) == ["ec2", "openstack"]
    # Every version the service lists, dated ones and latest; in each, its files but the password (the guest
    # posts that after boot, as with Nova's drives).
    versions = guest.get("/openstack").text.splitlines()
    assert "2012-08-10" in versions and "latest" in versions
    assert sorted(os.listdir(tree / "openstack")) == sorted(versions)
    seeds = set()
    for version in versions:
        names = set(guest.get(f"/openstack/{version}").text.splitlines()) - {"password"}
        assert set(os.listdir(tree / "openstack" / version)) == names, version
        for name in names:
            on_drive = (tree / "openstack" / version / name).read_bytes()
            served = guest.get(f"/openstack/{version}/{name}").content
            if name == "meta_data.json" and version != "2012-08-10":  # (Folsom's has no random_seed yet)
                seeds.add(json.loads(on_drive)["random_seed"])
                assert without_seed(on_drive) == without_seed(served), version
            else:
                assert on_drive == served, (version, name)
    assert len(seeds) == len(versions) - 1  # each a fresh one, as nova makes them
    assert set(os.listdir(tree / "openstack" / "latest")) == {"meta_data.json", "user_data", "vendor_data.json",
                                                              "network_data.json", "vendor_data2.json"}  # fmt: skip
    # EC2: the version Nova keeps on drives by default, and latest.
    assert sorted(os.listdir(tree / "ec2")) == ["2009-04-04", "latest"]
    for version in ("2009-04-04", "latest"):
        meta = json.loads((tree / "ec2" / version / "meta-data.json").read_bytes())
        assert as_served(meta) == served_ec2(guest, f"/{version}/meta-data"), version
        assert (tree / "ec2" / version / "user-data").read_bytes() == guest.get(f"/{version}/user-data").content


def test_an_instance_with_nothing_but_a_name(api: httpx.Client, host: str, tmp_path: Path) -> None:
    bare = create(api, "instances", "instance", name="bare", host=host)
    tree = unpack(drive(api, bare["id"]), tmp_path)
    assert not list(tree.rglob("user_data")) and not list(tree.rglob("user-data"))
    read = cloud_init(tree)
    assert read["metadata"]["uuid"] == bare["id"]
    assert read["networkdata"] == {"links": [], "networks": [], "services": []}
    assert read["userdata_b64"] == ""


def test_only_owner_and_admin(users: dict[str, httpx.Client]) -> None:
    alice, bob, admin = users["alice"], users["bob"], users["admin"]
    assert admin.put("/hosts/node-1", json={"host": {"agent_version": "test"}}).status_code == 200
    r = alice.post("/instances", json={"instance": {"name": "alices", "host": "node-1"}})
    assert r.status_code == 201, r.text
    vm = r.json()["instance"]
    assert drive(alice, vm["id"]) and drive(admin, vm["id"])
    # Another project's member learns no more than from the instance itself: the same 404.
    assert bob.get(f"/instances/{vm['id']}/config-drive").json() == bob.get(f"/instances/{vm['id']}").json()
    error(bob.get(f"/instances/{vm['id']}/config-drive"), 404)
    for ident in (MISSING, "not-an-id", "x" * 3000, "%00", "%2E%2E", "%C3%A9", "..;", "'%20OR%201=1"):
        error(alice.get(f"/instances/{ident}/config-drive"), 404)
    anonymous = httpx.get(str(alice.base_url) + f"/instances/{vm['id']}/config-drive")
    assert anonymous.status_code == 401


def test_bounded(api: httpx.Client, host: str) -> None:
    """User data at its limit fits; but metadata items have no count limit and meta_data.json carries them in 11
    versions: past 16 MiB of content the drive is refused, clearly, rather than built in memory."""
    vm = create(api, "instances", "instance", name="big", host=host, user_data="\U0001f600" * 65535)
    assert len(drive(api, vm["id"])) > 13 * 4 * 65535  # its 13 copies of 256 KiB
    value = "v" * 65536
    for n in range(24):  # 24 x 64 KiB in 11 meta_data.json, and 3.25 MiB of user data: 19.75 MiB
        r = api.put(f"/instances/{vm['id']}/metadata/k{n}", json={"value": value})
        assert r.status_code == 200, r.text
    message = error(api.get(f"/instances/{vm['id']}/config-drive"), 409, "ConfigDriveTooLarge")
    assert f"config drive of instance {vm['id']} would hold more than the 16 MiB" in message, message


def test_cli(server: RunningServer, instance: dict[str, Any], tmp_path: Path) -> None:
    cli = Cli(server.url)
    out = tmp_path / "vm1.iso"
    said = cli.out("instance", "config-drive", "vm1", "-o", str(out))
    assert str(out) in said and "vm1" in said
    assert cloud_init(unpack(out.read_bytes(), tmp_path))["metadata"]["uuid"] == instance["id"]
    # An existing file is kept unless --force says otherwise.
    out.write_bytes(b"precious")
    assert "exists: give --force" in cli.fail("instance", "config-drive", instance["id"], "--output", str(out))
    assert out.read_bytes() == b"precious"
    cli.ok("instance", "config-drive", instance["id"], "-o", str(out), "--force")
    assert out.read_bytes().startswith(b"\0" * 32768) and out.stat().st_size > 32768  # (the system area, then data)
    assert "No instance" in cli.fail("instance", "config-drive", "no-such-vm", "-o", str(tmp_path / "x.iso"))
    assert not (tmp_path / "x.iso").exists()
    assert "cannot write" in cli.fail("instance", "config-drive", "vm1", "-o", str(tmp_path / "nodir" / "x.iso"))
