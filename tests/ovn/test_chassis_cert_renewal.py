"""ovn-controller takes a joined host's renewed certificate without a restart (issue 29: rotation without
downtime). A real `cloudnet serve --tls` on loopback, a host joined with a token, its chassis (ovs-vswitchd and
ovn-controller) on `ssl:` with the join's files; the host's certificate renewed as the agent's renewal does
(agent/join.py's renew: a new key, the server signs it, both files replaced whole). Between ovn-controller and the SB
database sits a TLS tap of the test's (it requires a client certificate of the cloud's CA, notes the serial of each
one presented, and carries the bytes to SB's unix socket): when its connections are dropped, ovn-controller, the same
process, reconnects presenting the renewed certificate, and its chassis is connected and registered again."""

from __future__ import annotations

import select
import shutil
import socket
import ssl
import tempfile
import threading
import uuid
from contextlib import suppress
from pathlib import Path

from cryptography import x509 as cx

from cloudnet.agent import join as joining
from cloudnet.dataplane.kernel import netns
from cloudnet.ovn import daemons
from cloudnet.pki import tls, x509
from tests.support.mdata_raw import wait_for
from tests.support.process_netns import process_in_throwaway_netns
from tests.support.tls import tls_serve


class TlsTap:
    """A TLS listener at 127.0.0.1:`port` in `ns` carrying each connection to the unix socket `upstream`."""

    def __init__(self, ns: str, port: int, context: ssl.SSLContext, upstream: Path) -> None:
        self.context, self.upstream = context, upstream
        self.serials: list[int] = []  # of the client certificates presented, in order
        self.open: list[socket.socket] = []
        with netns.entered(ns):
            self.listener = socket.create_server(("127.0.0.1", port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                raw, _peer = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._carry, args=(raw,), daemon=True).start()

    def _carry(self, raw: socket.socket) -> None:
        try:
            conn = self.context.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            raw.close()
            return
        der = conn.getpeercert(binary_form=True)
        assert der is not None  # (CERT_REQUIRED)
        self.serials.append(cx.load_der_x509_certificate(der).serial_number)
        self.open.append(conn)
        with conn, socket.socket(socket.AF_UNIX) as up:
            up.connect(str(self.upstream))
            while True:  # (one thread per connection: the SSL object is never used from two at once)
                try:
                    ready, _, _ = select.select([conn, up], [], [], 1.0)
                    if conn in ready or conn.pending():
                        data = conn.recv(65536)
                        if not data:
                            return
                        up.sendall(data)
                    if up in ready:
                        data = up.recv(65536)
                        if not data:
                            return
                        conn.sendall(data)
                except (ssl.SSLError, OSError, ValueError):
                    return

    def drop(self) -> None:
        """End every connection carried so far (as a restart of the database would)."""
        for conn in self.open:
            with suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self.open.clear()

    def close(self) -> None:
        self.listener.close()
        self.drop()


def test_ovn_controller_presents_a_renewed_certificate_without_a_restart(tmp_path: Path) -> None:
    rundir = Path(tempfile.mkdtemp(prefix="cn-crt-", dir="/tmp"))  # (short: unix socket paths)
    host = f"ch-crt-{uuid.uuid4().hex[:6]}"
    # (everything in a namespace of the test's own: OVN's fixed SB port, the chassis' bridges)
    with process_in_throwaway_netns() as ns, tls_serve(tmp_path / "server") as server:
        tap = None
        try:
            cert_file, _key = server.join(host, tmp_path / "host")
            ca_file, _cert, key_file, _secret = joining.Joined.files(tmp_path / "host")
            first = x509.load_cert(cert_file).serial_number
            central = daemons.start_central(rundir / "central", netns=ns)
            # The tap: a server certificate of the cloud's CA, client certificates of that CA required.
            authority = x509.load_authority(server.state / "pki" / "ca.crt", server.state / "pki" / "ca.key")
            skey = x509.new_key()
            x509.write_private(rundir / "tap.crt", x509.cert_pem(authority.server_cert(["127.0.0.1"], skey)))
            x509.write_private(rundir / "tap.key", x509.key_pem(skey))
            context = tls.server_context(tls.ServerFiles(rundir / "tap.crt", rundir / "tap.key", ca_file),
                                         ssl.CERT_REQUIRED)  # fmt: skip
            tap = TlsTap(ns, daemons.SB_PORT, context, rundir / "central" / "ovnsb_db.sock")
            chassis = daemons.start_chassis(rundir / "chassis", host, f"ssl:127.0.0.1:{daemons.SB_PORT}", netns=ns,
                                            ssl=daemons.Ssl(key_file, cert_file, ca_file))  # fmt: skip
            controller = daemons.pids(chassis.rundir)["ovn-controller"]
            assert first in tap.serials

            # The renewal, as the agent's thread does it when due: over the current certificate, files replaced.
            renewed = joining.renew(tmp_path / "host", tls.client_context(ca_file, cert_file, key_file))
            assert renewed.serial_number != first == tap.serials[-1]
            seen = len(tap.serials)
            tap.drop()
            wait_for(lambda: renewed.serial_number in tap.serials[seen:], 30,
                     "ovn-controller reconnected with the renewed certificate")  # fmt: skip
            assert first not in tap.serials[seen:]
            assert daemons.pids(chassis.rundir)["ovn-controller"] == controller  # the same process
            sbctl = ["ovn-sbctl", f"--db={central.sb_url}", "--timeout=5", "--bare", "--columns=name", "find",
                     "Chassis", f"name={host}"]  # fmt: skip
            assert daemons.run(rundir, sbctl, ns).strip() == host
            ctl = chassis.rundir / f"ovn-controller.{controller}.ctl"
            wait_for(lambda: daemons.run(chassis.rundir, ["ovn-appctl", "-t", str(ctl), "connection-status"],
                                         ns).strip() == "connected", 30, "ovn-controller connected to SB")  # fmt: skip
        finally:
            if tap is not None:
                tap.close()
            daemons.stop(rundir / "chassis", ns)
            daemons.stop(rundir / "central", ns)
            shutil.rmtree(rundir, ignore_errors=True)
