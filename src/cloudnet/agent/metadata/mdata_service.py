"""SmartOS metadata sockets: one per instance of this host, at <state>/zonecontrol/<uuid>/metadata.sock for a
container, at <state>/vmserial/<uuid>/ttyb for a VM (its second serial port, which its VMM connects to:
mdata_serial; a VM has no filesystem to mount a zone socket into, so it gets none).

`MdataService` is a StateObserver of the host agent (`update(state)` after every reconcile). It runs its
own asyncio loop in a thread and, for every instance in the desired state, serves the metadata protocol
(wire/mdata_protocol) over the key space of that instance (keyspace). GETs and KEYS are answered from memory;
PUT and DELETE go to the API (the store is the only truth), and the guest reads its own write at once.

Socket placement follows RFD 69 (mdata_sockets); each guest connection is an mdata_connection.Connection.
The path is checked on every update and every `check_interval` seconds: a socket file that vanished, or one
nobody listens on, is recreated; one another live service took over (a newer agent) is left to it. Stopping
the service leaves the files, so a restarted agent takes the same paths over (and instances never see their
mount change).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import threading
from collections.abc import Awaitable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import httpx
import uvloop

from cloudnet import metrics
from cloudnet.agent.client import ApiClient, InstanceMetadata, error_message
from cloudnet.agent.metadata import keyspace, mdata_sockets
from cloudnet.agent.metadata.keyspace import KeySpace, UnservableValue
from cloudnet.agent.metadata.mdata_connection import Answer, Bucket, Connection, Instance
from cloudnet.agent.metadata.mdata_serial import SerialConnection, blocked_at, vm_access
from cloudnet.wire import mdata_keys
from cloudnet.wire.mdata_paths import DIR_NAME, SERIAL_DIR_NAME, SERIAL_SOCKET_NAME, SOCKET_NAME, is_uuid
from cloudnet.wire.mdata_protocol import (
    DELETE,
    FAILURE,
    GET,
    KEYS,
    MAX_LINE,
    NOTFOUND,
    PUT,
    SUCCESS,
    Reply,
    Request,
    parse_put_payload,
    parse_request,
    response,
)

log = logging.getLogger("cloudnet.mdata")
T = TypeVar("T")
COMMANDS = frozenset({GET, KEYS, PUT, DELETE})  # (a metric label: anything else a guest sends is "other")


class MdataService:
    """Serves every instance of the desired state its metadata socket. Call `close()` to stop."""

    def __init__(
        self,
        state_dir: Path,
        client: ApiClient,
        *,
        datacenter_name: str | None = None,
        check_interval: float = 5.0,
        max_connections: int = 32,
        max_line: int = MAX_LINE,
        idle_timeout: float = 300.0,
        write_rate: float = 10.0,
        write_burst: int = 50,
        vm_group: int | None = None,
    ) -> None:
        self.root = Path(state_dir) / DIR_NAME
        self.serial_root = Path(state_dir) / SERIAL_DIR_NAME
        self.vm_access = vm_access(vm_group)  # the VMMs' group reaches the serial sockets
        self.client = client
        self.datacenter_name = datacenter_name
        self.check_interval = check_interval
        self.max_connections = max_connections  # per instance: a guest cannot use up the agent's descriptors
        self.max_line = max_line
        self.idle_timeout = idle_timeout  # a connection with no request for this long is closed
        self.write_rate, self.write_burst = write_rate, write_burst
        self._instances: dict[str, Instance] = {}
        self._revision = -1
        self._swept = False
        self._closed = False
        self._tmp_serial = 0
        self._api = ThreadPoolExecutor(max_workers=4, thread_name_prefix="cloudnet-mdata-api")
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)  # host users stay out; guests reach only their own bind-mounted directory
        mdata_sockets.ensure_directory(self.serial_root, self.vm_access)
        if (blocked := blocked_at(self.serial_root, vm_group)) is not None:
            log.warning("VMMs of group %s cannot search %s: they will not reach VMs' serial metadata sockets",
                        vm_group, blocked)  # fmt: skip
        self._loop = uvloop.new_event_loop()  # faster than asyncio's for many small requests
        self._thread = threading.Thread(target=self._loop.run_forever, name="cloudnet-mdata", daemon=True)
        self._thread.start()
        self._checker = self._call(self._start_checker())

    # -- public, from any thread --

    def socket_path(self, instance_id: str) -> Path:
        return self.root / instance_id / SOCKET_NAME

    def serial_path(self, instance_id: str) -> Path:
        """Where a VM instance's VMM connects its second serial port (wire/mdata_paths.serial_socket)."""
        return self.serial_root / instance_id / SERIAL_SOCKET_NAME

    def directory(self, instance_id: str) -> Path:
        """What a runtime bind-mounts read-only into the instance (SmartOS: at /.zonecontrol)."""
        return self.root / instance_id

    def update(self, state: Mapping[str, Any]) -> None:
        """Follow a desired state: serve its instances, drop the others. Returns once sockets are in place."""
        if self._closed:
            return
        views = {
            inst["id"]: (keyspace.build(inst, state, self.datacenter_name), inst.get("kind") == "vm")
            for inst in state.get("instances") or []
            # (a VM a compute service plugs with plain ports has no instance here to keep its metadata)
            if is_uuid(inst.get("id")) and not inst.get("compute_service")
        }
        self._call(self._apply(views, int(state.get("revision", -1))))

    def check(self) -> None:
        """Check every socket now (the periodic check does the same)."""
        if not self._closed:
            self._call(self._check_all())

    def dropped(self, instance_id: str) -> int:
        """How many malformed or spoofed frames an instance's socket dropped."""
        inst = self._instances.get(instance_id)
        return inst.dropped if inst else 0

    def close(self) -> None:
        """Stop serving; socket files stay for the next agent to take over."""
        if self._closed:
            return
        self._closed = True
        try:
            self._call(self._shutdown())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            if not self._thread.is_alive():
                self._loop.close()
            self._api.shutdown(wait=False, cancel_futures=True)

    def _call(self, coro: Awaitable[T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)  # type: ignore[arg-type]

    # -- loop thread --

    async def _start_checker(self) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(self._check_periodically())

    async def _check_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval)
            try:
                await self._check_all()
            except Exception:  # one bad check must not end the checking
                log.exception("metadata socket check failed")

    async def _apply(self, views: dict[str, tuple[KeySpace, bool]], revision: int) -> None:
        self._revision = max(self._revision, revision)
        for iid in [i for i, inst in self._instances.items() if i not in views or views[i][1] != inst.vm]:
            await self._remove(self._instances.pop(iid))  # gone, or now of the other kind (another channel)
        for iid, (keys, vm) in views.items():
            inst = self._instances.get(iid)
            if inst is None:
                writes = Bucket(self.write_rate, self.write_burst, self.write_burst)
                inst = self._instances[iid] = Instance(iid, keys, keys, writes, vm=vm)
            inst.base = keys
            if inst.pending is not None and revision >= inst.pending.revision:
                inst.pending = None  # the desired state includes our write now
            inst.keys = keys if inst.pending is None else keys.with_metadata(
                inst.pending.metadata, inst.pending.internal_metadata
            )  # fmt: skip
        await self._check_all()
        if not self._swept:  # directories left by instances that went while no agent ran
            self._swept = True
            self._sweep(self.root, SOCKET_NAME, {iid for iid, (_keys, vm) in views.items() if not vm})
            self._sweep(self.serial_root, SERIAL_SOCKET_NAME, {iid for iid, (_keys, vm) in views.items() if vm})

    async def _check_all(self) -> None:
        for inst in list(self._instances.values()):
            try:
                await self._ensure(inst)
            except OSError as exc:
                log.error("cannot serve the metadata socket of instance %s: %s", inst.id, exc)

    async def _ensure(self, inst: Instance) -> None:
        """Make sure `inst` is served at its path; recreate what vanished or went stale."""
        path = self._path(inst)
        st = mdata_sockets.lstat(path)
        here = (st.st_dev, st.st_ino) if st is not None and stat.S_ISSOCK(st.st_mode) else None
        if inst.server is not None and inst.server.is_serving() and here is not None and here == inst.ident:
            return
        if here is not None and here != inst.ident and inst.ident is not None and mdata_sockets.listening(path):
            # Someone replaced the socket we served with a live one. At start-up we take a path over (the
            # previous agent's socket); afterwards a newer service did the same to us: it is its socket now.
            if not inst.yielded:
                log.warning("metadata socket of instance %s was taken over; leaving it", inst.id)
                inst.yielded = True
                await self._stop_serving(inst)
            return
        if inst.server is not None or inst.yielded:
            log.warning("metadata socket of instance %s vanished or went stale; recreating it", inst.id)
        await self._stop_serving(inst, keep_connections=True)
        inst.yielded = False
        await self._bind(inst)

    def _path(self, inst: Instance) -> Path:
        return self.serial_path(inst.id) if inst.vm else self.socket_path(inst.id)

    async def _bind(self, inst: Instance) -> None:
        self._tmp_serial += 1
        path = self._path(inst)
        if inst.vm:
            mdata_sockets.ensure_directory(self.serial_root, self.vm_access)
            sock, ident = mdata_sockets.bind(path.parent, self._tmp_serial, path.name, access=self.vm_access)
        else:
            sock, ident = mdata_sockets.bind(path.parent, self._tmp_serial)
        kind = SerialConnection if inst.vm else Connection
        loop = asyncio.get_running_loop()
        inst.server = await loop.create_unix_server(lambda: kind(self, inst), sock=sock)
        inst.ident = ident
        log.info("serving metadata for instance %s at %s", inst.id, path)

    async def _stop_serving(self, inst: Instance, keep_connections: bool = False) -> None:
        if inst.server is not None:
            inst.server.close()
            inst.server = None
        if not keep_connections:
            for conn in list(inst.connections):
                conn.abort()

    async def _remove(self, inst: Instance) -> None:
        """The instance left this host: stop serving and remove its socket and directory."""
        await self._stop_serving(inst)
        path = self._path(inst)
        st = mdata_sockets.lstat(path)
        if st is not None and (st.st_dev, st.st_ino) == inst.ident:
            with contextlib.suppress(OSError):
                path.unlink()
        mdata_sockets.remove_directory(path.parent, path.name)
        log.info("stopped serving metadata for instance %s", inst.id)

    def _sweep(self, root: Path, socket_name: str, keep: set[str]) -> None:
        try:
            names = os.listdir(root)
        except OSError:
            return
        for name in names:
            if name not in keep and is_uuid(name):
                path = root / name / socket_name
                st = mdata_sockets.lstat(path)
                if st is not None and stat.S_ISSOCK(st.st_mode) and not mdata_sockets.listening(path):
                    with contextlib.suppress(OSError):
                        path.unlink()
                mdata_sockets.remove_directory(root / name, socket_name)

    async def _shutdown(self) -> None:
        if self._checker is not None:
            self._checker.cancel()
        for inst in self._instances.values():
            await self._stop_serving(inst)

    # -- requests --

    def answer(self, inst: Instance, line: bytes) -> Answer:
        """The reply to one line: bytes now, None (dropped), or a coroutine function for a write."""
        parsed = parse_request(line)
        if parsed is None:
            inst.dropped += 1
            log.debug("instance %s: dropped a malformed frame", inst.id)
            metrics.MDATA_REQUESTS.labels("invalid", "dropped").inc()
            return None
        if isinstance(parsed, Reply):
            metrics.MDATA_REQUESTS.labels("negotiate", "answered").inc()
            return parsed.data
        command = parsed.op if parsed.op in COMMANDS else "other"
        metrics.MDATA_REQUESTS.labels(command, "write" if parsed.op in (PUT, DELETE) else "answered").inc()
        return self._answer(inst, parsed)

    def _answer(self, inst: Instance, req: Request) -> Answer:
        if req.op == GET:
            key = _text(req.arg)
            if not key:
                return response(req, FAILURE, b"Invalid GET Request")
            try:
                value = inst.keys.get(key)
            except UnservableValue:
                return response(req, FAILURE)
            return response(req, NOTFOUND) if value is None else response(req, SUCCESS, value.encode())
        if req.op == KEYS:
            return response(req, SUCCESS, "\n".join(inst.keys.names()).encode())
        if req.op in (PUT, DELETE) and req.v2:  # v1 has no writes (mdata-put refuses to run on a v1 host)
            return lambda: self._write(inst, req)
        return response(req, FAILURE, f"Unknown command {req.op}".encode())

    async def _write(self, inst: Instance, req: Request) -> bytes:
        if req.op == PUT:
            parsed = parse_put_payload(req.arg)
            value = _text(parsed[1], strip=False) if parsed else None
            key = parsed[0] if parsed else None
            if not key or value is None:
                return response(req, FAILURE, b"Invalid PUT Request")
        else:
            key, value = _text(req.arg), None
            if not key:
                return response(req, FAILURE, b"Invalid DELETE Request")
        why = mdata_keys.refusal(key, inst.keys.namespaces) or mdata_keys.key_error(key)
        if why:
            return response(req, FAILURE, why.encode())
        if not inst.writes.take(asyncio.get_running_loop().time()):
            return response(req, FAILURE, b"Too many metadata writes; try again later")
        async with inst.write_lock:  # one write at a time per instance, in the order guests sent them
            try:
                snapshot = await self._store(inst.id, key, value)
            except httpx.HTTPStatusError as exc:
                log.warning("instance %s: %s of %r refused: %s", inst.id, req.op, key, error_message(exc))
                return response(req, FAILURE, error_message(exc).encode())
            except httpx.HTTPError as exc:
                log.warning("instance %s: %s of %r failed: %s", inst.id, req.op, key, exc)
                return response(req, FAILURE, b"metadata store unavailable")
            if snapshot.revision > self._revision and inst is self._instances.get(inst.id):
                inst.pending = snapshot  # until a desired state as new as this write arrives
                inst.keys = inst.base.with_metadata(snapshot.metadata, snapshot.internal_metadata)
        return response(req, SUCCESS, b"OK")

    async def _store(self, instance_id: str, key: str, value: str | None) -> InstanceMetadata:
        def call() -> InstanceMetadata:
            if value is not None:
                return self.client.put_instance_metadata(instance_id, key, value)
            self.client.delete_instance_metadata(instance_id, key)  # no such key: still OK, as in SmartOS
            return self.client.instance_metadata(instance_id)

        return await asyncio.get_running_loop().run_in_executor(self._api, call)


def _text(raw: bytes | None, strip: bool = True) -> str | None:
    if raw is None:
        return None
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        return None
    return text.strip() if strip else text
