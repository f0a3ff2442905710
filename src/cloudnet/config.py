"""Server configuration: defaults, and where state lives."""

from __future__ import annotations

import grp
import ipaddress
import os
import pwd
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_STATE_DIR = Path("/var/lib/cloudnet")
DEFAULT_BIND = "127.0.0.1"
DEFAULT_PORT = 9696
DEFAULT_METADATA_LISTEN = "127.0.0.1:8775"


@dataclass
class ServerConfig:
    state_dir: Path = DEFAULT_STATE_DIR
    db_url: str | None = None
    host: str = DEFAULT_BIND
    port: int = DEFAULT_PORT
    default_mtu: int = 1500
    # Long-poll ceiling for /v2.0/events, so a client cannot hold a worker forever.
    max_event_wait: float = 60.0
    # Largest request body (bytes): 413 beyond it, unread. A bulk create of thousands of ports fits.
    max_body_size: int = 1 << 20
    # Default quota limits per project, overriding services/quotas.DEFAULTS (-1: unlimited).
    quotas: dict[str, int] = field(default_factory=dict)
    # A host whose agent has not reported for this long is dead: its ports are reported DOWN.
    agent_down_time: float = 30.0
    # The metadata API: HOST:PORT or unix:/PATH ("off": none in this process), and what it answers that is
    # not per instance: StaticJSON vendor data (a JSON object file), the hostname domain, the zone.
    metadata_listen: str = DEFAULT_METADATA_LISTEN
    metadata_vendor_data: Path | None = None
    metadata_domain: str = "novalocal"
    availability_zone: str = "nova"
    # Port pools (Kuryr's ports_pool_*): defaults of every pool, each overridable per pool.
    pool_min: int = 5  # ready ports to keep; refill below it
    pool_max: int = 0  # ready ports at most (released ones beyond are deleted); 0: no cap
    pool_batch: int = 10  # ports per bulk refill
    pool_ttl: int = 0  # seconds a ready port may stay idle while the pool is above min; 0: off
    pool_update_interval: int = 20  # seconds between maintenance passes of a pool
    # Instance creates make the pool of (host, project, network) on first demand and claim from it (Kuryr's
    # pool driver). Off by default, like Kuryr's noop driver: a pool holds addresses its network may need.
    instance_pools: bool = False
    # The dataplane the server serves: "linux" (single-host, the embedded default) or "ovn" (the server writes OVN's
    # NB database; OVN's databases start under <state_dir>/ovn/ unless ovn_nb/ovn_sb name running ones).
    dataplane: str = "linux"
    ovn_nb: str | None = None
    ovn_sb: str | None = None
    # An address of this host where the NB/SB databases started here also listen (TCP 6641/6642) for other hosts'
    # chassis (None: unix sockets only).
    ovn_listen: str | None = None
    # The SB URL other hosts' chassis join (set when OVN's databases start with ovn_listen): joins hand it out.
    ovn_remote_sb: str | None = None
    # TLS on the API listener (tls_cert/tls_key given, or made at start, signed by the CA, with tls_sans as SANs
    # beside the bound address, this host's name and loopback). The CA: ca_cert/ca_key, default <state>/pki/.
    tls: bool = False
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_sans: list[str] = field(default_factory=list)
    ca_cert: Path | None = None
    ca_key: Path | None = None
    # Every server host's address, the same list on each (the first creates the clusters): NB and SB run as Raft
    # clusters, this host's members at ovn_listen (ovn/cluster.py). Empty: standalone databases.
    ovn_cluster: tuple[str, ...] = ()
    # Chassis that host router gateways, highest priority first (`cloudnet up`: this host).
    ovn_gateway_chassis: list[str] = field(default_factory=list)
    # GET /metrics (admin token) and the request middleware that feeds it (off: neither; see api/metrics.py).
    metrics: bool = True

    @property
    def database_url(self) -> str:
        if self.db_url:
            return self.db_url
        return f"sqlite:///{self.state_dir / 'cloudnet.db'}"

    @property
    def tokens_file(self) -> Path:
        return self.state_dir / "tokens.json"

    @property
    def metadata_secret_file(self) -> Path:
        # Shared with the agents, which sign instance identities with it (wire/signing.py).
        return self.state_dir / "metadata_secret"

    @property
    def pki_dir(self) -> Path:
        return self.state_dir / "pki"

    @property
    def keystone_secret_file(self) -> Path:
        # Signs the Keystone face's tokens (services/identity/keystone.py); servers sharing a database share it.
        return self.state_dir / "keystone_secret"

    @property
    def loopback_bind(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


@dataclass
class AgentConfig:
    host: str
    server: str = f"http://{DEFAULT_BIND}:{DEFAULT_PORT}"
    token: str = "agent"
    state_dir: Path = DEFAULT_STATE_DIR
    # physical network -> host interface bridged to external networks of that physical network
    uplinks: dict[str, str] = field(default_factory=dict)
    # The availability zone this host reports in its heartbeats (--availability-zone; Neutron's agents' default).
    availability_zone: str = "nova"
    heartbeat_interval: float = 10.0
    # The metadata API the per-network proxies forward to (http://HOST:PORT, HOST:PORT or unix:/PATH);
    # None: no metadata proxy on this host.
    metadata_url: str | None = f"http://{DEFAULT_METADATA_LISTEN}"
    # The server's shared secret (a copy on other hosts, or what a join handed over); default
    # <state_dir>/metadata_secret.
    metadata_secret_file: Path | None = None
    # TLS to the API: the CA the server must chain to (None: plain HTTP, or the system's store for https), and this
    # host's certificate and key (a joined host's: it then needs no token, and acts for this host only).
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    # SR-IOV: physical network -> PFs whose VFs direct ports get (--sriov), VFs never handed out per PF
    # (--sriov-exclude, PCI slots), and where sysfs is (tests point it at a tree they build).
    sriov: dict[str, list[str]] = field(default_factory=dict)
    sriov_exclude: dict[str, set[str]] = field(default_factory=dict)
    sysfs_root: Path = Path("/sys")
    # Pre-plumbed devices for ready pool ports, each in a namespace of its own (--park-pool-devices).
    park_pool_devices: bool = False
    # Seconds one object's dataplane step may take before it is marked failed (dataplane/steps.py).
    step_timeout: float = 10.0
    # The dataplane driver (dataplane/drivers.py).
    dataplane: str = "linux"
    # OVN chassis (dataplane "ovn"): the SB database, this chassis' Open_vSwitch database, and the network namespace
    # its ovs-vswitchd runs in (None: the agent's own).
    ovn_sb: str | None = None
    ovs_db: str | None = None
    ovs_netns: str | None = None
    # A chassis started here: its Geneve tunnel address, and the underlay interface that address is on with its
    # prefix length (None: the address is already routable here; with the userspace datapath it must then be
    # given, see ovn/daemons.py).
    encap_ip: str = "127.0.0.1"
    encap_port: tuple[str, int] | None = None
    # SmartOS metadata sockets: an idle connection is closed after this many seconds; the longest request line;
    # connections per instance socket (a guest can use them up only for itself).
    mdata_idle_timeout: float = 300.0
    mdata_max_line: int = 1 << 20
    mdata_max_connections: int = 32
    # The VMMs' user and group (names or numbers): VMs' tap devices are theirs (a VMM running as them attaches
    # without CAP_NET_ADMIN), and VM serial metadata sockets are 0660 of the group (None: the agent's own group).
    vm_user: str = "root"
    vm_group: str | None = None

    @property
    def secret_file(self) -> Path:
        return self.metadata_secret_file or self.state_dir / "metadata_secret"

    @property
    def vm_owner(self) -> tuple[int, int]:
        """The uid of vm_user and the gid of vm_group (the agent's own group when None); ValueError for a name this
        machine does not know."""
        try:
            uid = int(self.vm_user) if self.vm_user.isdigit() else pwd.getpwnam(self.vm_user).pw_uid
        except KeyError:
            raise ValueError(f"no user {self.vm_user!r} on this host") from None
        gid = group_id(self.vm_group)
        return uid, os.getgid() if gid is None else gid


def metadata_url_of(listen: str) -> str | None:
    """Where a local agent reaches the metadata API that `cloudnet serve` listens on."""
    if listen == "off":
        return None
    if listen.startswith("unix:"):
        return listen
    for wildcard in ("0.0.0.0:", "[::]:"):
        if listen.startswith(wildcard):
            return "http://127.0.0.1:" + listen[len(wildcard) :]
    return f"http://{listen}"


def group_id(group: str | None) -> int | None:
    """A group name or number (--vm-group) as a gid; None stays None (the process's own group)."""
    if group is None or group.isdigit():
        return None if group is None else int(group)
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise ValueError(f"no group {group!r} on this host") from None


def parse_mappings(values: list[str], what: str) -> dict[str, str]:
    """`physnet1:eth1` options into {"physnet1": "eth1"}."""
    out: dict[str, str] = {}
    for value in values:
        for item in value.split(","):
            key, sep, iface = item.partition(":")
            if not sep or not key or not iface:
                raise ValueError(f"{what} must look like PHYSNET:INTERFACE, not {item!r}")
            out[key] = iface
    return out
