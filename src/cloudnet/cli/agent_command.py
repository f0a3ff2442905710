"""`cloudnet agent`: this host's agent, following a server's API; `--join URL TOKEN` first joins it to the cloud
(agent/join.py), and every later start runs from what that join wrote (no token, no copied secret files)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Annotated

import typer

from cloudnet.agent import join as joining
from cloudnet.cli.daemons import (
    DEFAULT_STATE_DIR,
    AvailabilityZone,
    LogFormatOption,
    MdataIdle,
    MdataMaxConnections,
    MdataMaxLine,
    ParkPoolDevices,
    Sriov,
    SriovExclude,
    StateDir,
    StepTimeout,
    SysfsRoot,
    Uplink,
    VmGroup,
    VmUser,
    no_sriov_on_ovn,
    sriov_of,
    uplinks_of,
    vm_owner,
    zone_of,
)
from cloudnet.cli.errors import CliError
from cloudnet.cli.ovn_options import ChassisSb, EncapIface, EncapIp, set_encap
from cloudnet.config import DEFAULT_BIND, DEFAULT_METADATA_LISTEN, DEFAULT_PORT, AgentConfig
from cloudnet.ovn.daemons import OvnError, Ssl, bridge_mappings, start_chassis, stop
from cloudnet.wire import logs

DEFAULT_SERVER = f"http://{DEFAULT_BIND}:{DEFAULT_PORT}"
DEFAULT_METADATA_URL = f"http://{DEFAULT_METADATA_LISTEN}"
Join = Annotated[
    tuple[str, str] | None,
    typer.Option(metavar="URL TOKEN", help="Join the cloud at URL (https) with a token of `cloudnet host join-token`: "
                 "this host's key is made here, its certificate signed for --host; later starts need neither."),
]  # fmt: skip


def join_or_load(state_dir: Path, join: tuple[str, str] | None, host: str, explicit_host: str | None,
                 ovn_member: str | None = None) -> joining.Joined | None:  # fmt: skip
    """Join now as `host` if asked (`ovn_member`: for a member of OVN's clusters at that address), then what a join
    wrote here (None: this host never joined with a token), which must be `explicit_host`'s if one is given."""
    try:
        if join is not None:
            done = joining.join(join[0], join[1], host, state_dir, ovn_member=ovn_member)
            member = f" (OVN cluster member at {ovn_member})" if ovn_member else ""
            typer.echo(
                f"joined {done.server} as host {done.host}{member}; certificate in {joining.Joined.dir(state_dir)}"
            )
        saved = joining.load(state_dir)
    except joining.JoinError as exc:
        raise CliError(f"cannot join: {exc}") from None
    if saved is not None and explicit_host is not None and explicit_host != saved.host:
        raise CliError(f"this host joined as {saved.host}, not {explicit_host} (its certificate names {saved.host})")
    return saved


def _joined(config: AgentConfig, join: tuple[str, str] | None, explicit_host: str | None) -> bool:
    """Join now if asked, then take what a join wrote (server, name, SB, metadata, certificate) as this agent's
    settings; False when this host never joined with a token."""
    saved = join_or_load(config.state_dir, join, config.host, explicit_host)
    if saved is None:
        return False
    config.host, config.server = saved.host, saved.server
    config.ca_file, config.cert_file, config.key_file, secret = joining.Joined.files(config.state_dir)
    config.metadata_url = saved.metadata_url
    config.metadata_secret_file = config.metadata_secret_file or secret
    config.ovn_sb = saved.ovn_sb
    return True


def _ssl(config: AgentConfig, ovn_sb: str) -> Ssl | None:
    """This host's certificate for an `ssl:` SB database (a joined host's), else None."""
    if not ovn_sb.startswith("ssl:"):
        return None
    if config.key_file is None or config.cert_file is None or config.ca_file is None:
        raise CliError(f"{ovn_sb} is SSL: this host needs a certificate of the cloud's CA (join with a token)")
    return Ssl(config.key_file, config.cert_file, config.ca_file)


def register(app: typer.Typer) -> None:
    @app.command("agent")
    def agent(
        host: Annotated[str | None, typer.Option(help="This host's name (default: hostname).")] = None,
        server: Annotated[
            str | None,
            typer.Option(
                help=f"cloudnet API URL, or URL1,URL2,... (failed over in turn on connection errors and 5xx; "
                f"default: the joined one, or {DEFAULT_SERVER})."
            ),
        ] = None,
        token: Annotated[
            str | None,
            typer.Option(
                envvar="CLOUDNET_TOKEN",
                help="Admin token for the API (a joined host needs none: its certificate is its credential).",
            ),
        ] = None,
        join: Join = None,
        state_dir: StateDir = DEFAULT_STATE_DIR,
        uplink: Uplink = None,
        availability_zone: AvailabilityZone = AgentConfig.availability_zone,
        metadata_url: Annotated[
            str | None,
            typer.Option(
                help="Metadata API for the proxies: http://HOST:PORT, unix:/PATH, or 'off'; several, comma-separated, "
                f"are tried in order (default: the joined server's, or {DEFAULT_METADATA_URL})."
            ),
        ] = None,
        metadata_secret_file: Annotated[
            Path | None,
            typer.Option(
                help="Copy of the server's metadata secret (default: the one a join handed over, or "
                "<state-dir>/metadata_secret)."
            ),
        ] = None,
        sriov: Sriov = None,
        sriov_exclude: SriovExclude = None,
        sysfs_root: SysfsRoot = Path("/sys"),
        park_pool_devices: ParkPoolDevices = False,
        vm_user: VmUser = AgentConfig.vm_user,
        vm_group: VmGroup = None,
        step_timeout: StepTimeout = AgentConfig.step_timeout,
        mdata_idle_timeout: MdataIdle = AgentConfig.mdata_idle_timeout,
        mdata_max_line: MdataMaxLine = AgentConfig.mdata_max_line,
        mdata_max_connections: MdataMaxConnections = AgentConfig.mdata_max_connections,
        dataplane: Annotated[
            str | None,
            typer.Option(
                metavar="linux|ovn",
                help="linux: this host's namespaces and bridges; ovn: this host is an OVN chassis (--ovn-sb; "
                "default: ovn when the joined server has OVN, else linux).",
            ),
        ] = None,
        ovn_sb: ChassisSb = None,
        ovs_db: Annotated[
            str | None,
            typer.Option(
                metavar="URL",
                help="A running Open_vSwitch database (with "
                "ovs-vswitchd and ovn-controller) instead of starting them under <state-dir>/ovn-chassis/.",
            ),
        ] = None,
        encap_ip: EncapIp = AgentConfig.encap_ip,
        encap_iface: EncapIface = None,
        ovs_netns: Annotated[
            str | None,
            typer.Option(
                metavar="NAME",
                help="The network namespace the running ovs-vswitchd of --ovs-db is in "
                "(where br-int's ports go; default the agent's own).",
            ),
        ] = None,
        log_format: LogFormatOption = "text",
    ) -> None:
        """Run the host agent: converge this host's dataplane to the API's desired state."""
        logs.choose(log_format)
        from cloudnet.agent.run import run
        from cloudnet.wire.signing import SecretError

        config = AgentConfig(host=host or socket.gethostname(), state_dir=state_dir, uplinks=uplinks_of(uplink),
                             metadata_secret_file=metadata_secret_file,
                             availability_zone=zone_of(availability_zone))  # fmt: skip
        joined = _joined(config, join, host)
        # What the command line says wins over what the join wrote; a joined agent sends no token unless given one.
        config.server = server or (config.server if joined else DEFAULT_SERVER)
        config.token = token if token is not None else "" if joined else "agent"
        url = metadata_url or (config.metadata_url if joined else DEFAULT_METADATA_URL)
        config.metadata_url = None if url in (None, "off") else url
        ovn_sb = ovn_sb or config.ovn_sb
        dataplane = dataplane or ("ovn" if ovn_sb else "linux")
        config.sriov, config.sriov_exclude = sriov_of(sriov, sriov_exclude)
        config.sysfs_root = sysfs_root
        config.park_pool_devices = park_pool_devices
        vm_owner(config, vm_user, vm_group)
        config.step_timeout, config.mdata_idle_timeout = step_timeout, mdata_idle_timeout
        config.mdata_max_line, config.mdata_max_connections = mdata_max_line, mdata_max_connections
        if dataplane not in ("linux", "ovn") or (dataplane == "ovn") != (ovn_sb is not None):
            raise CliError("--dataplane is linux or ovn, and ovn goes with --ovn-sb URL (linux without)")
        no_sriov_on_ovn(dataplane, sriov)
        set_encap(config, encap_ip, encap_iface, dataplane)
        if ovs_netns is not None and ovs_db is None:
            raise CliError("--ovs-netns goes with --ovs-db (a chassis started here runs in the agent's namespace)")
        config.dataplane, config.ovn_sb, config.ovs_db, config.ovs_netns = dataplane, ovn_sb, ovs_db, ovs_netns
        chassis = None
        try:
            if ovn_sb is not None and ovs_db is None:  # this host's ovs-vswitchd and ovn-controller, started here
                chassis = start_chassis(state_dir / "ovn-chassis", config.host, ovn_sb, encap_ip=config.encap_ip,
                                        encap_port=config.encap_port, ssl=_ssl(config, ovn_sb),
                                        bridge_mappings=bridge_mappings(config.uplinks),
                                        availability_zone=config.availability_zone)  # fmt: skip
                config.ovs_db = chassis.ovs_url
            run(config)
        except SecretError as exc:
            raise CliError(f"cannot start the metadata proxy: {exc}") from None
        except OvnError as exc:
            raise CliError(f"cannot start this chassis: {exc}") from None
        finally:
            if chassis is not None:
                stop(chassis.rundir, bridges=chassis.bridges)
