"""Start the agent (alone, or beside the server in `cloudnet up`) and stop it on SIGTERM."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

from cloudnet.agent.agent import Agent, StateObserver
from cloudnet.agent.client import ApiClient
from cloudnet.agent.metadata.mdata_service import MdataService
from cloudnet.agent.metadata.proxy import MetadataProxy
from cloudnet.config import AgentConfig
from cloudnet.dataplane.linux.driver import LinuxDataplane
from cloudnet.dataplane.sriov import SriovDataplane
from cloudnet.dataplane.sriov_inventory import inventory_report, read_inventory
from cloudnet.wire import signing

log = logging.getLogger("cloudnet.agent")


def agent_report(config: AgentConfig) -> dict[str, Any]:
    """What the heartbeat reports about this host: uplinks, and the SR-IOV inventory when VFs are mapped."""
    report: dict[str, Any] = {"uplinks": config.uplinks}
    if config.sriov:
        report["sriov"] = inventory_report(read_inventory(config.sriov, config.sriov_exclude, config.sysfs_root))
    return report


def build(config: AgentConfig) -> Agent:
    client = ApiClient(config.server, config.host, config.token)
    report = agent_report(config)
    sriov = None
    if config.sriov:
        # Shares `report` with the Agent: it refreshes report["sriov"] after each plug or release.
        sriov = SriovDataplane(config.host, config.state_dir, mappings=config.sriov, exclude=config.sriov_exclude,
                               sysfs_root=config.sysfs_root, report=report)  # fmt: skip
    dataplane = LinuxDataplane(config.host, config.uplinks, sriov, park=config.park_pool_devices,
                               step_timeout=config.step_timeout)  # fmt: skip
    observers: list[StateObserver] = []
    if config.metadata_url:
        # 169.254.169.254 in every network namespace of this host, signing with the server's secret.
        observers.append(MetadataProxy(config.host, config.metadata_url, signing.read_secret(config.secret_file)))
    # SmartOS metadata sockets under <state>/zonecontrol/<uuid>/ (guests' writes go through the API).
    observers.append(
        MdataService(
            config.state_dir,
            client,
            idle_timeout=config.mdata_idle_timeout,
            max_line=config.mdata_max_line,
            max_connections=config.mdata_max_connections,
        )
    )
    return Agent(
        client, dataplane, report=report, heartbeat_interval=config.heartbeat_interval,
        observers=observers,
    )  # fmt: skip


def run(config: AgentConfig) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request is noise here
    agent = build(config)
    if threading.current_thread() is threading.main_thread():
        # Stopping leaves the dataplane as it is: instances keep their traffic while the agent is away.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: agent.stop())
    log.info("agent for host %s following %s", config.host, config.server)
    try:
        agent.run()
    finally:
        agent.client.close()


def start_in_thread(config: AgentConfig) -> tuple[Agent, threading.Thread]:
    logging.getLogger("httpx").setLevel(logging.WARNING)
    agent = build(config)
    thread = threading.Thread(target=agent.run, name="cloudnet-agent", daemon=True)
    thread.start()
    return agent, thread
