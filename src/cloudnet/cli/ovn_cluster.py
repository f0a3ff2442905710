"""`cloudnet ovn join` and `cloudnet ovn leave`: this server host's members of OVN's clustered NB and SB databases
(and its ovn-northd) on a host that runs no API server of its own (`serve`/`up --ovn-cluster` run them beside
the API)."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

from cloudnet.cli.errors import CliError
from cloudnet.cli.ovn_options import OvnCluster, OvnListen, cluster_members, listen_address
from cloudnet.config import DEFAULT_STATE_DIR
from cloudnet.ovn import cluster, daemons

app = typer.Typer(help="OVN's clustered databases on this server host.", no_args_is_help=True)
StateDir = Annotated[Path, typer.Option(help="Where state lives (the members' files under <state-dir>/ovn/).")]


@app.command("join")
def join(ovn_cluster: OvnCluster = None, ovn_listen: OvnListen = None, state_dir: StateDir = DEFAULT_STATE_DIR) -> None:
    """Run this host's NB and SB members (created by the first address of --ovn-cluster, joined by the others, or
    restarted on their files) and ovn-northd, until SIGTERM/SIGINT, which stops them (their files stay: a later
    join here rejoins); also ends when both members are gone (`cloudnet ovn leave`)."""
    if ovn_cluster is None:
        raise CliError("cloudnet ovn join needs --ovn-cluster ADDR,ADDR,ADDR and --ovn-listen ADDR")
    members = cluster.Members(str(listen_address(ovn_listen, "ovn", False)), cluster_members(ovn_cluster, ovn_listen))
    rundir = state_dir / "ovn"
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    daemons.stop(rundir)  # (what a killed earlier run left, by its pidfiles)
    try:
        central = cluster.start(rundir, members)
        cluster.wait_joined(central)
        typer.echo(f"OVN cluster member at {members.local}: NB {central.nb_clients}, SB {central.sb_clients}\n"
                   f"  chassis: cloudnet agent --dataplane ovn --ovn-sb {central.sb_clients} ...")  # fmt: skip
        while not stop.wait(1.0):
            if not {"ovnnb_db", "ovnsb_db"} & set(daemons.pids(rundir)):
                typer.echo("this host's members are gone (left their clusters?): stopping")
                break
    except daemons.OvnError as exc:
        raise CliError(f"cannot run this host's cluster members: {exc}") from None
    finally:
        daemons.stop(rundir)


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
