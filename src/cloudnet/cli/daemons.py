"""`cloudnet serve`, `cloudnet agent` and `cloudnet up` (both in one process, on embedded defaults)."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cloudnet.cli.errors import CliError
from cloudnet.cli.ovn_options import (
    EncapIface,
    EncapIp,
    OvnCluster,
    OvnListen,
    cluster_members,
    listen_address,
    set_encap,
)
from cloudnet.cli.tls_options import CaCert, CaKey, Tls, TlsCert, TlsKey, TlsSan, apply_tls
from cloudnet.config import (
    DEFAULT_BIND,
    DEFAULT_METADATA_LISTEN,
    DEFAULT_PORT,
    DEFAULT_STATE_DIR,
    AgentConfig,
    ServerConfig,
    metadata_url_of,
    parse_mappings,
)
from cloudnet.docker.command import DEFAULT_SOCKET
from cloudnet.errors import CloudnetError
from cloudnet.wire import logs, zones

if TYPE_CHECKING:  # (loaded only when `up` runs: see _docker)
    from cloudnet.server import Companion

StateDir = Annotated[Path, typer.Option(help="Where state lives (database, tokens.json, sockets).")]
Db = Annotated[str | None, typer.Option(metavar="URL", help="Database URL (default: SQLite in the state dir).")]
Host = Annotated[str, typer.Option(help="Address to listen on.")]
Port = Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")]
Mtu = Annotated[
    int, typer.Option(min=68, help="MTU of networks created without one (on OVN, overlay networks 58 less: Geneve).")
]
ParkPoolDevices = Annotated[
    bool,
    typer.Option(
        "--park-pool-devices/--no-park-pool-devices",
        help="Pre-plumb a veth for each ready pool port, configured as eth0 of a namespace of its own: an "
        "instance created without a namespace takes it over (nothing to plug); into an instance's own "
        "namespace it is one move, which on kernels where a move costs an RCU barrier is slower than a new veth.",
    ),
]
VmUser = Annotated[str, typer.Option(metavar="USER", help="User (name or uid) owning VMs' tap devices: a VMM running "
                                      "as it attaches without CAP_NET_ADMIN.")]  # fmt: skip
PoolMin = Annotated[int, typer.Option(min=0, help="Ready ports every port pool keeps (refilled below it).")]
PoolMax = Annotated[int, typer.Option(min=0, help="Ready ports a pool holds at most (0: no cap).")]
PoolBatch = Annotated[int, typer.Option(min=1, help="Ports created per pool refill (one bulk create).")]
PoolTtl = Annotated[int, typer.Option(min=0, help="Seconds a ready pool port may idle above min (0: forever).")]
PoolUpdateInterval = Annotated[int, typer.Option(min=1, help="Seconds between maintenance passes of a pool.")]
InstancePools = Annotated[
    bool,
    typer.Option(
        "--instance-pools/--no-instance-pools",
        help="Instance creates make the port pool of their host and network on first demand and claim from it "
        "(off: they only use pools that exist; a pool holds addresses).",
    ),
]
Metrics = Annotated[bool, typer.Option("--metrics/--no-metrics", help="Serve GET /metrics (admin token) and "
                                      "count API requests for it.")]  # fmt: skip
AgentHost = Annotated[str | None, typer.Option("--agent-host", help="This host's name (default: hostname).")]
Uplink = Annotated[
    list[str] | None,
    typer.Option(
        metavar="PHYSNET:IFACE",
        help="Bridge external networks of PHYSNET to IFACE (repeatable; OVN: IFACE "
        "on br-PHYSNET, named in ovn-bridge-mappings, and this host a gateway chassis for PHYSNET).",
    ),
]
Sriov = Annotated[
    list[str] | None,
    typer.Option(metavar="PHYSNET:PF[,PHYSNET:PF]", help="Hand out VFs of PF to direct ports on PHYSNET (repeatable)."),
]
SriovExclude = Annotated[
    list[str] | None,
    typer.Option(metavar="PF:PCI[;PCI]", help="VFs (PCI slots) of PF never handed out (repeatable)."),
]
SysfsRoot = Annotated[Path, typer.Option(help="Where sysfs is mounted (SR-IOV inventory).")]
Quota = Annotated[
    list[str] | None,
    typer.Option(metavar="RESOURCE=N", help="Default quota of every project (-1: unlimited), e.g. port=1000; "
                 "resources: network, subnet, port, router, security_group, security_group_rule, floatingip, "
                 "forward (repeatable)."),
]  # fmt: skip
StepTimeout = Annotated[
    float, typer.Option(min=0.1, metavar="S", help="Seconds one object's dataplane step may take before it is "
                        "marked failed (and retried with backoff) while the rest of the host converges."),
]  # fmt: skip
MdataIdle = Annotated[float, typer.Option(min=1, metavar="S", help="Close a SmartOS metadata connection idle this "
                                          "long.")]  # fmt: skip
MdataMaxLine = Annotated[int, typer.Option(min=4096, metavar="BYTES", help="Longest SmartOS metadata request line.")]
MdataMaxConnections = Annotated[int, typer.Option(min=1, help="Connections per instance metadata socket.")]
VmGroup = Annotated[
    str | None,
    typer.Option(
        metavar="GROUP",
        help="Group (name or gid) of the VMMs (QEMU): it owns VMs' tap devices, and VM "
        "serial metadata sockets are 0660 of it (default: the agent's own group).",
    ),
]
MaxBodySize = Annotated[int, typer.Option(min=1024, metavar="BYTES", help="Largest request body (413 beyond).")]
MetadataListen = Annotated[
    str,
    typer.Option(
        metavar="HOST:PORT|unix:PATH|off",
        help="Where the metadata API listens (answers only requests signed by an agent's proxy).",
    ),
]
Dataplane = Annotated[
    str,
    typer.Option(metavar="linux|ovn", help="linux: this host only (a router lives on one host); ovn: OVN's databases, "
                 "northd and this host's chassis (under <state-dir>/ovn/), the server writing OVN's NB database."),
]  # fmt: skip
OvnNb = Annotated[str | None, typer.Option(metavar="URL", help="OVN NB database to use instead of starting one.")]
OvnSb = Annotated[str | None, typer.Option(metavar="URL", help="OVN SB database to use instead of starting one.")]
DockerDriver = Annotated[
    bool,
    typer.Option(
        "--docker-driver/--no-docker-driver",
        help="Also serve dockerd as network and IPAM driver (`docker network create -d cloudnet --ipam-driver "
        "cloudnet ...`), acting as the `service` role of --docker-project.",
    ),
]
DockerSocket = Annotated[
    Path, typer.Option(help="The Docker driver's socket; its file name without .sock is the driver's name.")
]
DockerProject = Annotated[str, typer.Option(help="The project of the Docker driver's networks and ports.")]
VendorData = Annotated[
    Path | None,
    typer.Option(metavar="FILE", help="JSON object served as vendor_data.json (static vendor data)."),
]


LogFormatOption = Annotated[
    logs.LogFormat, typer.Option("--log-format", help="text (for people) or json (one object a line, for log "
                                 "shippers); both carry each line's request id.")]  # fmt: skip


AvailabilityZone = Annotated[
    str,
    typer.Option(
        metavar="NAME",
        help="The availability zone this host is in, reported in its heartbeats (Neutron's agents' "
        "availability_zone; OVN: the chassis' ovn-cms-options availability-zones=NAME). Networks and routers hint "
        "zones; on OVN a router's gateway goes only to chassis of its hinted zones.",
    ),
]


def zone_of(value: str) -> str:
    try:
        return zones.check(value)
    except ValueError as exc:
        raise CliError(f"--availability-zone: {exc}") from None


def uplinks_of(values: list[str] | None) -> dict[str, str]:
    try:
        return parse_mappings(values or [], "--uplink")
    except ValueError as exc:
        raise CliError(str(exc)) from None


def vm_owner(config: AgentConfig, user: str, group: str | None) -> None:
    config.vm_user, config.vm_group = user, group
    try:
        config.vm_owner  # noqa: B018 (resolved now: an unknown name is the command line's error, not the agent's)
    except ValueError as exc:
        raise CliError(f"--vm-user/--vm-group: {exc}") from None


def sriov_of(sriov: list[str] | None, exclude: list[str] | None) -> tuple[dict[str, list[str]], dict[str, set[str]]]:
    from cloudnet.dataplane.sriov.inventory import parse_exclude, parse_sriov

    try:
        return parse_sriov(sriov or []), parse_exclude(exclude or [])
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _quotas(values: list[str] | None) -> dict[str, int]:
    from cloudnet.services.quotas import check_limits  # (the server stack: not loaded for client commands)

    limits: dict[str, str] = {}
    for value in values or []:
        resource, sep, limit = value.partition("=")
        if not sep:
            raise CliError(f"--quota must look like RESOURCE=N, not {value!r}")
        limits[resource.strip()] = limit.strip()
    try:
        return check_limits(limits)
    except CloudnetError as exc:
        raise CliError(f"--quota: {exc.message}") from None


def _dataplane(config: ServerConfig, dataplane: str, nb: str | None, sb: str | None,
               listen: str | None = None, members: str | None = None) -> ServerConfig:  # fmt: skip
    if dataplane not in ("linux", "ovn"):
        raise CliError(f"--dataplane must be linux or ovn, not {dataplane!r}")
    if dataplane == "linux" and (nb or sb):
        raise CliError("--ovn-nb/--ovn-sb need --dataplane ovn")
    if (nb is None) != (sb is None):
        raise CliError("--ovn-nb and --ovn-sb go together (or neither: OVN's databases start in the state dir)")
    config.dataplane, config.ovn_nb, config.ovn_sb = dataplane, nb, sb
    config.ovn_listen = listen_address(listen, dataplane, nb is not None)
    config.ovn_cluster = cluster_members(members, config.ovn_listen)
    return config


def no_sriov_on_ovn(dataplane: str, sriov: list[str] | None) -> None:
    if dataplane == "ovn" and sriov:
        raise CliError("--sriov: SR-IOV direct ports are not supported on the OVN dataplane (use --dataplane linux)")


def _docker(enabled: bool, agent: AgentConfig, socket_path: Path, project: str) -> list[Companion]:
    """The Docker driver as a companion of the server (cloudnet.server.Companion), when asked for."""
    if not enabled:
        return []
    # Imported here, as the other daemon stacks are: client commands don't load them.
    from cloudnet.docker.beside import starter
    from cloudnet.server import Companion

    start = starter(agent, socket_path, agent.state_dir / "docker-driver.json")
    return [Companion("the Docker driver", project, "service", start)]


def _serve(config: ServerConfig, agent: AgentConfig | None = None, companions: Sequence[Companion] = ()) -> None:
    # Imported here so that client commands don't pay for loading the server stack.
    from cloudnet.server import StartupError, serve

    try:
        serve(config, agent, companions)
    except StartupError as exc:
        raise CliError(f"cannot start: {exc}") from None


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve(
        state_dir: StateDir = DEFAULT_STATE_DIR,
        db: Db = None,
        host: Host = DEFAULT_BIND,
        port: Port = DEFAULT_PORT,
        default_mtu: Mtu = 1500,
        metadata_listen: MetadataListen = DEFAULT_METADATA_LISTEN,
        vendor_data: VendorData = None,
        pool_min: PoolMin = 5,
        pool_max: PoolMax = 0,
        pool_batch: PoolBatch = 10,
        pool_ttl: PoolTtl = 0,
        pool_update_interval: PoolUpdateInterval = 20,
        instance_pools: InstancePools = False,
        quota: Quota = None,
        max_body_size: MaxBodySize = ServerConfig.max_body_size,
        dataplane: Dataplane = "linux",
        ovn_nb: OvnNb = None,
        ovn_sb: OvnSb = None,
        ovn_listen: OvnListen = None,
        tls: Tls = False,
        tls_cert: TlsCert = None,
        tls_key: TlsKey = None,
        tls_san: TlsSan = None,
        ca_cert: CaCert = None,
        ca_key: CaKey = None,
        ovn_cluster: OvnCluster = None,
        metrics: Metrics = True,
        log_format: LogFormatOption = "text",
    ) -> None:
        """Run the cloudnet API server (and the metadata API beside it)."""
        logs.choose(log_format)
        config = ServerConfig(state_dir=state_dir, db_url=db, host=host, port=port, default_mtu=default_mtu,
                            metadata_listen=metadata_listen, metadata_vendor_data=vendor_data,
                            pool_min=pool_min, pool_max=pool_max, pool_batch=pool_batch, pool_ttl=pool_ttl,
                            pool_update_interval=pool_update_interval, instance_pools=instance_pools,
                            quotas=_quotas(quota), max_body_size=max_body_size, metrics=metrics)  # fmt: skip
        apply_tls(config, tls, tls_cert, tls_key, tls_san, ca_cert, ca_key)
        _serve(_dataplane(config, dataplane, ovn_nb, ovn_sb, ovn_listen, ovn_cluster))

    @app.command("up")
    def up(
        state_dir: StateDir = DEFAULT_STATE_DIR,
        db: Db = None,
        host: Host = DEFAULT_BIND,
        port: Port = DEFAULT_PORT,
        default_mtu: Mtu = 1500,
        agent_host: AgentHost = None,
        uplink: Uplink = None,
        availability_zone: AvailabilityZone = AgentConfig.availability_zone,
        metadata_listen: MetadataListen = DEFAULT_METADATA_LISTEN,
        vendor_data: VendorData = None,
        sriov: Sriov = None,
        sriov_exclude: SriovExclude = None,
        sysfs_root: SysfsRoot = Path("/sys"),
        park_pool_devices: ParkPoolDevices = False,
        vm_user: VmUser = AgentConfig.vm_user,
        vm_group: VmGroup = None,
        pool_min: PoolMin = 5,
        pool_max: PoolMax = 0,
        pool_batch: PoolBatch = 10,
        pool_ttl: PoolTtl = 0,
        pool_update_interval: PoolUpdateInterval = 20,
        instance_pools: InstancePools = False,
        quota: Quota = None,
        max_body_size: MaxBodySize = ServerConfig.max_body_size,
        step_timeout: StepTimeout = AgentConfig.step_timeout,
        mdata_idle_timeout: MdataIdle = AgentConfig.mdata_idle_timeout,
        mdata_max_line: MdataMaxLine = AgentConfig.mdata_max_line,
        mdata_max_connections: MdataMaxConnections = AgentConfig.mdata_max_connections,
        dataplane: Dataplane = "linux",
        ovn_nb: OvnNb = None,
        ovn_sb: OvnSb = None,
        ovn_listen: OvnListen = None,
        ovn_cluster: OvnCluster = None,
        encap_ip: EncapIp = AgentConfig.encap_ip,
        encap_iface: EncapIface = None,
        docker_driver: DockerDriver = False,
        docker_socket: DockerSocket = DEFAULT_SOCKET,
        docker_project: DockerProject = "admin",
        tls: Tls = False,
        tls_cert: TlsCert = None,
        tls_key: TlsKey = None,
        tls_san: TlsSan = None,
        ca_cert: CaCert = None,
        ca_key: CaKey = None,
        metrics: Metrics = True,
        log_format: LogFormatOption = "text",
    ) -> None:
        """Run the API server and this host's agent in one process (the one-machine setup), and the Docker driver
        with --docker-driver."""
        logs.choose(log_format)
        config = ServerConfig(state_dir=state_dir, db_url=db, host=host, port=port, default_mtu=default_mtu,
                              metadata_listen=metadata_listen, metadata_vendor_data=vendor_data,
                              pool_min=pool_min, pool_max=pool_max, pool_batch=pool_batch, pool_ttl=pool_ttl,
                              pool_update_interval=pool_update_interval, instance_pools=instance_pools,
                              quotas=_quotas(quota), max_body_size=max_body_size, metrics=metrics)  # fmt: skip
        local = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        agent_config = AgentConfig(host=agent_host or socket.gethostname(), server=f"http://{local}:{port}",
                                   token="", state_dir=state_dir,  # the server gives it a token of its own
                                   uplinks=uplinks_of(uplink), metadata_url=metadata_url_of(metadata_listen),
                                   metadata_secret_file=config.metadata_secret_file)  # fmt: skip
        agent_config.availability_zone = zone_of(availability_zone)
        agent_config.sriov, agent_config.sriov_exclude = sriov_of(sriov, sriov_exclude)
        agent_config.sysfs_root = sysfs_root
        agent_config.park_pool_devices = park_pool_devices
        vm_owner(agent_config, vm_user, vm_group)
        agent_config.step_timeout, agent_config.mdata_idle_timeout = step_timeout, mdata_idle_timeout
        agent_config.mdata_max_line, agent_config.mdata_max_connections = mdata_max_line, mdata_max_connections
        no_sriov_on_ovn(dataplane, sriov)
        set_encap(agent_config, encap_ip, encap_iface, dataplane)
        apply_tls(config, tls, tls_cert, tls_key, tls_san, ca_cert, ca_key)
        _serve(_dataplane(config, dataplane, ovn_nb, ovn_sb, ovn_listen, ovn_cluster), agent_config,
               _docker(docker_driver, agent_config, docker_socket, docker_project))  # fmt: skip
