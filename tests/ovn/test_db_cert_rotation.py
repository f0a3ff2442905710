"""OVN's databases take a renewed certificate without a restart: the SB database on `pssl:` (as `serve --tls
--ovn-listen` runs it), its key and certificate files replaced as the server's renewal writes them; new handshakes
present the new certificate, and a client connected before (`ovsdb-client monitor`) goes on getting updates."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from cryptography import x509 as cx

from cloudnet.dataplane.kernel import netns
from cloudnet.ovn import daemons
from cloudnet.pki import tls, x509


def _server_pair(ca: x509.Authority, ssl_files: daemons.Ssl) -> int:
    key = x509.new_key()
    cert = ca.server_cert(["127.0.0.1", "ovsdb"], key, client=True)  # (as ovn_stack makes it)
    x509.write_private(ssl_files.key, x509.key_pem(key))
    x509.write_private(ssl_files.cert, x509.cert_pem(cert))
    return int(cert.serial_number)


def _presented(ns: str, port: int, client: tuple[Path, Path], ca: Path) -> int:
    """The serial of the certificate a new handshake with the database presents (a chassis' certificate sent)."""
    with netns.entered(ns):
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    with raw, tls.client_context(ca, *client).wrap_socket(raw, server_hostname="127.0.0.1") as s:
        der = s.getpeercert(binary_form=True)
    assert der is not None
    return cx.load_der_x509_certificate(der).serial_number


def test_the_sb_database_presents_a_renewed_certificate_and_keeps_its_connections() -> None:
    ns = f"cn-dbrot-{uuid.uuid4().hex[:8]}"  # (OVN's fixed ports: in a namespace of the test's own)
    rundir = Path(tempfile.mkdtemp(prefix="cn-rot-", dir="/tmp"))  # (short: unix socket paths)
    ca = x509.new_authority()
    ssl_files = daemons.Ssl(rundir / "ovsdb.key", rundir / "ovsdb.crt", rundir / "ca.crt")
    x509.write_private(ssl_files.ca, ca.pem)
    old = _server_pair(ca, ssl_files)
    chassis_key = x509.new_key()
    chassis = rundir / "chassis.crt", rundir / "chassis.key"
    x509.write_private(chassis[0], x509.cert_pem(ca.host_cert("chassis-1", x509.load_csr(
        x509.new_csr("chassis-1", chassis_key).decode()))))  # fmt: skip
    x509.write_private(chassis[1], x509.key_pem(chassis_key))
    netns.create(ns)
    monitor = None
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        central = daemons.start_central(rundir, netns=ns, ssl=ssl_files)
        _nb, sb = daemons.listen(central, "127.0.0.1", ns, ssl=ssl_files)
        assert sb == f"ssl:127.0.0.1:{daemons.SB_PORT}"
        assert _presented(ns, daemons.SB_PORT, chassis, ssl_files.ca) == old
        out = rundir / "monitor.out"
        with out.open("wb") as f:  # a client connected before the renewal, over SSL with a chassis' certificate
            monitor = subprocess.Popen(["ip", "netns", "exec", ns, "ovsdb-client", f"--private-key={chassis[1]}",
                                        f"--certificate={chassis[0]}", f"--ca-cert={ssl_files.ca}", "monitor", sb,
                                        "OVN_Southbound", "SB_Global", "external_ids"], stdout=f,
                                       stderr=subprocess.STDOUT)  # fmt: skip

        def monitored(text: str) -> bool:
            deadline = time.monotonic() + 20
            while text not in out.read_text():
                assert monitor is not None and monitor.poll() is None, out.read_text()
                if time.monotonic() > deadline:
                    return False
                daemons.run(rundir, ["ovn-sbctl", f"--db={central.sb_url}", "set", "SB_Global", ".",
                                     f"external_ids:probe={text}"], ns)  # fmt: skip
                time.sleep(0.2)  # (the write is repeated until the monitor shows it: polled, with a deadline)
            return True

        assert monitored("before"), out.read_text()
        pid = daemons.pids(rundir)["ovnsb_db"]
        new = _server_pair(ca, ssl_files)  # the renewal: both files replaced whole, the daemons left running
        deadline = time.monotonic() + 30
        while (got := _presented(ns, daemons.SB_PORT, chassis, ssl_files.ca)) != new:
            assert time.monotonic() < deadline, f"the SB database still presents {got:x}, not {new:x}"
            time.sleep(0.1)
        assert monitored("after"), out.read_text()  # the connection made before goes on
        assert daemons.pids(rundir)["ovnsb_db"] == pid  # not restarted
    finally:
        if monitor is not None:
            monitor.terminate()
            monitor.wait(timeout=10)
        daemons.stop(rundir, ns)
        netns.remove(ns)
        shutil.rmtree(rundir, ignore_errors=True)
