"""`cloudnet ovn join` and `cloudnet ovn leave`: this server host's members of OVN's clustered NB and SB databases
(and its ovn-northd) on a host that runs no API server of its own (`serve`/`up --ovn-cluster` run them beside
the API).

Over SSL (the cloud's `serve --tls`), the member's certificate comes from a join token, as an agent's does
(`--join URL TOKEN`, agent/join.py): its key is made here and never leaves, the server signs it (checked against
the token's CA fingerprint) for this host's name and its --ovn-listen address, so no secret file is copied between
hosts and the certificate is recorded (revocable) like any host's; later starts run from <state>/join/. Other hosts'
clients then reach the member's databases through its TLS front (`cloudnet ovn front --crl-from`, a process of its
own, started again if it dies), which refuses what the CA's revocation list of the API servers lists (pki/crl.py)."""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from cloudnet import ovn_stack
from cloudnet.agent import join as joining
from cloudnet.agent.client import servers_of
from cloudnet.agent.run import renew_when_due
from cloudnet.cli.agent_command import join_or_load
from cloudnet.cli.errors import CliError
from cloudnet.cli.ovn_options import OvnCluster, OvnListen, cluster_members, listen_address
from cloudnet.config import DEFAULT_STATE_DIR
from cloudnet.ovn import cluster, daemons
from cloudnet.pki import tls, x509
from cloudnet.store.db import Store
from cloudnet.wire import logs

app = typer.Typer(help="OVN's clustered databases on this server host.", no_args_is_help=True)
StateDir = Annotated[Path, typer.Option(help="Where state lives (the members' files under <state-dir>/ovn/).")]
Join = Annotated[
    tuple[str, str] | None,
    typer.Option(metavar="URL TOKEN", help="Get this member's certificate from the cloud at URL (https) with a token "
                 "of `cloudnet host join-token NAME`: the clusters then run over SSL; later starts need neither."),
]  # fmt: skip
Servers = Annotated[str | None, typer.Option("--server", help="The API servers (URL,URL) the member's TLS front "
                                            "fetches the CA's revocation list from, and renewals go to (default: "
                                            "the one it joined)")]  # fmt: skip
HostName = Annotated[str | None, typer.Option("--host", help="This host's name, as the token names it "
                                              "(default: hostname; later starts: the joined one).")]  # fmt: skip


@app.command("join")
def join(ovn_cluster: OvnCluster = None, ovn_listen: OvnListen = None, state_dir: StateDir = DEFAULT_STATE_DIR,
         join: Join = None, host: HostName = None, server: Servers = None) -> None:  # fmt: skip
    """Run this host's NB and SB members (created by the first address of --ovn-cluster, joined by the others, or
    restarted on their files) and ovn-northd, until SIGTERM/SIGINT, which stops them (their files stay: a later
    join here rejoins); also ends when both members are gone (`cloudnet ovn leave`). Over SSL once this host has
    joined with a token (--join, now or earlier): then other hosts' clients reach the databases through a TLS front
    (ovn/front.py) that refuses the certificates the CA's revocation list (of the API servers) lists."""
    if ovn_cluster is None:
        raise CliError("cloudnet ovn join needs --ovn-cluster ADDR,ADDR,ADDR and --ovn-listen ADDR")
    local = str(listen_address(ovn_listen, "ovn", False))
    ssl = _ssl(state_dir, local, join, host)
    members = cluster.Members(local, cluster_members(ovn_cluster, ovn_listen), ssl, fronted=ssl is not None)
    servers = _servers(state_dir, server) if ssl is not None else []
    if members.ssl is None:
        typer.echo(f"warning: plain TCP between the members and to their clients at {local}: whoever reaches it "
                   "can rewrite the cloud's flows (join with a token for SSL)", err=True)  # fmt: skip
    rundir = state_dir / "ovn"
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    daemons.stop(rundir)  # (what a killed earlier run left, by its pidfiles)
    if members.ssl is not None:  # (renewed in place: the member's ovsdb-servers re-read their files on a change)
        context = tls.client_context(members.ssl.ca, members.ssl.cert, members.ssl.key)
        threading.Thread(target=renew_when_due, args=(state_dir, servers, context, stop, local), daemon=True,
                         name="cloudnet-renewal").start()  # fmt: skip
    certificate = _stamp(members.ssl)  # (before ovn-northd starts: a renewal from then on restarts it)
    reap: list[Callable[[], None]] = []
    try:
        if members.ssl is not None:  # (first: the other members reach this one's databases through it)
            reap = ovn_stack.spawn_member_front(rundir, local, members.ssl, servers)
        central = cluster.start(rundir, members)
        cluster.wait_joined(central)
        typer.echo(f"OVN cluster member at {members.local}: NB {central.nb_clients}, SB {central.sb_clients}\n"
                   f"  chassis: cloudnet agent --dataplane ovn --ovn-sb {central.sb_clients} ...")  # fmt: skip
        while not stop.wait(1.0):
            if not {"ovnnb_db", "ovnsb_db"} & set(daemons.pids(rundir)):
                typer.echo("this host's members are gone (left their clusters?): stopping")
                break
            if members.ssl is not None and daemons.FRONT not in daemons.pids(rundir):
                typer.echo("the databases' TLS front is gone (killed?): starting it again", err=True)
                reap += _front_again(rundir, local, members.ssl, servers)
            if _stamp(members.ssl) != certificate:  # (renewed: see cluster.restart_northd)
                try:
                    cluster.restart_northd(central)
                    certificate = _stamp(members.ssl)
                except daemons.OvnError as exc:  # (tried again at the next look)
                    typer.echo(f"ovn-northd did not start again with the renewed certificate: {exc}", err=True)
    except daemons.OvnError as exc:
        raise CliError(f"cannot run this host's cluster members: {exc}") from None
    finally:
        daemons.stop(rundir)
        for done in reap:
            done()


def _front_again(rundir: Path, local: str, ssl: daemons.Ssl, servers: list[str]) -> list[Callable[[], None]]:
    """The member's TLS front started again (without it no client of another host reaches these databases)."""
    try:
        return ovn_stack.spawn_member_front(rundir, local, ssl, servers)
    except daemons.OvnError as exc:  # (tried again at the next look)
        typer.echo(f"the TLS front did not start again: {exc}", err=True)
        return []


def _servers(state_dir: Path, given: str | None) -> list[str]:
    """The API servers of a member that joined: --server, else the one it joined."""
    saved = joining.load(state_dir)
    try:
        return servers_of(given or (saved.server if saved is not None else ""))
    except ValueError:
        raise CliError("no API server to fetch the CA's revocation list from: give --server URL") from None


def _ssl(state_dir: Path, local: str, join: tuple[str, str] | None, host: str | None) -> daemons.Ssl | None:
    """This member's key, certificate and the CA: from a join now (`join`), else from an earlier one; None (plain
    TCP) when this host never joined."""
    if join_or_load(state_dir, join, host or socket.gethostname(), host, ovn_member=local) is None:
        return None
    ca, cert, key, _secret = joining.Joined.files(state_dir)
    try:
        mine = x509.load_cert(cert)
    except x509.PkiError as exc:
        raise CliError(f"cannot read this host's certificate: {exc}") from None
    if not x509.names_address(mine, local):  # (an agent's join: a client certificate only)
        raise CliError(f"this host's certificate ({cert}) is not a cluster member's at {local}: join with a new "
                       "token (--join URL TOKEN) for one")  # fmt: skip
    return daemons.Ssl(key, cert, ca)


def _stamp(ssl: daemons.Ssl | None) -> tuple[int, int] | None:
    """Which certificate file is there now (renewals replace it whole: a new inode)."""
    if ssl is None:
        return None
    try:
        st = ssl.cert.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns


@app.command("leave")
def leave(state_dir: StateDir = DEFAULT_STATE_DIR) -> None:
    """This host's running NB and SB members leave their clusters for good (`cluster/leave`: the others forget
    them) and stop; their files are removed (a member that left cannot come back on them)."""
    rundir = state_dir / "ovn"
    if not {"ovnnb_db", "ovnsb_db"} <= set(daemons.pids(rundir)):
        raise CliError(f"no running cluster members under {rundir} (start them first: leaving needs the cluster)")
    try:
        cluster.leave(rundir)
    except daemons.OvnError as exc:
        raise CliError(f"cannot leave: {exc}") from None
    typer.echo("left OVN's NB and SB clusters")


@app.command("front", hidden=True)
def front(rundir: Annotated[Path, typer.Option()], address: Annotated[str, typer.Option()],
          cert: Annotated[Path, typer.Option()], key: Annotated[Path, typer.Option()],
          ca: Annotated[Path, typer.Option()], nb_port: int = daemons.NB_PORT, sb_port: int = daemons.SB_PORT,
          crl_from: Annotated[str | None, typer.Option(help="API servers (URL,URL) whose CRL is used instead of "
                                                       "the store")] = None) -> None:  # fmt: skip
    """The TLS front of the databases in RUNDIR, as `serve|up --tls` (the store's certificate list) and `ovn join`
    (the CA's CRL from the API servers) run it beside them (ovn_stack.spawn_front): until SIGTERM/SIGINT; SIGHUP:
    the certificate list read and the open connections checked now."""
    url = os.environ.get(ovn_stack.FRONT_DB_ENV)
    if not url and not crl_from:
        raise CliError(f"the front reads the store named by ${ovn_stack.FRONT_DB_ENV}, or the CRL of --crl-from")
    logs.setup()
    store = Store(url) if url and not crl_from else None
    servers = servers_of(crl_from) if crl_from else []
    try:
        fronted = ovn_stack.start_front(store, daemons.Ssl(key, cert, ca), rundir, address, (nb_port, sb_port),
                                        servers)  # fmt: skip
    except daemons.OvnError as exc:
        if store is not None:
            store.dispose()
        raise CliError(str(exc)) from None
    stop, poke = threading.Event(), threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: (stop.set(), poke.set()))
    signal.signal(signal.SIGHUP, lambda *_: poke.set())
    pidfile = rundir / f"{daemons.FRONT}.pid"
    x509.write_private(pidfile, f"{os.getpid()}\n".encode())  # (once it listens: the server waits for it)
    try:
        while not stop.is_set():
            poke.wait()
            poke.clear()
            if not stop.is_set():
                fronted.revoked()
    finally:
        fronted.stop()
        if store is not None:
            store.dispose()
        pidfile.unlink(missing_ok=True)
