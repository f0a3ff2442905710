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
        if spec.nested is not None and env.command != "STATUS":  # (a pod in a VM: nested.py)
            return _nested(Nested(spec, client), env)
        if env.command == "ADD":
            return attachments.add(env)
        if env.command == "DEL":
            attachments.delete(env)
        elif env.command == "CHECK":
            attachments.check(env)
        elif env.command == "GC":
            attachments.gc()
        else:
            attachments.status()
        return None
    finally:
        client.close()


def _nested(nested: Nested, env: Env) -> dict[str, Any] | None:
    if env.command == "ADD":
        return nested.add(env)
    if env.command == "DEL":
        nested.delete(env)
    elif env.command == "CHECK":
        nested.check(env)
    else:
        nested.gc()
    return None
