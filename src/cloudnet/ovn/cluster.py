"""OVN's NB and SB databases as Raft clusters across server hosts, as ovn-ctl's --db-nb-cluster-* options run them.

Each server host runs one member of each cluster: an ovsdb-server on a clustered database file in its run directory
(ovnnb_db.db, ovnsb_db.db), Raft between members on RAFT_PORT, clients on NB_PORT/SB_PORT at every member. Every
host is given the same member list (`--ovn-cluster A,B,C`, this host's own address `--ovn-listen`): the first
address creates the clusters (`ovsdb-tool create-cluster`) when its file does not exist yet, every other member joins
them (`ovsdb-tool join-cluster`, naming all the other members: whichever is up lets it in). A file that exists is
this member's from an earlier run: the server starts on it and catches up, nothing is created or joined again. A
first member without its file while another member is in a running cluster joins that one instead of creating a
second (its files were lost: a new cluster would fork the cloud), and a member that joined afresh takes the earlier
server of its address out of the cluster (`cluster/kick`), which would otherwise count towards the majority.

Clients get the whole list (`clients`) and follow the leader: ovn-northd (one per server host; OVN's own lock keeps
one active), ovn-controller, and cloudnet's IDLs (the ovs library's IDL is leader-only by default: it moves on to
the next member when the one it reached is not the leader, and when its leader steps down).

Plain TCP, or SSL with `Members.ssl` (this member's key and certificate and the cloud's CA, as ovn-ctl's
--db-nb-cluster-local-proto=ssl/--db-nb-cluster-remote-proto=ssl with --ovn-nb-db-ssl-key/cert/ca-cert): Raft on
`ssl:ADDR:6643/6644`, clients on `pssl:6641/6642:ADDR`, and every client of the cluster (ovn-northd, the tools used
here, chassis, cloudnet's IDLs) with a certificate of the CA. OVS's stream-ssl verifies the peer's chain against the
CA (both ways: a member or client without a certificate of that CA gets no session) but not the host name or
address the certificate names: any certificate the cloud's CA signed is let in, so the CA signs for hosts of the
cloud only (join tokens), and member certificates name their address for the operator's sake, not OVS's.
`connect`/`passive` are the one place these remotes are spelled. Under `cloudnet serve|up --tls` the members'
client remotes are their unix sockets only and the server's TLS front (front.py) takes the clients' port: it
refuses revoked certificates, which OVS's SSL cannot, and so under `cloudnet ovn join` over SSL (its front reads
the CA's CRL of the API servers); Raft stays direct (see front.py for why).
"""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from cloudnet.ovn import daemons
from cloudnet.ovn.daemons import NB_PORT, OVN_SCHEMAS, SB_PORT, Central, OvnError, Ssl, run, ssl_args

KINDS = ("nb", "sb")
RAFT_PORT = {"nb": 6643, "sb": 6644}  # OVN's own
CLIENT_PORT = {"nb": NB_PORT, "sb": SB_PORT}
DATABASE = {"nb": "OVN_Northbound", "sb": "OVN_Southbound"}
GLOBAL = {"nb": "NB_Global", "sb": "SB_Global"}


def connect(port: int, address: str, ssl: bool = False) -> str:
    """The remote a client (or a Raft peer) dials at `address`:`port` (`ssl:` with `ssl`)."""
    return daemons.tcp_remotes(port, address, ssl)[1]


def passive(port: int, address: str, ssl: bool = False) -> str:
    """The remote a member listens on at `address`:`port` (`pssl:` with `ssl`)."""
    return daemons.tcp_remotes(port, address, ssl)[0]


@dataclass(frozen=True)
class Members:
    """A cluster's members (their underlay addresses, the creator first) as seen from the one at `local`."""

    local: str
    addresses: tuple[str, ...]
    ssl: Ssl | None = None  # this member's key and certificate, the cloud's CA: Raft and clients over SSL
    fronted: bool = False  # clients of other hosts through this server's TLS front (front.py), not on pssl: here

    @property
    def creates(self) -> bool:
        return self.local == self.addresses[0]

    def clients(self, kind: str) -> str:
        """The comma-separated remote list every client of the `kind` database is given."""
        return ",".join(connect(CLIENT_PORT[kind], a, self.ssl is not None) for a in self.addresses)

    def raft(self, kind: str, address: str) -> str:
        return connect(RAFT_PORT[kind], address, self.ssl is not None)

    def central(self, rundir: Path) -> Central:
        """The Central whose URLs are the lists (for ovn-northd and other clients)."""
        return Central(rundir, cluster=(self.clients("nb"), self.clients("sb")), ssl=self.ssl)


def _name(kind: str) -> str:
    return f"ovn{kind}_db"


def start_member(rundir: Path, kind: str, members: Members, netns: str | None = None) -> None:
    """This host's member of the `kind` cluster: its file created (first member), joined (others) or kept (any
    member's second start), then its ovsdb-server, which catches up with the cluster by itself."""
    path = rundir / f"{_name(kind)}.db"
    local = members.raft(kind, members.local)
    if path.exists():
        try:
            run(rundir, ["ovsdb-tool", "db-is-clustered", str(path)])
        except OvnError:
            raise OvnError(f"{path} is a standalone database, not a member of a cluster: move it away to join "
                           "(its rows come back from the cluster)") from None  # fmt: skip
    elif members.creates and not _elsewhere(rundir, kind, members, netns):
        run(rundir, ["ovsdb-tool", "create-cluster", str(path), str(OVN_SCHEMAS / f"ovn-{kind}.ovsschema"), local])
    else:  # (also the first member whose files were lost while the others kept the cluster: never a second one)
        others = [members.raft(kind, a) for a in members.addresses if a != members.local]
        run(rundir, ["ovsdb-tool", "join-cluster", str(path), DATABASE[kind], local, *others])
    remotes = [f"punix:{rundir / _name(kind)}.sock", f"db:{DATABASE[kind]},{GLOBAL[kind]},connections"]
    if not members.fronted:  # (fronted: other hosts' clients reach the socket through the TLS front, front.py)
        remotes.append(passive(CLIENT_PORT[kind], members.local, members.ssl is not None))
    # (daemons' own: the same files and flags; its key, certificate and CA serve Raft and clients both)
    daemons._ovsdb_server(rundir, _name(kind), path, remotes, netns, members.ssl)


def _elsewhere(rundir: Path, kind: str, members: Members, netns: str | None) -> bool:
    """Whether another listed member is in a running `kind` cluster already (connected to it: a member that is
    still waiting to join one is not)."""
    for address in members.addresses:
        if address != members.local:
            try:
                run(rundir, ["ovsdb-client", *ssl_args(members.ssl), "--timeout=1", "wait",
                             connect(CLIENT_PORT[kind], address, members.ssl is not None), DATABASE[kind],
                             "connected"], netns, timeout=5)  # fmt: skip
                return True
            except OvnError:
                continue
    return False


def start(rundir: Path, members: Members, netns: str | None = None) -> Central:
    """This host's NB and SB members (not waited for: see `wait_joined`); the Central whose URLs are the lists."""
    rundir.mkdir(parents=True, exist_ok=True, mode=0o700)
    for kind in KINDS:
        start_member(rundir, kind, members, netns)
    return members.central(rundir)


def wait_joined(central: Central, netns: str | None = None, timeout: float = 60.0) -> None:
    """Until both members are connected to their clusters (a joining one: taken in by a leader), an earlier server
    of this address taken out; then NB and SB initialised (idempotent: any member may do it, through the leader)
    and this host's ovn-northd started."""
    for kind in KINDS:
        socket = f"unix:{central.rundir / _name(kind)}.sock"
        try:
            run(central.rundir, ["ovsdb-client", f"--timeout={max(1, int(timeout))}", "wait", socket,
                                 DATABASE[kind], "connected"], netns, timeout=timeout + 5)  # fmt: skip
        except OvnError as exc:
            raise OvnError(f"this host's {DATABASE[kind]} member did not join its cluster in {timeout:g} s (are the "
                           f"other members up?): {exc}; see {central.rundir}/{_name(kind)}.log") from None  # fmt: skip
        _kick_stale(central.rundir, kind, netns)
    for kind in KINDS:  # (through this member's own socket, which hands the write on to the leader: no wire, and no
        # one-shot pass over the list, which fails when the members it tries first are not listening yet)
        run(central.rundir, [f"ovn-{kind}ctl", f"--db=unix:{central.rundir / _name(kind)}.sock", "--no-leader-only",
                             "--timeout=20", "init"], netns, timeout=25)  # fmt: skip
    daemons.start_northd(central, netns)


def restart_northd(central: Central, netns: str | None = None, timeout: float = 5.0) -> None:
    """This host's ovn-northd again, as after a renewal of the certificate it connects with: ovsdb-server re-reads
    its key and certificate files when they change, ovn-northd loads them once (another host's ovn-northd takes
    OVN's lock meanwhile)."""
    pid = daemons.pids(central.rundir).get("ovn-northd")
    if pid is not None:
        for sig in (signal.SIGTERM, signal.SIGKILL):  # (gone before the next starts: it holds the pidfile)
            if daemons.alive(pid):
                os.kill(pid, sig)
                daemons._wait([pid], timeout)
    daemons.start_northd(central, netns)


def _kick_stale(rundir: Path, kind: str, netns: str | None) -> None:
    """Take out of the cluster an earlier server of this host's address (its files were lost and it joined afresh
    as a new server): it would count towards the majority for ever, never to answer again."""
    text = status(rundir, kind, netns)
    me, mine = _field(text, "Server ID").split()[0], _field(text, "Address")
    for sid, address in servers(text).items():
        if address == mine and sid != me:
            ctl = rundir / f"{_name(kind)}.ctl"
            run(rundir, ["ovs-appctl", "-t", str(ctl), "cluster/kick", DATABASE[kind], sid], netns, timeout=5)


def status(rundir: Path, kind: str, netns: str | None = None) -> str:
    """`cluster/status` of this host's `kind` member (its role, term, leader, the servers it knows)."""
    ctl = rundir / f"{_name(kind)}.ctl"
    return run(rundir, ["ovs-appctl", "-t", str(ctl), "cluster/status", DATABASE[kind]], netns, timeout=5)


def role(rundir: Path, kind: str, netns: str | None = None) -> str:
    """'leader', 'follower', 'candidate' (or '' when status says none)."""
    return _field(status(rundir, kind, netns), "Role")


def servers(text: str) -> dict[str, str]:
    """The Servers section of a `cluster/status` text: server id -> its Raft address."""
    found = {}
    for line in text.split("Servers:", 1)[1].splitlines() if "Servers:" in text else []:
        parts = line.split()  # "588b (588b at tcp:100.64.0.1:6643) (self) next_index=2 match_index=6"
        if len(parts) >= 4 and parts[2] == "at":
            found[parts[0]] = parts[3].rstrip(")")
    return found


def _field(text: str, name: str) -> str:
    found = re.search(rf"^{name}: (.*)$", text, re.MULTILINE)
    return found.group(1).strip() if found else ""


def leave(rundir: Path, netns: str | None = None, timeout: float = 30.0) -> None:
    """This host's members leave their clusters for good (`cluster/leave`; the others forget them), then stop."""
    for kind in KINDS:
        ctl = rundir / f"{_name(kind)}.ctl"
        run(rundir, ["ovs-appctl", "-t", str(ctl), "cluster/leave", DATABASE[kind]], netns, timeout=5)
    deadline = time.monotonic() + timeout
    for kind in KINDS:
        while "Status: left cluster" not in _status_or_gone(rundir, kind, netns):
            if time.monotonic() > deadline:
                raise OvnError(f"this host's {DATABASE[kind]} member did not leave its cluster in {timeout:g} s")
            time.sleep(0.1)
    daemons.stop(rundir, netns)
    for kind in KINDS:  # (a file that left can never rejoin: a later start here joins afresh)
        (rundir / f"{_name(kind)}.db").unlink(missing_ok=True)


def _status_or_gone(rundir: Path, kind: str, netns: str | None) -> str:
    try:
        return status(rundir, kind, netns)
    except OvnError:
        return "Status: left cluster"  # (a member that has left may exit: gone is left)
