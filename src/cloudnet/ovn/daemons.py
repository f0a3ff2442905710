"""Start and stop OVN's daemons in one run directory, as ../shared/recipes/ovn-start.sh does by hand.

Everything lives in `rundir`: the databases (ovnnb_db.db, ovnsb_db.db, conf.db), their sockets (ovnnb_db.sock,
ovnsb_db.sock, db.sock), logs, pidfiles and control sockets, so `ovn-nbctl --db=unix:<rundir>/ovnnb_db.sock show`
works there and a stop ends exactly the processes whose pidfiles are in it. Daemons are started detached (OVS's
--detach returns once the daemon is ready to serve) and stopped by pid: SIGTERM, then SIGKILL after a deadline.

ovs-vswitchd uses the userspace ("netdev") datapath unless the openvswitch kernel module is loaded: its bridges
are then kernel tap devices of the network namespace it runs in, so one chassis per namespace (tests run theirs in
a namespace of their own). `exit --cleanup` removes those devices; a vswitchd that had to be killed leaves them,
and the stop deletes them.

Geneve between chassis on the userspace datapath: ovs-vswitchd encapsulates itself and sends the tunnel packet out of
the OVS bridge that holds the encap address (its own route table, read from the kernel's, and its own ARP cache), so
the chassis' underlay interface becomes the port of a bridge `br-encap` carrying `encap_ip` (taken off the interface
if it was there: the kernel must route the tunnel's peers through the bridge). With the kernel module the kernel
tunnels, and the address simply goes on the interface.

Other hosts' chassis reach the SB database (and a remote server the NB database) over TCP: `listen` adds
`ptcp:6641:ADDR` / `ptcp:6642:ADDR` remotes to the running databases, on that one address, once it exists here (a
chassis started with `encap_port` may be what puts it there). Plain TCP, as OVN's own recipes use: anyone who
reaches those ports can rewrite the databases, so the address must be on a trusted underlay. With `ssl` (the
cloud's CA, a certificate for the databases: `cloudnet up|serve --tls`) the remotes are `pssl:` instead: only a
peer with a certificate the CA signed gets an answer, and chassis connect with theirs (`ovs-vsctl set-ssl`).
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

OVN_SCHEMAS = Path("/usr/share/ovn")
VSWITCH_SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
DETACH = ["--detach", "--no-chdir", "-vconsole:off"]
# Pidfiles of what a run directory may hold, in the order a stop ends them (the chassis first, its DB last).
FRONT = "ovn-front"  # the databases' TLS front (front.py), a process of cloudnet's beside them
PIDFILES = ("ovn-controller", "ovs-vswitchd", "ovsdb-server", "ovn-northd", FRONT, "ovnsb_db", "ovnnb_db")
INTEGRATION_BRIDGE = "br-int"
ENCAP_BRIDGE = "br-encap"
NB_PORT, SB_PORT = 6641, 6642  # OVN's own
IFNAMSIZ = 15  # (a userspace-datapath bridge is a tap device: its name is an interface name)


def provider_bridge(physnet: str) -> str:
    """The bridge a chassis' `ovn-bridge-mappings` names for physical network `physnet` (--uplink PHYSNET:IFACE):
    br-PHYSNET, or br- and a digest of the name when that would not be a short plain interface name."""
    name = f"br-{physnet}"
    if len(name) <= IFNAMSIZ and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", physnet):
        return name
    return "br-" + hashlib.sha256(physnet.encode()).hexdigest()[: IFNAMSIZ - 3]


def bridge_mappings(uplinks: dict[str, str]) -> dict[str, str]:
    """{physical network: its bridge} of a host's uplinks ({physical network: interface})."""
    return {physnet: provider_bridge(physnet) for physnet in uplinks}


class OvnError(RuntimeError):
    """An OVN command or daemon failed; the message carries its stderr."""


@dataclass(frozen=True)
class Ssl:
    """A private key, its certificate, and the CA certificate the peer's must chain to (OVS's -p/-c/-C)."""

    key: Path
    cert: Path
    ca: Path

    @property
    def args(self) -> list[str]:
        return [f"--private-key={self.key}", f"--certificate={self.cert}", f"--ca-cert={self.ca}"]


def ssl_args(ssl: Ssl | None) -> list[str]:
    return [] if ssl is None else ssl.args


@dataclass(frozen=True)
class Central:
    """NB and SB databases (one standalone ovsdb-server each, or this host's members of clusters: cluster.py) and
    ovn-northd."""

    rundir: Path
    cluster: tuple[str, str] | None = None  # clustered: the (NB, SB) remote lists of every member (cluster.py)
    ssl: Ssl | None = None  # what ovn-northd connects with (a cluster over SSL)

    @property
    def nb_clients(self) -> str:
        """What clients of NB dial: this host's socket, or every member of the cluster (they follow the leader)."""
        return self.cluster[0] if self.cluster else self.nb_url

    @property
    def sb_clients(self) -> str:
        return self.cluster[1] if self.cluster else self.sb_url

    @property
    def nb_url(self) -> str:
        return f"unix:{self.rundir / 'ovnnb_db.sock'}"

    @property
    def sb_url(self) -> str:
        return f"unix:{self.rundir / 'ovnsb_db.sock'}"


@dataclass(frozen=True)
class Chassis:
    """One hypervisor: its Open_vSwitch database, ovs-vswitchd and ovn-controller."""

    rundir: Path
    name: str
    netns: str | None = None
    bridges: tuple[str, ...] = field(default=(INTEGRATION_BRIDGE,))

    @property
    def ovs_url(self) -> str:
        return f"unix:{self.rundir / 'db.sock'}"


def datapath_type() -> str:
    """ "system" with the openvswitch kernel module loaded, else the userspace datapath."""
    return "system" if Path("/sys/module/openvswitch").exists() else "netdev"


def _env(rundir: Path) -> dict[str, str]:
    env = dict(os.environ)
    for prefix in ("OVS", "OVN"):
        for kind in ("RUNDIR", "LOGDIR", "DBDIR"):
            env[f"{prefix}_{kind}"] = str(rundir)
    # No glibc fastbins: a malloc of 1 KiB or more first merges them all (malloc_consolidate was ~13% of ovn-northd's
    # and the SB server's CPU writing 40,000 logical flows); without them (tcache still keeps small chunks) those
    # used 12-20% less CPU (bench/ovn_lb_placement.py's site, interleaved A/B).
    env["GLIBC_TUNABLES"] = ":".join(t for t in (env.get("GLIBC_TUNABLES"), "glibc.malloc.mxfast=0") if t)
    return env


def run(rundir: Path, argv: Sequence[str], netns: str | None = None, timeout: float = 15.0) -> str:
    """One OVS/OVN command with the run directory's environment (in `netns` if given); its stdout."""
    full = (["ip", "netns", "exec", netns] if netns else []) + list(argv)
    try:
        done = subprocess.run(full, env=_env(rundir), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise OvnError(f"{argv[0]} did not finish within {timeout:g} s") from None
    if done.returncode != 0:
        raise OvnError(f"{' '.join(argv[:2])} failed: {done.stderr.strip()[-500:]}")
    return done.stdout


def _database(rundir: Path, name: str, schema: Path) -> Path:
    """The database file, created from the schema, or converted when the packages brought a newer schema."""
    path = rundir / name
    if not path.exists():
        run(rundir, ["ovsdb-tool", "create", str(path), str(schema)])
    elif run(rundir, ["ovsdb-tool", "needs-conversion", str(path), str(schema)]).strip() == "yes":
        run(rundir, ["ovsdb-tool", "convert", str(path), str(schema)])
    return path


def _ovsdb_server(rundir: Path, name: str, db: Path, remotes: list[str], netns: str | None,
                  ssl: Ssl | None = None) -> None:  # fmt: skip
    run(rundir, ["ovsdb-server", *DETACH, f"--pidfile={rundir / name}.pid", f"--log-file={rundir / name}.log",
                 f"--unixctl={rundir / name}.ctl", *[f"--remote={r}" for r in remotes], *ssl_args(ssl), str(db)],
        netns)  # fmt: skip


def start_central(rundir: Path, *, nb_tcp: str | None = None, sb_tcp: str | None = None,
                  netns: str | None = None, ssl: Ssl | None = None) -> Central:  # fmt: skip
    """NB/SB ovsdb-servers on unix sockets in `rundir` (plus `ptcp:PORT:ADDR` remotes if given) and ovn-northd;
    `ssl`: the databases' key, certificate and CA, for `pssl:` remotes (`listen`)."""
    rundir.mkdir(parents=True, exist_ok=True, mode=0o700)
    central = Central(rundir)
    for kind, tcp, table in (("nb", nb_tcp, "OVN_Northbound,NB_Global"), ("sb", sb_tcp, "OVN_Southbound,SB_Global")):
        name = f"ovn{kind}_db"
        db = _database(rundir, f"{name}.db", OVN_SCHEMAS / f"ovn-{kind}.ovsschema")
        remotes = [f"punix:{rundir / name}.sock", f"db:{table},connections", *([tcp] if tcp else [])]
        _ovsdb_server(rundir, name, db, remotes, netns, ssl)
    run(rundir, ["ovn-nbctl", f"--db={central.nb_url}", "init"], netns)
    run(rundir, ["ovn-sbctl", f"--db={central.sb_url}", "init"], netns)
    start_northd(central, netns)
    return central


def start_northd(central: Central, netns: str | None = None) -> None:
    """ovn-northd between the central's NB and SB (also to restart one that died: it recomputes SB from NB)."""
    rundir = central.rundir
    run(rundir, ["ovn-northd", *DETACH, f"--pidfile={rundir / 'ovn-northd.pid'}",
                 f"--log-file={rundir / 'ovn-northd.log'}", f"--ovnnb-db={central.nb_clients}",
                 f"--ovnsb-db={central.sb_clients}", *ssl_args(central.ssl)], netns)  # fmt: skip


def tcp_remotes(port: int, address: str, ssl: bool = False) -> tuple[str, str]:
    """(passive, active) OVSDB remotes of `address`:`port`: `ptcp:PORT:ADDR` to listen, `tcp:ADDR:PORT` to connect
    (an IPv6 address in brackets); `pssl:`/`ssl:` with `ssl`."""
    ip = ipaddress.ip_address(address)
    host = f"[{ip}]" if ip.version == 6 else str(ip)
    kind = "ssl" if ssl else "tcp"
    return f"p{kind}:{port}:{host}", f"{kind}:{host}:{port}"


def listen(central: Central, address: str, netns: str | None = None, timeout: float = 10.0,
           ssl: Ssl | None = None) -> tuple[str, str]:  # fmt: skip
    """Make the running NB and SB databases also listen on TCP at `address` (NB_PORT, SB_PORT; SSL with `ssl`, the
    central's own, which it was started with); returns the (NB, SB) URLs other hosts use, once both answer there
    (else OvnError, the remotes taken back)."""
    remotes = [(central.rundir / f"{name}.ctl", *tcp_remotes(port, address, ssl is not None))
               for name, port in (("ovnnb_db", NB_PORT), ("ovnsb_db", SB_PORT))]  # fmt: skip
    for ctl, passive, _active in remotes:
        run(central.rundir, ["ovs-appctl", "-t", str(ctl), "ovsdb-server/add-remote", passive], netns)
    # (ovsdb-server retries a listen that failed, with a backoff)
    if (silent := unanswered(central.rundir, [active for _c, _p, active in remotes], netns, timeout, ssl)) is not None:
        for ctl, passive, _active in remotes:
            run(central.rundir, ["ovs-appctl", "-t", str(ctl), "ovsdb-server/remove-remote", passive], netns)
        raise OvnError(f"OVN's databases do not answer on {silent} (is {address} an address of this host?); see "
                       f"{central.rundir}/ovn*_db.log")  # fmt: skip
    return remotes[0][2], remotes[1][2]


def unanswered(rundir: Path, actives: Sequence[str], netns: str | None, timeout: float,
               ssl: Ssl | None) -> str | None:  # fmt: skip
    """The first of `actives` (URLs a client dials) that did not answer `list-dbs` within `timeout`, or None."""
    deadline = time.monotonic() + timeout
    for active in actives:
        while True:
            try:
                run(rundir, ["ovsdb-client", *ssl_args(ssl), "list-dbs", active], netns, timeout=5)
                break
            except OvnError:
                if time.monotonic() > deadline:
                    return active
                time.sleep(0.1)
    return None


GATEWAY_OPTION, ZONES_OPTION = "enable-chassis-as-gw", "availability-zones="


def cms_options(availability_zone: str | None, gateway: bool, current: str = "") -> str:
    """A chassis' `ovn-cms-options` as Neutron's OVN deployments set them (neutron/common/ovn/utils.py reads them):
    `enable-chassis-as-gw` on one with uplinks (cloudnet makes such hosts gateway chassis), and
    `availability-zones=NAME` (Neutron lists zones from it, ':'-separated; a cloudnet host has one); the other
    options of `current` (an operator's) kept."""
    kept = [o for o in (o.strip() for o in current.split(",")) if o and o != GATEWAY_OPTION
            and not o.startswith(ZONES_OPTION)]  # fmt: skip
    options = ([GATEWAY_OPTION] if gateway else []) + kept
    return ",".join(options + ([ZONES_OPTION + availability_zone] if availability_zone else []))


def start_chassis(rundir: Path, name: str, sb_remote: str, *, encap_ip: str = "127.0.0.1", netns: str | None = None,
                  bridge_mappings: dict[str, str] | None = None, encap_port: tuple[str, int] | None = None,
                  timeout: float = 10.0, ssl: Ssl | None = None,
                  availability_zone: str | None = None) -> Chassis:  # fmt: skip
    """This host's Open_vSwitch database, ovs-vswitchd with the integration bridge, and ovn-controller joined to the
    SB database at `sb_remote`; returns once the chassis has registered there. `encap_port`: (interface, prefix
    length) of the underlay the other chassis are reached through, given `encap_ip` here (see the module's doc).
    `ssl`: this host's key and certificate, and the CA, for an `ssl:` SB remote (`ovs-vsctl set-ssl`: ovn-controller
    reads them from its Open_vSwitch database). `availability_zone`: the chassis' zone in `ovn-cms-options`
    (cms_options)."""
    rundir.mkdir(parents=True, exist_ok=True, mode=0o700)
    dp = datapath_type()
    mappings = bridge_mappings or {}
    tunnel = (ENCAP_BRIDGE,) if encap_port and dp == "netdev" else ()
    chassis = Chassis(rundir, name, netns, (INTEGRATION_BRIDGE, *sorted(set(mappings.values())), *tunnel))
    db = _database(rundir, "conf.db", VSWITCH_SCHEMA)
    _ovsdb_server(rundir, "ovsdb-server", db, [f"punix:{rundir / 'db.sock'}"], netns)
    vsctl = ["ovs-vsctl", f"--db={chassis.ovs_url}", "--timeout=10"]
    run(rundir, [*vsctl, "--no-wait", "init"], netns)
    run(rundir, ["ovs-vswitchd", *DETACH, f"--pidfile={rundir / 'ovs-vswitchd.pid'}",
                 f"--log-file={rundir / 'ovs-vswitchd.log'}", chassis.ovs_url], netns)  # fmt: skip
    bridges = ["--", "--may-exist", "add-br", INTEGRATION_BRIDGE, "--", "set", "Bridge", INTEGRATION_BRIDGE,
               f"datapath_type={dp}", "fail-mode=secure", "other-config:disable-in-band=true"]  # fmt: skip
    for bridge in chassis.bridges[1:]:
        bridges += ["--", "--may-exist", "add-br", bridge, "--", "set", "Bridge", bridge, f"datapath_type={dp}"]
    if tunnel and encap_port:
        bridges += ["--", "--may-exist", "add-port", ENCAP_BRIDGE, encap_port[0]]
    ids = {"system-id": name, "hostname": name, "ovn-remote": sb_remote, "ovn-encap-type": "geneve",
           "ovn-encap-ip": encap_ip, "ovn-bridge": INTEGRATION_BRIDGE, "ovn-bridge-datapath-type": dp,
           "ovn-bridge-mappings": ",".join(f"{k}:{v}" for k, v in sorted(mappings.items())),
           "ovn-cms-options": cms_options(availability_zone, bool(mappings))}  # fmt: skip
    settings = [f'external_ids:{k}="{v}"' for k, v in ids.items() if v]
    run(rundir, [*vsctl, *bridges, "--", "set", "Open_vSwitch", ".", *settings], netns)
    if ssl is not None:
        run(rundir, [*vsctl, "set-ssl", str(ssl.key), str(ssl.cert), str(ssl.ca)], netns)
    if encap_port:
        port, prefixlen = encap_port
        device = ENCAP_BRIDGE if tunnel else port
        if tunnel:  # (absent on the interface is fine: nothing to take off)
            with contextlib.suppress(OvnError):
                run(rundir, ["ip", "addr", "del", f"{encap_ip}/{prefixlen}", "dev", port], netns)
        run(rundir, ["ip", "addr", "replace", f"{encap_ip}/{prefixlen}", "dev", device], netns)
        for link in {port, device}:
            run(rundir, ["ip", "link", "set", link, "up"], netns)
    start_controller(chassis)
    deadline = time.monotonic() + timeout
    query = ["ovn-sbctl", f"--db={sb_remote}", *ssl_args(ssl), "--timeout=5", "--bare", "--columns=name", "find",
             "Chassis", f'name="{name}"']  # fmt: skip
    unanswered = ""  # (SB may not answer yet: a cluster's members may still be taking their addresses)
    while True:
        try:
            if run(rundir, query, netns).strip():
                return chassis
        except OvnError as exc:
            unanswered = f" ({exc})"
        if time.monotonic() > deadline:
            raise OvnError(f"chassis {name} did not register in {timeout:g} s{unanswered}; see "
                           f"{rundir / 'ovn-controller.log'}")  # fmt: skip
        time.sleep(0.05)


def start_controller(chassis: Chassis) -> None:
    """The chassis' ovn-controller (also to restart one that died: it claims its Chassis row and bindings again)."""
    rundir = chassis.rundir
    run(rundir, ["ovn-controller", *DETACH, f"--pidfile={rundir / 'ovn-controller.pid'}",
                 f"--log-file={rundir / 'ovn-controller.log'}", chassis.ovs_url], chassis.netns)  # fmt: skip


def pids(rundir: Path) -> dict[str, int]:
    """Daemons of this run directory that are alive: pidfile name -> pid (a pid reused by an unrelated process
    is not ours: its command line must name the run directory)."""
    found: dict[str, int] = {}
    for name in PIDFILES:
        try:
            pid = int((rundir / f"{name}.pid").read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if str(rundir).encode() in cmdline and b"<defunct>" not in cmdline:
            found[name] = pid
    return found


def alive(pid: int) -> bool:
    """Whether any thread of `pid` still runs: a killed multi-threaded daemon's main thread is a zombie before its
    other threads are gone, and until then the process still holds its files (the pidfile's lock: a new daemon of
    the same pidfile refuses to start)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for task in tasks:
        try:
            state = Path(f"/proc/{pid}/task/{task}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            return True
    return False


def _wait(pids: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)


def stop(rundir: Path, netns: str | None = None, bridges: Sequence[str] = (INTEGRATION_BRIDGE,),
         timeout: float = 5.0) -> None:  # fmt: skip
    """End every daemon of `rundir` by pid; remove the tap devices a killed userspace datapath left behind."""
    running = pids(rundir)
    cleaned = False
    if "ovs-vswitchd" in running:
        ctl = rundir / f"ovs-vswitchd.{running['ovs-vswitchd']}.ctl"
        try:
            run(rundir, ["ovs-appctl", "-t", str(ctl), "exit", "--cleanup"], netns, timeout=timeout)
            cleaned = True
        except OvnError:
            pass
        _wait([running["ovs-vswitchd"]], timeout)  # (its cleanup is done once it has exited)
    for pid in running.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    _wait(list(running.values()), timeout)
    for pid in running.values():
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    if "ovs-vswitchd" in running and not cleaned:
        for device in (*bridges, "ovs-netdev"):
            subprocess.run([*(["ip", "-n", netns] if netns else ["ip"]), "tuntap", "del", "dev", device, "mode", "tap"],
                           capture_output=True)  # fmt: skip
