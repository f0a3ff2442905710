"""The plugin's HTTP face: one POST per method of libnetwork's protocol, JSON in and out, every failure as
{"Err": "..."} (never a traceback), bodies bounded before they are read whole, on a Unix socket only root reaches."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import stat
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import uvicorn
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from cloudnet.docker import ipam, network, sandbox
from cloudnet.docker import protocol as proto
from cloudnet.docker.cloudnet_api import Json, PluginError
from cloudnet.docker.plugin import Plugin

log = logging.getLogger("cloudnet.docker")
MEDIA = "application/vnd.docker.plugins.v1+json"

Handler = Callable[[Plugin, Any], Awaitable[Json]]


def _fixed(value: Json) -> Handler:
    async def answer(_plugin: Plugin, _body: Any) -> Json:
        return value

    return answer


# method -> (request model, or None for no payload; handler)
METHODS: dict[str, tuple[type[BaseModel] | None, Handler]] = {
    "Plugin.Activate": (None, _fixed({"Implements": ["NetworkDriver", "IpamDriver"]})),
    "NetworkDriver.GetCapabilities": (None, _fixed(network.capabilities())),
    "NetworkDriver.CreateNetwork": (proto.CreateNetwork, network.create_network),
    "NetworkDriver.DeleteNetwork": (proto.NetworkRef, network.delete_network),
    "NetworkDriver.CreateEndpoint": (proto.CreateEndpoint, network.create_endpoint),
    "NetworkDriver.EndpointOperInfo": (proto.EndpointRef, network.endpoint_info),
    "NetworkDriver.DeleteEndpoint": (proto.EndpointRef, network.delete_endpoint),
    "NetworkDriver.Join": (proto.Join, sandbox.join),
    "NetworkDriver.Leave": (proto.EndpointRef, sandbox.leave),
    "NetworkDriver.DiscoverNew": (None, _fixed({})),
    "NetworkDriver.DiscoverDelete": (None, _fixed({})),
    "NetworkDriver.ProgramExternalConnectivity": (None, _fixed({})),
    "NetworkDriver.RevokeExternalConnectivity": (None, _fixed({})),
    "IpamDriver.GetCapabilities": (None, _fixed(ipam.capabilities())),
    "IpamDriver.GetDefaultAddressSpaces": (None, _fixed(ipam.default_spaces())),
    "IpamDriver.RequestPool": (proto.PoolRequest, ipam.request_pool),
    "IpamDriver.ReleasePool": (proto.PoolRef, ipam.release_pool),
    "IpamDriver.RequestAddress": (proto.AddressRequest, ipam.request_address),
    "IpamDriver.ReleaseAddress": (proto.AddressRequest, ipam.release_address),
}


def _err(message: str, status: int) -> JSONResponse:
    return JSONResponse({"Err": message}, status_code=status, media_type=MEDIA)


async def _body(request: Request) -> bytes | None:
    """The body, or None once it is over proto.MAX_BODY (declared or streamed)."""
    declared = request.headers.get("content-length", "0")
    if not declared.isdigit() or int(declared) > proto.MAX_BODY:
        return None
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > proto.MAX_BODY:
            return None
    return bytes(data)


def _invalid(exc: proto.ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "body"
    return f"invalid request: {where}: {first['msg']}"[:300]


def create_app(plugin: Plugin) -> Starlette:
    async def call(request: Request) -> JSONResponse:
        method = request.path_params["method"]
        if method not in METHODS:
            return _err(f"{method[:80]} is not implemented", 404)  # libnetwork: unknown methods are 404
        model, handler = METHODS[method]
        raw = await _body(request)
        if raw is None:
            return _err(f"request body over {proto.MAX_BODY} bytes", 413)
        try:
            data = json.loads(raw) if raw.strip() else None
        except (ValueError, RecursionError):
            return _err("malformed JSON", 400)
        try:
            body = model.model_validate(data) if model is not None else None
        except proto.ValidationError as exc:
            return _err(_invalid(exc), 400)
        try:
            return JSONResponse(await handler(plugin, body), media_type=MEDIA)
        except PluginError as exc:
            log.info("%s: %s", method, exc.message)
            return _err(exc.message, 500)
        except Exception:  # one bad call answers an error; the driver keeps serving
            log.exception("%s failed", method)
            return _err(f"{method} failed inside the driver (see its log)", 500)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        await plugin.api.close()

    return Starlette(routes=[Route("/{method:str}", call, methods=["POST"])], lifespan=lifespan)


def bind(path: Path) -> socket.socket:
    """The plugin socket, root's only (dockerd runs as root): whoever reaches it creates ports in the driver's
    project. A stale socket of an earlier run is replaced; anything else at the path is left alone."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            path.unlink()
    except FileNotFoundError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    sock.listen(128)
    return sock


def start_in_thread(plugin: Plugin, path: Path) -> Callable[[], None]:
    """Serve dockerd on `path` from a thread of its own (its own event loop), once it is up; returns the stop."""
    sock = bind(path)
    server = uvicorn.Server(uvicorn.Config(create_app(plugin), log_level="warning", access_log=False, lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="docker-driver", daemon=True)
    thread.start()
    started = threading.Event()
    while not server.started and thread.is_alive():
        started.wait(0.005)

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
        path.unlink(missing_ok=True)

    if not server.started:
        stop()
        raise OSError(f"the Docker driver did not start on {path}")
    return stop


def serve(plugin: Plugin, path: Path) -> None:
    """Serve dockerd on `path` (e.g. /run/docker/plugins/cloudnet.sock: the plugin is then named `cloudnet`)."""
    sock = bind(path)
    config = uvicorn.Config(create_app(plugin), log_level="warning", access_log=False, lifespan="on")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
        path.unlink(missing_ok=True)
