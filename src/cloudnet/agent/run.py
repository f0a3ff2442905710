"""Start the agent (alone, or beside the server in `cloudnet up`) and stop it on SIGTERM."""

from __future__ import annotations

import logging
import signal
import ssl
import threading
from pathlib import Path

from cloudnet.agent import join as joining
from cloudnet.agent.agent import Agent, StateObserver
from cloudnet.agent.client import ApiClient, servers_of
from cloudnet.agent.metadata.mdata_service import MdataService
from cloudnet.agent.metadata.proxy import MetadataProxy
from cloudnet.config import AgentConfig, group_id
from cloudnet.dataplane import drivers
from cloudnet.pki import rotation, tls, x509
from cloudnet.wire import logs, signing

log = logging.getLogger("cloudnet.agent")
RENEW_RETRY = 60.0  # seconds between tries of a renewal that failed
RENEW_CHECK = 3600.0  # seconds at most between looks at the certificate (a clock that jumped, a file replaced)


def renew_when_due(state_dir: Path, servers: list[str], context: ssl.SSLContext, stop: threading.Event,
                   ovn_member: str | None = None) -> None:  # fmt: skip
    """A joined host's certificate renewed at 2/3 of its lifetime (agent/join.py: over the current one, taken into
    `context` in place; `ovn_member`: a cluster member's), retried every RENEW_RETRY seconds while the server
    refuses or cannot be reached."""
    cert_file = joining.Joined.files(state_dir)[1]
    while not stop.is_set():
        try:
            wait = rotation.seconds_to_renewal(x509.load_cert(cert_file))
            if wait <= 0:
                joining.renew(state_dir, context, servers, ovn_member=ovn_member)
                continue
        except (joining.JoinError, x509.PkiError, OSError) as exc:
            log.warning("this host's certificate was not renewed (again in %g s): %s", RENEW_RETRY, exc)
            wait = RENEW_RETRY
        stop.wait(min(wait, RENEW_CHECK))


def build(config: AgentConfig) -> Agent:
    context = None if config.ca_file is None else tls.client_context(config.ca_file, config.cert_file, config.key_file)
    if context is not None and config.cert_file == joining.Joined.files(config.state_dir)[1]:
        threading.Thread(target=renew_when_due, args=(config.state_dir, servers_of(config.server), context,
                                                      threading.Event()), daemon=True,
                         name="cloudnet-renewal").start()  # fmt: skip
    client = ApiClient(
        config.server, config.host, config.token, tls=context, availability_zone=config.availability_zone
    )
    report = drivers.host_report(config)
    dataplane = drivers.build(config, report)  # shares `report` with the Agent (the driver may refresh parts)
    observers: list[StateObserver] = []
    if config.metadata_url:
        # 169.254.169.254 in every network namespace of this host, signing with the server's secret.
        # Over https (a joined host's) with the same context as the API's: the CA pinned, this host's certificate.
        relay_tls = context if "https://" in config.metadata_url else None
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
    logs.setup(threaded=False)  # (in the format the command chose: --log-format)
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
