"""The `cloudnet-netavark` executable, as netavark and podman run it: `create` (a network's JSON in and out),
`setup NETNS` (a StatusBlock out), `teardown NETNS`, `info`; errors as {"error": ...} with exit status 1.
And `gc [CONTAINER_ID...]` for the host's administrator: with a network's JSON on stdin (`podman network inspect
NAME`), remove the network's instances of this host whose container is not listed (killed, never torn down):
`podman network inspect --format '{{json .}}' NAME | cloudnet-netavark gc $(podman ps -q --no-trunc)`."""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from cloudnet import __version__
from cloudnet.cni import netconf, sandbox
from cloudnet.cni.errors import INVALID_CONFIG, CniError
from cloudnet.netavark import request
from cloudnet.netavark.status import status_block

API_VERSION = "1.0.0"
INFO = {"version": __version__, "api_version": API_VERSION,
        "description": "cloudnet: a container's namespace as a cloudnet instance (see cloudnet's README)"}  # fmt: skip
USAGE = "usage: cloudnet-netavark create | setup NETNS | teardown NETNS | info | gc [CONTAINER_ID...]"


def create(network: dict[str, Any]) -> dict[str, Any]:
    """The network as podman stores it: the options checked (the token file read), and no IPAM of podman's, as the
    addresses are cloudnet's (static ones are asked of cloudnet at setup)."""
    if network.get("subnets"):
        raise CniError(INVALID_CONFIG, "--subnet is not for a cloudnet network: its subnets are cloudnet's")
    request.netconf_of(network)
    return {**network, "subnets": [], "ipam_options": {"driver": "none"}, "dns_enabled": False}


def run(argv: Sequence[str], stdin: bytes) -> tuple[int, Any]:
    """(exit status, what to print) for one invocation."""
    try:
        command, args = (argv[0], list(argv[1:])) if argv else ("", [])
        if command == "info" and not args:
            return 0, INFO
        expected = {"create": 0, "setup": 1, "teardown": 1}.get(command)
        if command != "gc" and expected != len(args):
            raise CniError(INVALID_CONFIG, USAGE)
        given = netconf.parse_stdin(stdin)
        if command == "create":
            return 0, create(request.network_of(given, None))
        commands = importlib.import_module("cloudnet.cni.commands")  # (the HTTP client: only when it is used)
        if command == "gc":
            network = request.network_of(given, None)  # `podman network inspect --format '{{json .}}' NAME`
            for cid in args:
                netconf.attachment("GC", cid, "eth0", "/", request.LABELS)  # (each a container id)
            commands.execute(netconf.Env("GC"), request.netconf_of(network, valid=frozenset(args)))
            return 0, None
        if command == "setup":
            sandbox.check_is_netns(args[0], request.LABELS[2])
        env, spec = request.attachment("ADD" if command == "setup" else "DEL", given, args[0])
        result = commands.execute(env, spec)
        return 0, status_block(result) if result is not None else None
    except CniError as exc:
        shaped = exc.shape(netconf.LATEST)  # (its details name the request id, when there is one)
        return 1, {"error": f"{exc.msg}: {shaped['details']}" if "details" in shaped else exc.msg}
    except Exception as exc:  # a bug must still answer in netavark's shape, never with a bare traceback
        last = traceback.extract_tb(exc.__traceback__)[-1]
        return 1, {"error": f"cloudnet-netavark failed: {type(exc).__name__}: {exc} ({last.filename}:{last.lineno})"}


def main() -> None:
    status, answer = run(sys.argv[1:], sys.stdin.buffer.read(netconf.MAX_STDIN + 1))
    if answer is not None:
        sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # as cloudnet-cni: nothing left to clean up, and the interpreter's teardown is on every start


if __name__ == "__main__":
    main()
