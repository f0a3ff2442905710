"""OVN for `cloudnet up|serve --dataplane ovn`: NB/SB databases and ovn-northd under <state-dir>/ovn/ (or, with
--ovn-nb/--ovn-sb, existing ones; with --ovn-listen ADDR also on TCP there, for other hosts' chassis; with
--ovn-cluster, this host's members of the NB and SB Raft clusters: over SSL with --tls, as the listener), this
host's chassis for `up`, and the server's northbound writer. With --tls the databases' client port for other hosts
is the TLS front (ovn/front.py), which refuses a revoked host's certificate and closes its open connections."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import ssl as stdlib_ssl
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cloudnet.config import AgentConfig, ServerConfig
from cloudnet.metadata.peers import HostCertificates
from cloudnet.northbound.sync import NorthboundSync
from cloudnet.ovn import cluster, daemons, front, idl
from cloudnet.ovn.restarts import Restarts
from cloudnet.pki import cloud, crl, rotation, tls, x509
from cloudnet.services.hosts import host_join
from cloudnet.store.db import Store

log = logging.getLogger("cloudnet.ovn")
FRONT_DB_ENV = "CLOUDNET_OVN_FRONT_DB"  # (the store's URL for `cloudnet ovn front`: it may carry a password)
CRL_FILE = "ovn-front.crl"  # (in the run directory: the last CA's revocation list a member's front took)


@dataclass
class OvnStack:
    rundir: Path
    nb_url: str
    sb_url: str
    sync: NorthboundSync
    chassis: daemons.Chassis | None = None
    own_central: bool = False
    remote_sb: str | None = None  # the SB URL other hosts' chassis join (--ovn-listen; clustered: every member)
    stops: list[Callable[[], None]] = field(default_factory=list)  # (the TLS front's: spawn_front)

    def stop(self) -> None:
        self.sync.stop()
        if self.chassis is not None:
            daemons.stop(self.chassis.rundir, self.chassis.netns, self.chassis.bridges)
        if self.own_central:
            daemons.stop(self.rundir)
        for stop in self.stops:
            stop()


def _ssl(config: ServerConfig, store: Store) -> daemons.Ssl:
    """OVN's databases' key and certificate (made at every start, as the API's: the CA signs them for the listen
    address; recorded, as other servers' fronts let in recorded certificates only), and the CA: with --tls other
    hosts reach the databases through the TLS front, chassis with their own certificates."""
    assert config.ovn_listen is not None
    key = x509.new_key()
    cert = cloud.authority(config).server_cert([config.ovn_listen, "ovsdb"], key, client=True)
    host_join.record_own(store, cert)
    ssl = daemons.Ssl(config.pki_dir / "ovsdb.key", config.pki_dir / "ovsdb.crt", cloud.ca_file(config))
    x509.write_private(ssl.cert, x509.cert_pem(cert))  # (the certificate first: see agent/join.py's renew)
    x509.write_private(ssl.key, x509.key_pem(key))
    return ssl


def renew_ssl_if_due(config: ServerConfig, store: Store) -> bool:
    """Make the databases' certificate again once 2/3 of its lifetime is gone: ovsdb-server re-reads its key and
    certificate files when they change (OVS's stream-ssl compares them at each reconfiguration), so new
    connections get the new one and none is dropped; a cluster member's ovn-northd, which connects over SSL with
    it, is started again."""
    if not (config.tls and config.ovn_listen) or rotation.seconds_to_renewal(
        x509.load_cert(config.pki_dir / "ovsdb.crt")) > 0:  # fmt: skip
        return False
    ssl = _ssl(config, store)
    if config.ovn_cluster and config.ovn_listen:
        members = cluster.Members(config.ovn_listen, config.ovn_cluster, ssl, fronted=True)
        cluster.restart_northd(members.central(config.state_dir / "ovn"))
    return True


def start(config: ServerConfig, store: Store, agent: AgentConfig | None) -> OvnStack:
    """Start (or connect to) OVN and the northbound writer; with `agent`, also make this host a chassis (with the
    bridges of its uplinks, which its agent connects)."""
    rundir = config.state_dir / "ovn"
    if (config.ovn_nb is None) != (config.ovn_sb is None):
        raise daemons.OvnError("--ovn-nb and --ovn-sb go together (or neither: OVN's databases start here)")
    if config.ovn_listen and config.ovn_nb is not None:
        raise daemons.OvnError("--ovn-listen is for OVN's databases started here, not with --ovn-nb/--ovn-sb")
    # Daemons a killed earlier run of this state dir left (found by their pidfiles here, nothing else).
    daemons.stop(rundir)
    central: daemons.Central | None = None
    chassis: daemons.Chassis | None = None
    remote_sb: str | None = None
    ssl = _ssl(config, store) if config.tls and config.ovn_listen else None
    if config.ovn_listen and ssl is None:
        log.warning("OVN's databases listen on %s in plain TCP: whoever reaches it can rewrite the cloud's flows; "
                    "use --tls (SSL with the cloud's CA) or a trusted underlay", config.ovn_listen)  # fmt: skip
    # (first: a member's peers reach its databases through it while the cluster forms)
    stops = [] if ssl is None or config.ovn_nb is not None else spawn_front(config, store, ssl, rundir)
    try:
        if config.ovn_nb is not None and config.ovn_sb is not None:
            nb_url, sb_url = config.ovn_nb, config.ovn_sb
        elif config.ovn_cluster:
            assert config.ovn_listen is not None  # (the command line makes --ovn-listen one of the members)
            central = cluster.start(rundir, cluster.Members(config.ovn_listen, config.ovn_cluster, ssl, bool(stops)))
            nb_url, sb_url = central.nb_clients, central.sb_clients
            remote_sb = sb_url
            if ssl is not None:  # (the NB writer's IDL: the OVS library keeps one key and certificate per process)
                idl.use_ssl(ssl.key, ssl.cert, ssl.ca)
                if agent is not None:  # (this host's agent mirrors SB through the list too, in this process)
                    agent.key_file, agent.cert_file, agent.ca_file = ssl.key, ssl.cert, ssl.ca
        else:
            central = daemons.start_central(rundir, ssl=ssl)
            nb_url, sb_url = central.nb_url, central.sb_url
        if agent is not None:
            chassis = daemons.start_chassis(rundir, agent.host, sb_url, encap_ip=agent.encap_ip,
                                            encap_port=agent.encap_port,
                                            bridge_mappings=daemons.bridge_mappings(agent.uplinks),
                                            availability_zone=agent.availability_zone,
                                            ssl=central.ssl if central is not None else None)  # fmt: skip
        # (after the chassis: its encap address may be the one listened on, and members retry until it is there)
        if central is not None and central.cluster is not None:
            cluster.wait_joined(central)
        elif central is not None and config.ovn_listen and not stops:
            _nb, remote_sb = daemons.listen(central, config.ovn_listen, ssl=ssl)
        elif central is not None and config.ovn_listen and ssl is not None:
            remote_sb = _front_answers(central, config.ovn_listen, ssl)
    except BaseException:
        daemons.stop(rundir)
        for stop in stops:
            stop()
        raise
    gateways = [chassis.name] if chassis is not None else config.ovn_gateway_chassis
    look = None if central is None else Restarts.of_central(rundir).look  # (daemons started here only)
    sync = NorthboundSync(store, nb_url, gateways, look=look)
    sync.start()
    log.info("OVN: NB %s, SB %s%s", nb_url, sb_url, f", chassis {chassis.name}" if chassis is not None else "")
    return OvnStack(rundir, nb_url, sb_url, sync, chassis, central is not None, remote_sb, stops)


@dataclass
class Fronted:
    """A running TLS front: `revoked` checks its connections again at once, `stop` ends it."""

    revoked: Callable[[], None]
    stops: list[Callable[[], None]]

    def stop(self) -> None:
        for stop in self.stops:
            stop()


def start_front(store: Store | None, ssl: daemons.Ssl, rundir: Path, address: str,
                ports: tuple[int, int] = (daemons.NB_PORT, daemons.SB_PORT),
                crl_from: Sequence[str] = ()) -> Fronted:  # fmt: skip
    """The databases' TLS front on `address` (`ports`: NB's, SB's) to their sockets in `rundir`, in this process:
    the certificates the store lists for hosts let in, revoked ones refused (and at once when revoked by this
    process); without a store (a `cloudnet ovn join` member's), every certificate of the CA let in but those the
    CA's revocation list lists, fetched from the API servers `crl_from` with the databases' certificate (kept in
    CRL_FILE in `rundir`: pki/crl.py). The databases' certificate is re-read when its files change."""
    context = tls.server_context(tls.ServerFiles(ssl.cert, ssl.key, ssl.ca), stdlib_ssl.CERT_REQUIRED)
    reloader = rotation.Reloader(ssl.cert, ssl.key, [context])
    refusal: HostCertificates | crl.RevocationList
    refresh: Callable[[], object]
    if store is not None:
        refusal = HostCertificates(store)
        refresh = refusal.refresh
    else:
        fetching = tls.client_context(ssl.ca, ssl.cert, ssl.key)  # (renewed in place with the server's: reloader)
        reloader.contexts.append(fetching)
        refusal = crl.RevocationList(crl_from, fetching, ssl.ca, rundir / CRL_FILE)
        refresh = refusal.fetch
    refusal.start()
    routes = [front.Route(kind.upper(), address, port, rundir / f"ovn{kind}_db.sock")
              for kind, port in zip(("nb", "sb"), ports, strict=True)]  # fmt: skip
    fronting = front.Front(context, routes, refusal, tick=reloader.check)
    try:
        fronting.start()
    except OSError as exc:
        refusal.stop()
        raise daemons.OvnError(f"OVN's TLS front cannot listen on {address}: {exc.strerror or exc}") from None

    def revoked() -> None:
        refresh()
        fronting.sweep_now()

    unhook = host_join.on_revoke(revoked)
    log.info("OVN's databases: TLS front on %s, ports %d (NB) and %d (SB): revoked host certificates refused (%s)",
             address, *ports, "the store's list" if store is not None else "the CA's CRL")  # fmt: skip
    return Fronted(revoked, [unhook, fronting.stop, refusal.stop])


def spawn_front(config: ServerConfig, store: Store, ssl: daemons.Ssl, rundir: Path,
                timeout: float = 20.0) -> list[Callable[[], None]]:  # fmt: skip
    """The TLS front as a process of its own beside the databases (`cloudnet ovn front`, pidfile FRONT in `rundir`:
    daemons.stop ends it with them): a killed server leaves its members serving clients, as ovsdb-server's own
    `pssl:` did, or a member that leads its cluster would be out of every client's reach. Its log lines go where
    this process's go; `store`'s URL reaches it in its environment (never on a command line). Returns once it
    listens; what unhooks and reaps it (after daemons.stop)."""
    assert config.ovn_listen is not None
    return _spawn(rundir, config.ovn_listen, ssl, [], {FRONT_DB_ENV: store.url}, timeout)


def spawn_member_front(rundir: Path, address: str, ssl: daemons.Ssl, servers: Sequence[str],
                       timeout: float = 20.0) -> list[Callable[[], None]]:  # fmt: skip
    """A `cloudnet ovn join` member's TLS front, as `spawn_front` (for the same reason a process of its own), with
    the CA's revocation list of the API servers `servers` instead of a store."""
    return _spawn(rundir, address, ssl, ["--crl-from", ",".join(servers)], {}, timeout)


def _spawn(rundir: Path, address: str, ssl: daemons.Ssl, extra: list[str], env: dict[str, str],
           timeout: float) -> list[Callable[[], None]]:  # fmt: skip
    argv = [sys.executable, "-c", "from cloudnet.cli.main import app; app()", "ovn", "front", "--rundir",
            str(rundir), "--address", address, "--cert", str(ssl.cert), "--key", str(ssl.key), "--ca",
            str(ssl.ca), *extra]  # fmt: skip
    proc = subprocess.Popen(argv, env={**os.environ, **env}, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout
    while daemons.pids(rundir).get(daemons.FRONT) != proc.pid:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise daemons.OvnError(f"OVN's TLS front did not start (exit status {proc.returncode}; its reason is "
                                   "logged above)")  # fmt: skip
        time.sleep(0.02)
    unhook = host_join.on_revoke(functools.partial(poke_front, rundir))

    def reap() -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)

    return [unhook, reap]


def poke_front(rundir: Path) -> None:
    """Have the front of `rundir` read the certificate list and check its connections now (SIGHUP)."""
    pid = daemons.pids(rundir).get(daemons.FRONT)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGHUP)


def _front_answers(central: daemons.Central, address: str, ssl: daemons.Ssl) -> str:
    """The SB URL other hosts dial, once NB and SB answer there through the front."""
    nb, sb = (daemons.tcp_remotes(port, address, ssl=True)[1] for port in (daemons.NB_PORT, daemons.SB_PORT))
    if (silent := daemons.unanswered(central.rundir, [nb, sb], None, 10.0, ssl)) is not None:
        raise daemons.OvnError(f"OVN's databases do not answer on {silent} through the TLS front; see "
                               f"{central.rundir}/ovn*_db.log")  # fmt: skip
    return sb
