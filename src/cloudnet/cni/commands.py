"""The commands that talk to cloudnet (ADD, DEL, CHECK, STATUS, GC) over the plugin's HTTP client."""

from __future__ import annotations

from typing import Any

from cloudnet.cni.attachments import Attachments
from cloudnet.cni.http import PluginClient
from cloudnet.cni.nested import Nested
from cloudnet.cni.netconf import Env, NetConf

REQUEST_TIMEOUT = 10.0  # one API request; the wait for ACTIVE has the configuration's own bound


def execute(env: Env, spec: NetConf) -> dict[str, Any] | None:
    """ADD's result, or None; a failure raises CniError."""
    client = PluginClient(spec.url, spec.token, REQUEST_TIMEOUT)
    try:
        attachments = Attachments(spec, client)
        if env.command == "STATUS":
            attachments.status()
            return None
        # A pod in a VM, on its trunk (nested.py), or a container of this host (attachments.py): the same commands.
        target: Attachments | Nested = Nested(spec, client) if spec.nested is not None else attachments
        if env.command == "ADD":
            return target.add(env)
        if env.command == "DEL":
            target.delete(env)
        elif env.command == "CHECK":
            target.check(env)
        else:
            target.gc()
        return None
    finally:
        client.close()
