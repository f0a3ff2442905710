"""`cloudnet serve`: open the store, migrate it, check the auth setup, run uvicorn until SIGTERM."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator

import uvicorn

from cloudnet.api.app import create_app
from cloudnet.api.auth import Authenticator, TokenConfigError
from cloudnet.config import AgentConfig, ServerConfig
from cloudnet.store.db import Store
from cloudnet.store.migrate import upgrade

log = logging.getLogger("cloudnet.server")


class StartupError(RuntimeError):
    pass


class _Server(uvicorn.Server):
    """uvicorn, minus re-raising SIGTERM/SIGINT after its graceful shutdown: a requested stop that
    completed cleanly exits with status 0, as service managers and scripts expect."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def prepare(config: ServerConfig) -> tuple[Store, Authenticator]:
    """Everything before listening: state dir, schema, and the token policy."""
    config.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        auth = Authenticator(config.tokens_file)
    except TokenConfigError as exc:
        raise StartupError(exc.message) from None
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


def serve(config: ServerConfig, agent: AgentConfig | None = None) -> None:
    """Run the API until SIGTERM; with `agent`, also this host's agent in the same process (`cloudnet up`)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    store, auth = prepare(config)
    app = create_app(config, store, auth)
    log.info("cloudnet API on http://%s:%d/v2.0 (state %s, db %s)", config.host, config.port, config.state_dir,
             store.dialect)  # fmt: skip
    server = _Server(
        uvicorn.Config(app, host=config.host, port=config.port, log_level="warning", access_log=False,
                       http="httptools", loop="uvloop", timeout_graceful_shutdown=5)
    )  # fmt: skip
    running = None
    if agent is not None:
        from cloudnet.agent.run import start_in_thread

        running, _thread = start_in_thread(agent)
        print(
            f"cloudnet is up: API http://{config.host}:{config.port}/v2.0, agent for host {agent.host}\n"
            f"  CLI:  cloudnet --url http://{config.host}:{config.port} network list   (or set CLOUDNET_URL)\n"
            f"  SDK:  clouds.yaml with auth_type: none and endpoint http://{config.host}:{config.port}/v2.0",
            flush=True,
        )
    try:
        server.run()
    finally:
        if running is not None:
            running.stop()
        store.dispose()
