"""The metadata API as `cloudnet serve` runs it: listen addresses, the socket, vendor data, the secret, and the
real process serving both APIs until SIGTERM."""

from __future__ import annotations

import json
import signal
import socket
import stat
import subprocess
from pathlib import Path

import httpx
import pytest

from cloudnet.metadata import service
from cloudnet.metadata.service import Listen, MetadataConfigError, parse_listen
from cloudnet.wire import signing
from tests.support.process import CLOUDNET, free_port, serve


def test_parse_listen() -> None:
    assert parse_listen("127.0.0.1:8775") == Listen(host="127.0.0.1", port=8775)
    assert parse_listen("[::1]:8775") == Listen(host="::1", port=8775)
    assert parse_listen("unix:/run/cloudnet/metadata.sock") == Listen(path=Path("/run/cloudnet/metadata.sock"))
    assert parse_listen("off") is None and parse_listen("") is None
    for bad in ("8775", "localhost", "127.0.0.1:0", "127.0.0.1:99999", "unix:relative.sock", ":80"):
        with pytest.raises(MetadataConfigError):
            parse_listen(bad)


def test_bind_unix_socket_replaces_a_stale_one_and_is_private(tmp_path: Path) -> None:
    path = tmp_path / "run" / "metadata.sock"
    first = service.bind(Listen(path=path))
    first.close()  # a previous run that did not clean up
    second = service.bind(Listen(path=path))
    try:
        assert stat.S_ISSOCK(path.stat().st_mode) and stat.S_IMODE(path.stat().st_mode) == 0o600
    finally:
        second.close()
    path.unlink()
    path.write_text("not a socket")
    with pytest.raises(MetadataConfigError, match="cannot listen"):
        service.bind(Listen(path=path))  # a regular file is never removed


def test_bind_tcp_shares_with_servers_but_not_with_strangers() -> None:
    port = free_port()
    a = service.bind(Listen("127.0.0.1", port))
    b = service.bind(Listen("127.0.0.1", port))  # a second `cloudnet serve` on the host: SO_REUSEPORT
    a.close()
    b.close()
    stranger = socket.socket()
    stranger.bind(("127.0.0.1", port))
    stranger.listen()
    try:
        with pytest.raises(MetadataConfigError, match=r"cannot listen on 127\.0\.0\.1"):
            service.bind(Listen("127.0.0.1", port))
    finally:
        stranger.close()


def test_vendor_data_file(tmp_path: Path) -> None:
    assert service.load_vendor_data(None) == {}
    good = tmp_path / "vendor.json"
    good.write_text('{"cloud-init": "#cloud-config\\n"}')
    assert service.load_vendor_data(good) == {"cloud-init": "#cloud-config\n"}
    for content, match in (("[1, 2]", "JSON object"), ("{nope", "not valid JSON")):
        good.write_text(content)
        with pytest.raises(MetadataConfigError, match=match):
            service.load_vendor_data(good)
    with pytest.raises(MetadataConfigError, match="cannot read"):
        service.load_vendor_data(tmp_path / "missing.json")


# -- the real process ---------------------------------------------------------------------------------


def test_serve_runs_the_metadata_api_beside_the_rest_api(tmp_path: Path) -> None:
    vendor = tmp_path / "vendor.json"
    vendor.write_text(json.dumps({"site": "dc1"}))
    md_port = free_port()
    with serve(tmp_path / "state", "--metadata-listen", f"127.0.0.1:{md_port}", "--vendor-data", str(vendor)) as (
        proc,
        url,
    ):
        secret_file = tmp_path / "state" / "metadata_secret"
        assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
        secret = secret_file.read_text().strip()
        api = httpx.Client(base_url=url + "/v2.0", headers={"X-Auth-Token": "admin"})
        assert api.put("/hosts/h1", json={"host": {}}).status_code == 200
        r = api.post("/instances", json={"instance": {"name": "vm", "netns": "ns", "host": "h1"}})
        inst = r.json()["instance"]
        md = f"http://127.0.0.1:{md_port}"
        assert httpx.get(md + "/").text.endswith("2009-04-04\nlatest")
        headers = {"X-Instance-ID": inst["id"], "X-Tenant-ID": inst["project_id"],
                   "X-Instance-ID-Signature": signing.sign(secret, inst["id"])}  # fmt: skip
        r = httpx.get(md + "/openstack/latest/meta_data.json", headers=headers)
        assert r.status_code == 200 and r.json()["uuid"] == inst["id"]
        assert httpx.get(md + "/openstack/latest/vendor_data.json", headers=headers).json() == {"site": "dc1"}
        # A change through the REST API shows at once: both servers share the process and its store.
        api.put(f"/instances/{inst['id']}", json={"instance": {"user_data": "#!/bin/sh\n"}})
        assert httpx.get(md + "/latest/user-data", headers=headers).text == "#!/bin/sh\n"
        api.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{md_port}/", timeout=1)


def test_serve_on_a_unix_socket_and_without_metadata(tmp_path: Path) -> None:
    sock = tmp_path / "md" / "metadata.sock"
    with serve(tmp_path / "state", "--metadata-listen", f"unix:{sock}") as (proc, _url):
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock))) as client:
            assert client.get("http://metadata/").status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    assert not sock.exists()  # removed on the way out
    with serve(tmp_path / "state2", "--metadata-listen", "off") as (proc, url):
        assert httpx.get(url + "/v2.0").status_code == 200
        assert not (tmp_path / "state2" / "metadata_secret").exists()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("empty-secret", "is empty"),
        ("bad-vendor-data", "not valid JSON"),
        ("bad-vendor-data-metadata-off", "not valid JSON"),  # the API's config drives hold it too
        ("bad-listen", "must look like HOST:PORT"),
    ],
)
def test_serve_refuses_to_start_with_a_bad_metadata_setup(tmp_path: Path, setup: str, message: str) -> None:
    state = tmp_path / "state"
    state.mkdir()
    args = ["--metadata-listen", f"127.0.0.1:{free_port()}"]
    if setup == "empty-secret":
        (state / "metadata_secret").write_text("")
    elif setup.startswith("bad-vendor-data"):
        (tmp_path / "v.json").write_text("{")
        args = ["--metadata-listen", "off"] if setup.endswith("-off") else args
        args += ["--vendor-data", str(tmp_path / "v.json")]
    else:
        args = ["--metadata-listen", "nowhere"]
    run = subprocess.run([CLOUDNET, "serve", "--state-dir", str(state), "--port", str(free_port()), *args],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert run.returncode != 0
    assert message in run.stdout + run.stderr
    assert "Traceback" not in run.stderr  # a start-up error, said in a line
