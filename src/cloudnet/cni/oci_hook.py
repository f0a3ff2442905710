"""`cloudnet-oci-hook`: an OCI createRuntime hook that gives a container its cloudnet instance's SmartOS metadata
socket (RFD 69): the instance's directory, <state-dir>/zonecontrol/<uuid>, bind-mounted read-only at /.zonecontrol
(or /native/.zonecontrol, LX's place) in the container.

A CNI plugin sees only the network namespace, and the instance id exists only once ADD has run; the runtime runs
this hook after the CNI ADD (rootful podman sets the network up before it creates the container) and before
pivot_root, with the container's state on stdin. The instance is the one whose namespace the kernel shows the
container in: the runtime's configuration names the namespace's path, cloudnet is asked (with the runtime's token,
as cloudnet-cni asks) for the instance of this host in that namespace, and the container's /proc/PID/ns/net must be
that path's namespace. Nothing the container's owner gives (an annotation, its image) chooses the instance or the
host path. Any failure stops the container from starting (fail closed) with a message saying why.

Asked for with the annotation `io.cloudnet.mdata`: `zone` (or `true`) for /.zonecontrol, `lx` for
/native/.zonecontrol. A container without it is left alone (the hook does nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloudnet.cli.errors import CliError
from cloudnet.cli.resources import INSTANCE
from cloudnet.cni import mounts
from cloudnet.cni.errors import CniError
from cloudnet.cni.http import PluginClient
from cloudnet.cni.netconf import DEFAULT_TOKEN_FILE, DEFAULT_URL, read_token_file
from cloudnet.namespaces import spelled
from cloudnet.wire.mdata_paths import DIR_NAME, SOCKET_NAME, is_uuid

ANNOTATION = "io.cloudnet.mdata"
PLACES = {"zone": (".zonecontrol",), "true": (".zonecontrol",), "lx": ("native", ".zonecontrol")}
MAX_STATE = 1 << 20  # the runtime's state (with its annotations) and the bundle's config.json
REQUEST_TIMEOUT = 10.0


class HookError(Exception):
    """Why the container may not start."""


@dataclass(frozen=True)
class Options:
    url: str
    token_file: Path
    state_dir: Path
    host: str
    wait: float  # seconds to wait for the agent to put the socket in place


@dataclass(frozen=True)
class Container:
    id: str
    pid: int
    root: str  # the root filesystem's path, in the runtime's (and, before pivot_root, the container's) view
    netns: str  # the network namespace path the runtime's configuration names
    place: tuple[str, ...]


def read_state(data: bytes) -> Container | None:
    """The container the runtime describes, or None when it did not ask for its socket."""
    try:
        state = json.loads(data[:MAX_STATE])
    except ValueError:
        raise HookError("the runtime's state on stdin is not JSON") from None
    if not isinstance(state, dict):
        raise HookError("the runtime's state on stdin is not an object")
    annotations = state.get("annotations") or {}
    if not isinstance(annotations, dict) or ANNOTATION not in annotations:
        return None
    value = annotations[ANNOTATION]
    if value not in PLACES:
        raise HookError(f"annotation {ANNOTATION} must be one of {', '.join(sorted(PLACES))} (the socket's place "
                        f"in the container; the instance is always its own), not {str(value)[:64]!r}")  # fmt: skip
    pid, bundle, ident = state.get("pid"), state.get("bundle"), state.get("id")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1:
        raise HookError("the runtime's state has no container pid (run the hook at createRuntime or prestart)")
    if not isinstance(bundle, str) or not bundle.startswith("/") or not isinstance(ident, str):
        raise HookError("the runtime's state has no bundle path or container id")
    root, netns = _from_config(Path(bundle))
    return Container(ident, pid, root, netns, PLACES[value])


def _from_config(bundle: Path) -> tuple[str, str]:
    """The root path and the network namespace path of the bundle's config.json (written by the runtime)."""
    try:
        with open(bundle / "config.json", "rb") as f:
            config = json.loads(f.read(MAX_STATE * 16))
        root = str(config["root"]["path"])
        namespaces = config.get("linux", {}).get("namespaces") or []
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise HookError(f"cannot read the container's config.json in {bundle}: {exc}") from None
    netns = next((n.get("path") for n in namespaces if isinstance(n, dict) and n.get("type") == "network"), None)
    if not isinstance(netns, str) or not netns:
        raise HookError("the container's network namespace was not set up by a CNI runtime (no path in its "
                        "config.json): it has no cloudnet instance")  # fmt: skip
    return str(bundle / root), netns  # (an absolute root stays as it is)


def _ns_id(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def find_instance(container: Container, theirs: tuple[int, int], options: Options) -> str:
    """The id of the instance of this host in the container's network namespace (`theirs`, its (st_dev, st_ino)):
    the one cloudnet knows by the configuration's path, else (a container that joined another's namespace, as in a
    pod: the path is then /proc/PID/ns/net of the other) the one whose namespace path leads to the same namespace."""
    try:
        if _ns_id(spelled(container.netns)) != theirs:
            raise HookError(f"the container's process is not in {container.netns}, its configuration's namespace")
    except (OSError, ValueError) as exc:
        raise HookError(f"cannot compare the container's network namespace with {container.netns}: {exc}") from None
    try:
        token = read_token_file(options.token_file, required=False)
        client = PluginClient(options.url, token, REQUEST_TIMEOUT)
        try:
            found = client.list_all(INSTANCE, [("host", options.host), ("netns", container.netns)])
            if not found:
                found = client.list_all(INSTANCE, [("host", options.host)])
        finally:
            client.close()
    except (CniError, CliError) as exc:
        raise HookError(f"asking cloudnet at {options.url} for the container's instance: {exc}") from None
    mine = {str(i.get("id")) for i in found if i.get("host") == options.host and _same_ns(i.get("netns"), theirs)}
    if not mine:
        raise HookError(f"no cloudnet instance of host {options.host} in {container.netns} (is the container on a "
                        f"cloudnet-cni network, and the hook's token the plugin's?)")  # fmt: skip
    if len(mine) > 1 or not is_uuid(next(iter(mine))):
        raise HookError(f"cloudnet has {len(mine)} instances in the container's namespace: refusing to choose")
    return mine.pop()


def _same_ns(netns: Any, wanted: tuple[int, int]) -> bool:
    """Whether an instance's namespace (a name or path, as cloudnet stores it) is the namespace `wanted`."""
    try:
        return isinstance(netns, str) and _ns_id(spelled(netns)) == wanted
    except (OSError, ValueError):
        return False  # gone, or not a namespace path: not the container's


def socket_directory(options: Options, instance_id: str, wait: float) -> int:
    """An O_PATH descriptor of the instance's socket directory, once the agent has put the socket in it."""
    deadline = time.monotonic() + wait
    root = options.state_dir / DIR_NAME
    while True:
        try:
            top = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                fd = os.open(instance_id, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=top)
            finally:
                os.close(top)
            try:
                os.stat(SOCKET_NAME, dir_fd=fd, follow_symlinks=False)
                return fd
            except FileNotFoundError:
                os.close(fd)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise HookError(f"cannot open {root / instance_id}: {exc.strerror}") from None
        if time.monotonic() > deadline:
            raise HookError(f"no metadata socket at {root / instance_id / SOCKET_NAME} within {wait:g} s (is "
                            f"the agent of host {options.host} running with state directory "
                            f"{options.state_dir}?)")  # fmt: skip
        time.sleep(0.05)


def give_socket(container: Container, options: Options) -> str:
    """Mount the container's own instance's socket directory in it; the instance id."""
    # Both namespaces are held from the start: what is looked up and where the mount goes are the same process's.
    try:
        net = os.open(f"/proc/{container.pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise HookError(f"cannot open the namespaces of the container's process {container.pid}: {exc}") from None
    try:
        ns = os.open(f"/proc/{container.pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        os.close(net)
        raise HookError(f"cannot open the namespaces of the container's process {container.pid}: {exc}") from None
    try:
        theirs = os.fstat(net)
        if _ns_id("/proc/self/ns/mnt") == (os.fstat(ns).st_dev, os.fstat(ns).st_ino):
            raise HookError("the container shares the runtime's mount namespace: refusing to mount in the host's")
        instance_id = find_instance(container, (theirs.st_dev, theirs.st_ino), options)
        directory = socket_directory(options, instance_id, options.wait)
        try:
            tree = mounts.clone_read_only(directory)
        finally:
            os.close(directory)
        try:
            mounts.enter_mount_namespace(ns)  # from here on, paths are the container's (its root not pivoted yet)
            # Its root path is the runtime's, seen from the container's process root: setns put this process at
            # the namespace's own root, which is not the runtime's when the runtime runs in a chroot.
            seen = f"/proc/{container.pid}/root/{container.root.lstrip('/')}"
            target = mounts.directory_beneath(seen, container.place)
            try:
                mounts.attach(tree, target)
            finally:
                os.close(target)
        finally:
            os.close(tree)
    except mounts.MountError as exc:
        raise HookError(f"mounting the metadata socket at /{'/'.join(container.place)}: {exc}") from None
    except OSError as exc:
        raise HookError(f"mounting the metadata socket: {exc}") from None
    finally:
        os.close(ns)
        os.close(net)
    return instance_id


def parse_args(argv: Sequence[str]) -> Options:
    parser = argparse.ArgumentParser(prog="cloudnet-oci-hook", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="cloudnet's API (default %(default)s)")
    parser.add_argument("--token-file", default=DEFAULT_TOKEN_FILE, help="the runtime's token (cloudnet-cni's)")
    parser.add_argument("--state-dir", default="/var/lib/cloudnet", help="the host agent's state directory")
    parser.add_argument("--host", default=socket.gethostname(), help="the agent's host name (default: hostname)")
    parser.add_argument("--wait", type=float, default=10.0, help="seconds to wait for the socket (default 10)")
    parser.add_argument("--print-config", action="store_true",
                        help="print the hooks.d file that runs this hook, with these options, and exit")  # fmt: skip
    args = parser.parse_args(argv)
    if not 0 <= args.wait <= 300:
        parser.error("--wait must be within [0, 300]")
    if args.print_config:
        given = [a for a in argv if a != "--print-config"]
        print(json.dumps(hook_config(str(Path(sys.argv[0]).absolute()), given), indent=2))
        sys.exit(0)
    return Options(args.url, Path(args.token_file), Path(args.state_dir), args.host, args.wait)


def hook_config(executable: str, args: Sequence[str] = ()) -> dict[str, Any]:
    """The hooks.d file (podman's and CRI-O's format 1.0.0) that runs the hook at createRuntime, only for
    containers that ask. The runtime checks that `path` exists whenever it reads the file and fails every container
    if it does not: the path is /usr/bin/env, so a hook uninstalled later fails only the containers that ask."""
    return {
        "version": "1.0.0",
        "hook": {"path": "/usr/bin/env", "args": ["env", executable, *args], "timeout": 60},
        "when": {"annotations": {f"^{ANNOTATION.replace('.', '[.]')}$": ".*"}},
        "stages": ["createRuntime"],
    }


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        container = read_state(sys.stdin.buffer.read(MAX_STATE + 1))
        if container is not None:
            give_socket(container, options)
    except HookError as exc:
        sys.stderr.write(f"cloudnet-oci-hook: {exc}\n")
        sys.exit(1)
    except Exception as exc:  # a bug still stops the container, with one line saying so
        sys.stderr.write(f"cloudnet-oci-hook: failed: {type(exc).__name__}: {exc}\n")
        sys.exit(1)


if __name__ == "__main__":
    main()
