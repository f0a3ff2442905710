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

from cloudnet import ovn_stack
from cloudnet.config import ServerConfig
from cloudnet.dataplane.kernel import netns
from cloudnet.ovn import daemons
from cloudnet.pki import tls, x509
from cloudnet.store.db import Store
from cloudnet.store.migrate import upgrade
from tests.support.process_netns import process_in_throwaway_netns
from tests.support.tls import aged


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


def test_the_server_remakes_its_members_certificate_when_due_and_restarts_ovn_northd_only(tmp_path: Path) -> None:
    """ovn_stack.renew_ssl_if_due, as `serve --tls --ovn-cluster` runs it (a one-member cluster here, started by
    ovn_stack.start): nothing while the databases' certificate is young; once it is 2/3 through its lifetime, a new
    one for the same address and ovsdb-servers left running (new handshakes present it), and ovn-northd, which loads
    its certificate once, started again: it takes NB changes into SB with the new one."""
    rundir = Path(tempfile.mkdtemp(prefix="cn-srot-", dir="/tmp"))  # (short: unix socket paths)
    config = ServerConfig(state_dir=rundir, tls=True, ovn_listen="127.0.0.1", ovn_cluster=("127.0.0.1",))
    store = Store(f"sqlite:///{tmp_path / 'cloudnet.db'}")
    upgrade(store)
    stack = None
    with process_in_throwaway_netns() as ns:  # (the daemons start in the process's namespace, as a server's do)
        try:
            stack = ovn_stack.start(config, store, None)
            ca = x509.load_authority(config.pki_dir / "ca.crt", config.pki_dir / "ca.key")
            key = x509.new_key()
            client = rundir / "chassis.crt", rundir / "chassis.key"
            x509.write_private(client[0], x509.cert_pem(ca.host_cert("chassis-1", x509.load_csr(
                x509.new_csr("chassis-1", key).decode()))))  # fmt: skip
            x509.write_private(client[1], x509.key_pem(key))
            cert_file, ca_file = config.pki_dir / "ovsdb.crt", config.pki_dir / "ca.crt"
            current = x509.load_cert(cert_file)
            assert _presented(ns, daemons.NB_PORT, client, ca_file) == current.serial_number
            assert not ovn_stack.renew_ssl_if_due(config, store)  # young: nothing done
            assert x509.load_cert(cert_file).serial_number == current.serial_number

            rundir_ovn = config.state_dir / "ovn"
            before = daemons.pids(rundir_ovn)
            x509.write_private(cert_file, x509.cert_pem(aged(current, ca, days_gone=300, days_left=65)))
            assert ovn_stack.renew_ssl_if_due(config, store)
            renewed = x509.load_cert(cert_file)
            assert renewed.serial_number != current.serial_number and x509.names_address(renewed, "127.0.0.1")
            assert not ovn_stack.renew_ssl_if_due(config, store)  # (young again)
            deadline = time.monotonic() + 30
            while (got := _presented(ns, daemons.NB_PORT, client, ca_file)) != renewed.serial_number:
                assert time.monotonic() < deadline, f"NB still presents {got:x}, not {renewed.serial_number:x}"
                time.sleep(0.1)
            after = daemons.pids(rundir_ovn)
            databases = ("ovnnb_db", "ovnsb_db")
            assert [after.get(k) for k in databases] == [before[k] for k in databases]  # not restarted
            assert after.get("ovn-northd") not in (None, before["ovn-northd"])
            # The new ovn-northd works over SSL with the new certificate: an NB switch gets its SB datapath.
            nb = ["ovn-nbctl", f"--db=unix:{rundir_ovn / 'ovnnb_db.sock'}", "--timeout=10"]
            sb = ["ovn-sbctl", f"--db=unix:{rundir_ovn / 'ovnsb_db.sock'}", "--timeout=10"]
            daemons.run(rundir_ovn, [*nb, "ls-add", "renewed"])
            deadline = time.monotonic() + 30
            while "renewed" not in daemons.run(rundir_ovn, [*sb, "--bare", "--columns=external_ids", "list",
                                                            "Datapath_Binding"]):  # fmt: skip
                assert time.monotonic() < deadline, "ovn-northd did not take the switch into SB"
                time.sleep(0.1)
        finally:
            if stack is not None:
                stack.stop()
            daemons.stop(rundir / "ovn")
            store.dispose()
            shutil.rmtree(rundir, ignore_errors=True)
