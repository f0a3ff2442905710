"""What the TLS front of OVN's databases (src/cloudnet/ovn/front.py, issue 29) costs beside ovsdb-server's own `pssl:`.
Prints figures beside targets; asserts nothing.

One NB ovsdb-server (daemons.start_central) listening both ways on loopback ports of the bench's own: on `pssl:`
itself, and through the front (in this process, as `cloudnet ovn front` runs it, with its certificate list read from
a real store). The client is a host certificate of the cloud's CA, recorded,
speaking OVSDB's JSON-RPC over the stdlib's ssl, alternating between the two in batches:
  connect + list_dbs   a new connection's TCP, TLS handshake and first answer (what a reconnecting chassis pays)
  NB transaction       an insert of a Logical_Switch on an open connection, until its reply (one round trip
                       through the front: the bytes copied twice more, a check per connection, none per message)

Usage (root): .venv/bin/python bench/ovn_front.py [--n 400]
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import ssl
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from common import ROOT, machine_load, median, ms, percentile, row  # noqa: F401  (ROOT: sys.path for tests.support)
from cryptography import x509 as cx
from ovn_common import versions
from tests.support.process import free_port

from cloudnet import ovn_stack
from cloudnet.ovn import daemons
from cloudnet.pki import tls, x509
from cloudnet.services.hosts import host_join
from cloudnet.store.db import Store
from cloudnet.store.migrate import upgrade

TARGET_TRANSACT = 1.0e-3  # seconds the front may add to an NB transaction's round trip (p50)


class Client:
    """OVSDB's JSON-RPC over TLS: one request at a time, its reply read whole."""

    def __init__(self, context: ssl.SSLContext, port: int) -> None:
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock = context.wrap_socket(raw)
        self.buffer, self.ids = "", 0
        self.decoder = json.JSONDecoder()

    def call(self, method: str, params: list[object]) -> object:
        self.ids += 1
        self.sock.sendall(json.dumps({"method": method, "params": params, "id": self.ids}).encode())
        while True:
            try:
                reply, end = self.decoder.raw_decode(self.buffer)
            except ValueError:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise ConnectionError("closed") from None
                self.buffer += chunk.decode()
                continue
            self.buffer = self.buffer[end:].lstrip()
            if reply.get("id") == self.ids:
                return reply["result"]

    def close(self) -> None:
        self.sock.close()


def connect_once(context: ssl.SSLContext, port: int) -> float:
    t0 = time.perf_counter()
    client = Client(context, port)
    assert "OVN_Northbound" in client.call("list_dbs", [])  # type: ignore[operator]
    took = time.perf_counter() - t0
    client.close()
    return took


def transact_once(client: Client, n: int) -> float:
    op = {"op": "insert", "table": "Logical_Switch", "row": {"name": f"bench-{n}"}}
    t0 = time.perf_counter()
    result = client.call("transact", ["OVN_Northbound", op])
    took = time.perf_counter() - t0
    assert isinstance(result, list) and "uuid" in result[0], result
    return took


def alternate(measure: dict[int, Callable[[int], float]], n: int, batch: int = 20) -> dict[int, list[float]]:
    """`n` figures of each side, in alternating batches (the machine's other load falls on both alike)."""
    got: dict[int, list[float]] = {port: [] for port in measure}
    while any(len(v) < n for v in got.values()):
        for port, one in measure.items():
            for _ in range(batch):
                got[port].append(one(len(got[port])))
    return got


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=400)
    args = parser.parse_args()
    print(f"ovn_front: OVN's databases behind the TLS front vs ovsdb-server's own pssl: ({versions()}), n={args.n}")
    machine_load()
    root = Path(tempfile.mkdtemp(prefix="cn-front-", dir="/tmp"))  # (short: unix socket paths)
    store = Store(f"sqlite:///{root / 'cloudnet.db'}")
    direct, fronted_port = free_port(), free_port()
    fronted = None
    try:
        upgrade(store)
        ca = x509.new_authority()
        (root / "ca.crt").write_bytes(ca.pem)
        files = daemons.Ssl(root / "ovsdb.key", root / "ovsdb.crt", root / "ca.crt")
        key = x509.new_key()
        cert = ca.server_cert(["127.0.0.1", "ovsdb"], key, client=True)
        host_join.record_own(store, cert)
        x509.write_private(files.cert, x509.cert_pem(cert))
        x509.write_private(files.key, x509.key_pem(key))
        host_key = x509.new_key()
        host_cert = host_join.sign_own(store, ca, "bench-host", cx.load_pem_x509_csr(x509.new_csr("bench", host_key)))
        x509.write_private(root / "h.crt", x509.cert_pem(host_cert))
        x509.write_private(root / "h.key", x509.key_pem(host_key))
        central = daemons.start_central(root / "ovn", ssl=files)
        daemons.run(central.rundir, ["ovs-appctl", "-t", str(central.rundir / "ovnnb_db.ctl"),
                                     "ovsdb-server/add-remote", f"pssl:{direct}:127.0.0.1"])  # fmt: skip
        fronted = ovn_stack.start_front(store, files, central.rundir, "127.0.0.1", (fronted_port, free_port()))
        context = tls.client_context(files.ca, root / "h.crt", root / "h.key")
        context.check_hostname = False
        daemons.unanswered(central.rundir, [f"ssl:127.0.0.1:{direct}"], None, 10, files)
        sides = (direct, fronted_port)
        connects = alternate({p: lambda _n, p=p: connect_once(context, p) for p in sides}, max(50, args.n // 4))
        clients = {p: Client(context, p) for p in sides}
        transacts = alternate({p: lambda n, p=p: transact_once(clients[p], n * 2 + (p == fronted_port))
                               for p in sides}, args.n)  # fmt: skip
        for client in clients.values():
            client.close()
    finally:
        if fronted is not None:
            fronted.stop()
        daemons.stop(root / "ovn")
        store.dispose()
        shutil.rmtree(root, ignore_errors=True)
    for what, got in (("connect + list_dbs", connects), ("NB transaction", transacts)):
        plain, front = median(got[direct]), median(got[fronted_port])
        row(f"{what} p50, ovsdb-server's pssl:", ms(plain), "(information)")
        row(f"{what} p50, through the front", ms(front), "(information)")
        row("  p90 direct / front", f"{ms(percentile(got[direct], 90))} / {ms(percentile(got[fronted_port], 90))}",
            "(information)")  # fmt: skip
        if what == "NB transaction":
            row("  the front's cost on an NB transaction p50", ms(front - plain), f"<= {ms(TARGET_TRANSACT)}",
                front - plain <= TARGET_TRANSACT)  # fmt: skip
        else:
            row("  the front's cost on a new connection p50", ms(front - plain), "(information)")


if __name__ == "__main__":
    main()
