"""OVN for `cloudnet up|serve --dataplane ovn`: NB/SB databases and ovn-northd under <state-dir>/ovn/ (or, with
--ovn-nb/--ovn-sb, existing ones), this host's chassis for `up`, and the server's northbound writer."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from cloudnet.config import ServerConfig
from cloudnet.northbound.sync import NorthboundSync
from cloudnet.ovn import daemons
from cloudnet.store.db import Store

log = logging.getLogger("cloudnet.ovn")


@dataclass
class OvnStack:
    rundir: Path
    nb_url: str
    sb_url: str
    sync: NorthboundSync
    chassis: daemons.Chassis | None = None
    own_central: bool = False

    def stop(self) -> None:
        self.sync.stop()
        if self.chassis is not None:
            daemons.stop(self.chassis.rundir, self.chassis.netns, self.chassis.bridges)
        if self.own_central:
            daemons.stop(self.rundir)


def start(
    config: ServerConfig, store: Store, chassis_name: str | None, uplinks: dict[str, str] | None = None
) -> OvnStack:
    """Start (or connect to) OVN and the northbound writer; `chassis_name`: also make this host a chassis (with the
    bridges of its `uplinks`, {physical network: interface}, which its agent connects)."""
    rundir = config.state_dir / "ovn"
    if (config.ovn_nb is None) != (config.ovn_sb is None):
        raise daemons.OvnError("--ovn-nb and --ovn-sb go together (or neither: OVN's databases start here)")
    # Daemons a killed earlier run of this state dir left (found by their pidfiles here, nothing else).
    daemons.stop(rundir)
    own = config.ovn_nb is None
    try:
        if config.ovn_nb is not None and config.ovn_sb is not None:
            nb_url, sb_url = config.ovn_nb, config.ovn_sb
        else:
            central = daemons.start_central(rundir)
            nb_url, sb_url = central.nb_url, central.sb_url
        mappings = daemons.bridge_mappings(uplinks or {})
        chassis = (
            daemons.start_chassis(rundir, chassis_name, sb_url, bridge_mappings=mappings) if chassis_name else None
        )
    except BaseException:
        daemons.stop(rundir)
        raise
    gateways = [chassis_name] if chassis_name else config.ovn_gateway_chassis
    sync = NorthboundSync(store, nb_url, gateways)
    sync.start()
    log.info("OVN: NB %s, SB %s%s", nb_url, sb_url, f", chassis {chassis_name}" if chassis_name else "")
    return OvnStack(rundir, nb_url, sb_url, sync, chassis, own)
