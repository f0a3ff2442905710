"""Start the agent (alone, or beside the server in `cloudnet up`) and stop it on SIGTERM."""

from __future__ import annotations

import logging
import signal
import threading

from cloudnet.agent.agent import Agent, StateObserver
from cloudnet.agent.client import ApiClient
from cloudnet.agent.metadata.mdata_service import MdataService
from cloudnet.agent.metadata.proxy import MetadataProxy
from cloudnet.config import AgentConfig, group_id
from cloudnet.dataplane import drivers
from cloudnet.pki import tls
from cloudnet.wire import signing

log = logging.getLogger("cloudnet.agent")


def build(config: AgentConfig) -> Agent:
    context = None if config.ca_file is None else tls.client_context(config.ca_file, config.cert_file, config.key_file)
    client = ApiClient(config.server, config.host, config.token, tls=context)
    report = drivers.host_report(config)
    dataplane = drivers.build(config, report)  # shares `report` with the Agent (the driver may refresh parts)
    observers: list[StateObserver] = []
    if config.metadata_url:
        # 169.254.169.254 in every network namespace of this host, signing with the server's secret.
        # Over https (a joined host's) with the same context as the API's: the CA pinned, this host's certificate.
        relay_tls = context if config.metadata_url.startswith("https://") else None
        observers.append(MetadataProxy(config.host, config.metadata_url, signing.read_secret(config.secret_file),
                                       tls=relay_tls))  # fmt: skip
    # SmartOS metadata sockets under <state>/zonecontrol/<uuid>/, and VMs' serial ports under <state>/vmserial/
    # (guests' writes go through the API).
    observers.append(
        MdataService(
            config.state_dir,
            client,
            idle_timeout=config.mdata_idle_timeout,
            max_line=config.mdata_max_line,
            max_connections=config.mdata_max_connections,
            vm_group=group_id(config.vm_group),
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
