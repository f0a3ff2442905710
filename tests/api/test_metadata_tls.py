"""The metadata relay over TLS, against a real `cloudnet serve --tls`: a guest (its own namespace, plumbed to the
relay's metadata namespace as a driver does) reads its user_data through the agent's relay (agent/metadata/proxy.py,
with a joined host's certificate and CA), and the metadata listener turns away a relay with no certificate or
another CA's, and plain HTTP, even when the request is signed with the right secret."""

from __future__ import annotations

import socket
import ssl
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from cloudnet.agent import join
from cloudnet.agent.client import ApiClient
from cloudnet.agent.metadata.proxy import MetadataProxy
from cloudnet.agent.metadata.relay import Caller
from cloudnet.dataplane.kernel import netns
from cloudnet.pki import tls
from cloudnet.wire import signing
from tests.support.relay_guest import guest_get, plumb_guest
from tests.support.tls import TlsServer, foreign_cert, tls_serve

USER_DATA = "#cloud-config\nruncmd: [echo over-tls]\n"
CIDR, GUEST_IP, PORT_IP = "10.83.0.0/24", "10.83.0.10", "10.83.0.2"


@dataclass
class Site:
    server: TlsServer
    host: str
    state: Path  # the joined host's state (its certificate, the CA, the metadata secret)
    metadata_url: str
    guest_ns: str
    state_doc: dict[str, Any]

    @property
    def files(self) -> tuple[Path, Path, Path, Path]:
        return join.Joined.files(self.state)

    def relay_context(self, cert: tuple[Path, Path] | None) -> ssl.SSLContext:
        return tls.client_context(self.files[0], *(cert or (None, None)))

    def relay(self, context: ssl.SSLContext) -> MetadataProxy:
        proxy = MetadataProxy(self.host, self.metadata_url, signing.read_secret(self.files[3]), retry_interval=0.1,
                              tls=context)  # fmt: skip
        proxy.update(self.state_doc)
        return proxy


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    suffix = uuid.uuid4().hex[:6]
    host = f"mdtls-{suffix}"
    with tls_serve(tmp_path / "server") as server:
        cert = server.join(host, tmp_path / "host")
        saved = join.load(tmp_path / "host")
        assert saved is not None and saved.metadata_url is not None
        assert saved.metadata_url.startswith("https://"), saved  # the join hands over the TLS listener
        with server.client() as c:
            assert c.put(f"/hosts/{host}", json={"host": {}}).status_code == 200
            net = c.post("/networks", json={"network": {"name": "n"}}).json()["network"]
            c.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": CIDR}}).raise_for_status()
            ns = f"cnmt-{suffix}"
            nets = [{"network": net["id"], "v4-fixed-ip": GUEST_IP}]
            r = c.post("/instances", json={"instance": {"name": "g", "host": host, "netns": ns,
                                                         "user_data": USER_DATA, "nets": nets}})  # fmt: skip
            assert r.status_code == 201, r.text
            mac = r.json()["instance"]["nets"][0]["mac_address"]
        context = tls.client_context(join.Joined.files(tmp_path / "host")[0], *cert)
        client = ApiClient(server.url, host, "", tls=context)  # the agent's own view, over its certificate
        try:
            doc = client.desired_state()
        finally:
            client.close()
        namespaces = plumb_guest(host, net["id"], ns, mac, f"{GUEST_IP}/24", f"{PORT_IP}/24", f"vm{suffix}")
        try:
            yield Site(server, host, tmp_path / "host", saved.metadata_url, ns, doc)
        finally:
            for name in namespaces:
                netns.remove(name)


def test_a_guest_reads_its_user_data_through_the_relay_over_tls(site: Site) -> None:
    _ca, crt, key, _secret = site.files
    proxy = site.relay(site.relay_context((crt, key)))
    try:
        status, body = guest_get(site.guest_ns, "/openstack/latest/user_data")
        assert (status, body.decode()) == (200, USER_DATA)
    finally:
        proxy.close()
    assert "over TLS with their host certificates" in site.server.log()


@pytest.mark.parametrize("which", ["none", "foreign"])
def test_a_relay_without_a_host_certificate_of_the_ca_gets_nothing(site: Site, tmp_path: Path, which: str) -> None:
    cert = None if which == "none" else foreign_cert(tmp_path, site.host)
    proxy = site.relay(site.relay_context(cert))
    try:
        status, body = guest_get(site.guest_ns, "/openstack/latest/user_data")
    finally:
        proxy.close()
    assert status == 503 and USER_DATA.encode() not in body  # the relay could not reach the metadata API
    if which == "foreign":
        site.server.until_logged("TLS handshake refused")


def _signed_request(site: Site) -> bytes:
    """The request a relay would send for the guest, signed with the right secret."""
    secret = signing.read_secret(site.files[3])
    inst = site.state_doc["instances"][0]
    port = site.state_doc["ports"][inst["ports"][0]]
    caller = Caller(inst["id"], inst["project_id"], signing.sign(secret, inst["id"]))
    return (b"GET /openstack/latest/user_data HTTP/1.1\r\nHost: metadata\r\nConnection: close\r\n"
            + caller.identity(port["network_id"], GUEST_IP) + b"\r\n")  # fmt: skip


def _read_all(sock: socket.socket) -> bytes:
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except (OSError, ssl.SSLError):
        pass  # (reset, or the TLS alert raised)
    return got


def test_signed_requests_without_a_certificate_or_in_plain_http_get_nothing(site: Site) -> None:
    addr = urlsplit(site.metadata_url)
    assert addr.hostname is not None and addr.port is not None
    request = _signed_request(site)
    # Plain HTTP to the TLS listener, signed with the right secret: no answer of HTTP, no user_data.
    with socket.create_connection((addr.hostname, addr.port), timeout=10) as plain:
        plain.sendall(request)
        got = _read_all(plain)
    assert b"HTTP/" not in got and b"over-tls" not in got, got
    # TLS verifying the server, but no client certificate: refused in (or right after) the handshake.
    context = site.relay_context(None)
    with socket.create_connection((addr.hostname, addr.port), timeout=10) as raw:
        try:
            with context.wrap_socket(raw, server_hostname=addr.hostname) as s:
                s.sendall(request)
                got = _read_all(s)
        except (ssl.SSLError, OSError):
            got = b""
    assert b"HTTP/" not in got and b"over-tls" not in got, got
    # The same request over the host's certificate is answered: what stops the two above is the certificate.
    context = site.relay_context(site.files[1:3])  # type: ignore[arg-type]
    with socket.create_connection((addr.hostname, addr.port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=addr.hostname) as s:  # fmt: skip
        s.sendall(request)
        got = _read_all(s)
    assert got.startswith(b"HTTP/1.1 200") and b"over-tls" in got, got


def test_a_removed_hosts_relay_is_refused_its_open_connections_too(site: Site) -> None:
    _ca, crt, key, _secret = site.files
    proxy = site.relay(site.relay_context((crt, key)))
    try:
        assert guest_get(site.guest_ns, "/openstack/latest/user_data") == (200, USER_DATA.encode())
        with site.server.client() as admin:  # revoked while the relay holds a kept-alive connection
            assert admin.post(f"/hosts/{site.host}/remove").status_code == 200
        deadline = time.monotonic() + 15
        while (got := guest_get(site.guest_ns, "/openstack/latest/user_data"))[0] != 503:
            assert got == (200, USER_DATA.encode()), got
            assert time.monotonic() < deadline, "a removed host's relay is still served"
            time.sleep(0.1)
    finally:
        proxy.close()
    site.server.until_logged(f"of host {site.host} was revoked")
    addr = urlsplit(site.metadata_url)
    assert addr.hostname is not None and addr.port is not None
    with socket.create_connection((addr.hostname, addr.port), timeout=10) as raw:  # a new connection: nothing
        try:
            with site.relay_context((crt, key)).wrap_socket(raw, server_hostname=addr.hostname) as s:
                s.sendall(_signed_request(site))
                got_raw = _read_all(s)
        except (ssl.SSLError, OSError):
            got_raw = b""
    assert b"HTTP/" not in got_raw and b"over-tls" not in got_raw, got_raw


def test_a_join_written_before_the_metadata_listener_had_tls_is_read_as_https(tmp_path: Path) -> None:
    saved = join.Joined.dir(tmp_path) / "joined.json"
    saved.parent.mkdir()
    saved.write_text('{"server": "https://10.0.0.1:9696", "host": "h", "ovn_sb": null, '
                     '"metadata_url": "http://10.0.0.1:8775"}')  # fmt: skip
    loaded = join.load(tmp_path)
    assert loaded is not None and loaded.metadata_url == "https://10.0.0.1:8775"
