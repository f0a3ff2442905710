"""`cloudnet serve`: open the store, migrate it, check the auth setup, run the API (uvicorn) and the metadata
API (wire/http_server.py) on one loop until SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import signal
import socket
import ssl
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import FrameType

import uvicorn

from cloudnet import api_socket, api_tls, heap, metrics, ovn_stack
from cloudnet.agent.run import start_in_thread
from cloudnet.api.app import create_app
from cloudnet.api.auth import Authenticator, TokenConfigError
from cloudnet.config import AgentConfig, ServerConfig
from cloudnet.errors import CloudnetError
from cloudnet.metadata import service as metadata_service
from cloudnet.metadata.peers import HostCertificates
from cloudnet.metadata.server import MetadataApp
from cloudnet.ovn.daemons import OvnError
from cloudnet.pki import cloud, x509
from cloudnet.pki.rotation import Reloader
from cloudnet.pki.tls import ServerFiles
from cloudnet.pki.x509 import Authority, PkiError
from cloudnet.services.context import Context, Role
from cloudnet.services.hosts import host_join
from cloudnet.services.identity.keystone import TokenSigner
from cloudnet.store.db import Store
from cloudnet.store.migrate import upgrade
from cloudnet.wire import logs, signing
from cloudnet.wire.http_server import HttpServer

log = logging.getLogger("cloudnet.server")
RELOAD_INTERVAL = 1.0  # seconds: how soon a renewed certificate file is taken in (or after SIGHUP)
RENEW_INTERVAL = 3600.0  # seconds between checks whether a certificate made here is due for renewal


class StartupError(RuntimeError):
    pass


class _Server(uvicorn.Server):
    """uvicorn, minus re-raising SIGTERM/SIGINT after its graceful shutdown: a requested stop that
    completed cleanly exits with status 0, as service managers and scripts expect. `companions` (the stop
    of the metadata server on the same loop) are called by the same signal."""

    def __init__(self, config: uvicorn.Config, companions: list[Callable[[], None]] | None = None) -> None:
        super().__init__(config)
        self.companions = companions or []
        self.reloader: Reloader | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        if self.reloader is not None:  # re-read the certificate files now (the rotation task does it)
            previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, lambda *_: self.reloader and self.reloader.request())
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        notifier = getattr(getattr(self.config.app, "state", None), "notifier", None)
        if notifier is not None:
            notifier.close()  # open long polls (agents following events) answer instead of delaying the stop
        super().handle_exit(sig, frame)
        for stop in self.companions:
            stop()


@dataclass(frozen=True)
class Companion:
    """A service `cloudnet up` runs beside the API (the Docker driver), acting through the API with an internal
    token of its own: `start(token)` starts it (on a thread of its own) and returns what stops it."""

    name: str
    project: str  # its token acts for this project, with `role`
    role: Role
    start: Callable[[str], Callable[[], None]]


@dataclass
class _Metadata:
    server: HttpServer
    sock: socket.socket
    listen: metadata_service.Listen
    tls: ssl.SSLContext | None  # (TLS when the API has it, on TCP: it crosses the underlay)
    certificates: HostCertificates | None

    def start(self) -> None:
        if self.certificates is not None:
            self.certificates.start()

    def close(self) -> None:
        if self.certificates is not None:
            self.certificates.stop()
        self.sock.close()
        if self.listen.path is not None:
            self.listen.path.unlink(missing_ok=True)


def prepare(config: ServerConfig, internal: dict[str, Context] | None = None) -> tuple[Store, Authenticator]:
    """Everything before listening: state dir, schema, and the token policy (`internal`: the server's own
    tokens, such as the one of the agent `cloudnet up` runs)."""
    config.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        signer = TokenSigner(signing.load_or_create_secret(config.keystone_secret_file))
        auth = Authenticator(config.tokens_file, signer, internal)
    except TokenConfigError as exc:
        raise StartupError(exc.message) from None
    except signing.SecretError as exc:
        raise StartupError(str(exc)) from None
    if auth.open_mode:
        if not config.loopback_bind:
            raise StartupError(
                f"refusing to listen on {config.host} without {config.tokens_file}: "
                "create a tokens file or bind to a loopback address"
            )
        log.warning(
            "no tokens file at %s: accepting any token as admin (loopback bind %s only)",
            config.tokens_file, config.host,
        )  # fmt: skip
    store = Store(config.database_url)
    upgrade(store)
    return store, auth


def prepare_tls(config: ServerConfig) -> tuple[Authority, ServerFiles | None]:
    """The cloud's CA (made at first start), and the listener's certificate when TLS is on."""
    try:
        ca = cloud.authority(config)
        files = api_tls.server_files(config, ca)
    except (PkiError, OSError) as exc:
        raise StartupError(str(exc)) from None
    if files is None and not config.loopback_bind:
        log.warning(
            "the API listens on %s in plain HTTP: tokens and agents' traffic cross the network in clear; "
            "use --tls (agents then join with `cloudnet host join-token`)", config.host,
        )  # fmt: skip
    return ca, files


def prepare_metadata(config: ServerConfig, store: Store, files: ServerFiles | None) -> _Metadata | None:
    """The metadata API of this process (None when `metadata_listen` is off): secret, settings, socket."""
    try:
        # Read even with the metadata API off: the API's config drives answer the same (create_app reads it too).
        settings = metadata_service.settings(config)
        listen = metadata_service.parse_listen(config.metadata_listen)
        if listen is None:
            return None
        secret = signing.load_or_create_secret(config.metadata_secret_file)
        context = None if files is None or listen.path is not None else api_tls.metadata_context(files)
        sock = metadata_service.bind(listen)
    except (signing.SecretError, metadata_service.MetadataConfigError, ssl.SSLError) as exc:
        raise StartupError(str(exc)) from None
    certificates = None if context is None else HostCertificates(store)  # (revoked hosts refused here too)
    server = HttpServer(MetadataApp(store, secret, settings), certificates=certificates)
    return _Metadata(server, sock, listen, context, certificates)


def own_agent_tls(config: ServerConfig, store: Store, ca: Authority, files: ServerFiles, agent: AgentConfig,
                  metadata_tls: bool) -> None:  # fmt: skip
    """This host's agent verifies the API as any other (its token is the server's own); with the metadata listener
    on TLS its relay needs a host certificate too: signed (and recorded, so revocable) at every start."""
    agent.server, agent.ca_file = agent.server.replace("http://", "https://", 1), files.ca
    if not metadata_tls or agent.metadata_url is None or not agent.metadata_url.startswith("http://"):
        return
    try:
        key = x509.new_key()
        cert = host_join.sign_own(store, ca, agent.host, x509.load_csr(x509.new_csr(agent.host, key).decode()))
    except (PkiError, CloudnetError) as exc:
        raise StartupError(f"cannot make a certificate for host {agent.host}'s agent: {exc}") from None
    agent.cert_file, agent.key_file = config.pki_dir / "agent.crt", config.pki_dir / "agent.key"
    x509.write_private(agent.key_file, x509.key_pem(key))
    x509.write_private(agent.cert_file, x509.cert_pem(cert))
    agent.metadata_url = agent.metadata_url.replace("http://", "https://", 1)


async def _rotate(reloader: Reloader, renewals: list[Callable[[], bool]]) -> None:
    """Take renewed certificates into the live listeners: re-read when their files change or on SIGHUP (checked
    every RELOAD_INTERVAL), and the certificates made here made again when due (checked every RENEW_INTERVAL)."""
    ticks = 0
    while True:
        await asyncio.sleep(RELOAD_INTERVAL)
        ticks += 1
        if ticks * RELOAD_INTERVAL >= RENEW_INTERVAL:
            ticks = 0
            for renew in renewals:
                try:
                    if renew():
                        log.info("a certificate made here was due for renewal: made again")
                except (PkiError, OSError) as exc:
                    log.warning("certificate renewal failed (retried in %g s): %s", RENEW_INTERVAL, exc)
        reloader.check()


def _run(server: _Server, sock: socket.socket, metadata: _Metadata | None, rotate: Reloader | None,
         renewals: list[Callable[[], bool]]) -> None:  # fmt: skip
    """Both servers on one loop until a signal (or either one failing) stops them both; beside them the rotation
    of their certificate (with `rotate`)."""
    if metadata is not None:
        server.companions.append(metadata.server.stop)
    if rotate is not None:
        server.reloader = rotate  # (SIGHUP)

    async def both() -> None:
        tasks = [asyncio.ensure_future(server.serve(sockets=[sock]))]
        if metadata is not None:
            metadata.start()
            tasks.append(asyncio.ensure_future(metadata.server.serve(metadata.sock, metadata.tls)))
        rotating = None if rotate is None else asyncio.ensure_future(_rotate(rotate, renewals))
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        server.should_exit = True
        if metadata is not None:
            metadata.server.stop()
        if rotating is not None:
            rotating.cancel()
        await asyncio.gather(*tasks)

    with asyncio.Runner(loop_factory=server.config.get_loop_factory()) as runner:
        runner.run(both())


def serve(config: ServerConfig, agent: AgentConfig | None = None, companions: Sequence[Companion] = ()) -> None:
    """Run the API until SIGTERM; with `agent`, also this host's agent in the same process (`cloudnet up`), and
    `companions` beside it (each with an internal token of its own, valid while this process runs)."""
    try:  # first: a second `cloudnet up` stops here, in one line, before it touches anything
        sock = api_socket.bind(config.host, config.port)
    except OSError as exc:
        raise StartupError(exc.strerror or str(exc)) from None
    logs.setup()  # (in the format the command chose: --log-format)
    internal = {}
    if agent is not None:  # the agent beside the server acts as admin whatever the tokens file says (or becomes)
        agent.token = secrets.token_urlsafe(32)
        internal[agent.token] = Context.admin()
    tokens = {c.name: secrets.token_urlsafe(32) for c in companions}
    internal.update({tokens[c.name]: Context.of_role(c.project, c.role) for c in companions})
    try:
        store, auth = prepare(config, internal)
        try:
            ca, tls = prepare_tls(config)
            metadata = prepare_metadata(config, store, tls)
        except StartupError:
            store.dispose()
            raise
    except StartupError:
        sock.close()
        raise
    metrics.enabled = config.metrics  # (the process's hot paths time themselves only with metrics on)
    app = create_app(config, store, auth, ca)
    scheme = "https" if tls else "http"
    log.info("cloudnet API on %s://%s:%d/v2.0 (state %s, db %s)", scheme, config.host, config.port,
             config.state_dir, store.dialect)  # fmt: skip
    if metadata is not None:
        log.info("metadata API on %s (signed requests from agents only%s)", metadata.listen,
                 ", over TLS with their host certificates" if metadata.tls else "")  # fmt: skip
    reloader = None if tls is None else Reloader(tls.cert, tls.key)  # the API's and the metadata listener's
    if reloader is not None and metadata is not None and metadata.tls is not None:
        reloader.contexts.append(metadata.tls)
    server = _Server(
        uvicorn.Config(app, host=config.host, port=config.port, log_level="warning", access_log=False,
                       loop="uvloop", timeout_graceful_shutdown=5, **api_tls.uvicorn_options(tls, reloader))
    )  # fmt: skip
    running = ovn = None
    if config.dataplane == "ovn":
        try:
            ovn = ovn_stack.start(config, store, agent)
        except OvnError as exc:
            store.dispose()
            sock.close()
            raise StartupError(f"OVN did not start: {exc}") from None
        config.ovn_remote_sb = ovn.remote_sb  # (what joining hosts are told)
        print(f"OVN: ovn-nbctl --db={ovn.nb_url} show  (SB {ovn.sb_url})", flush=True)
        if ovn.remote_sb:
            print(f"  other hosts: cloudnet agent --dataplane ovn --ovn-sb {ovn.remote_sb} ...", flush=True)
        config.ovn_gateway_chassis = list(ovn.sync.gateway_chassis)  # (what the API shows is what NB gets)
        if agent is not None and ovn.chassis is not None:  # this host's agent drives its chassis
            agent.dataplane, agent.ovn_sb, agent.ovs_db = "ovn", ovn.sb_url, ovn.chassis.ovs_url
    if agent is not None:
        if tls is not None:
            try:
                own_agent_tls(config, store, ca, tls, agent, metadata is not None and metadata.tls is not None)
            except StartupError:
                if ovn is not None:
                    ovn.stop()
                store.dispose()
                sock.close()
                raise
        running, _thread = start_in_thread(agent)
        url = f"{scheme}://{config.host}:{config.port}"
        print(
            f"cloudnet is up: API {url}/v2.0, agent for host {agent.host}\n"
            f"  CLI:  cloudnet --url {url}{'' if tls is None else f' --cacert {tls.ca}'} network list   (or set "
            f"CLOUDNET_URL{'' if tls is None else ', CLOUDNET_CACERT'})\n"
            f"  SDK:  clouds.yaml with auth_type: password and auth_url {url}/v3 (users: cloudnet user set)",
            flush=True,
        )
    if tls is not None:
        print(f"  TLS:  CA {tls.ca} (fingerprint sha256:{ca.fingerprint}); other hosts join with "
              "`cloudnet host join-token NAME`, then `cloudnet agent --join URL TOKEN`", flush=True)  # fmt: skip
    stops: list[Callable[[], None]] = []
    heap.freeze_startup()
    try:
        for companion in companions:  # (the API's socket listens already: their first calls wait for it)
            try:
                stops.append(companion.start(tokens[companion.name]))
            except OSError as exc:
                raise StartupError(f"{companion.name} did not start: {exc.strerror or exc}") from None
        renewals: list[Callable[[], bool]] = []
        if tls is not None:
            renewals.append(functools.partial(api_tls.renew_if_due, config, ca, tls))
            if ovn is not None and ovn.own_central:
                renewals.append(functools.partial(ovn_stack.renew_ssl_if_due, config, store))
        _run(server, sock, metadata, reloader, renewals)
    finally:
        for stop in stops:
            stop()
        if running is not None:
            running.stop()
        if ovn is not None:
            ovn.stop()
        if metadata is not None:
            metadata.close()
        store.dispose()
