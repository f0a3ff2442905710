"""cloudnet-netavark run as netavark and podman run it (a subcommand, JSON on stdin), with a network made from
the same options a test gives cloudnet-cni (tests/support/cni.py's CniCloud.conf)."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from tests.support.cni import PLUGIN, CniCloud

NETAVARK_PLUGIN = PLUGIN.with_name("cloudnet-netavark")  # the console script `make deps` installs
Answer = tuple[int, Any]


def run_plugin(stdin: dict[str, Any] | bytes | str, *args: str) -> Answer:
    """(exit status, decoded stdout) of one run."""
    data = stdin if isinstance(stdin, bytes) else (stdin if isinstance(stdin, str) else json.dumps(stdin)).encode()
    proc = subprocess.run([str(NETAVARK_PLUGIN), *args], input=data, capture_output=True, timeout=90)
    assert not proc.stderr.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else None


def network(rig: CniCloud, **options: Any) -> dict[str, Any]:
    """A network as podman stores it after `create`: the configuration's keys as options (None drops one)."""
    conf = {k: v for k, v in rig.conf(**options).items() if v is not None}
    given = {k: ",".join(v) if isinstance(v, list) else str(v) for k, v in conf.items()
             if k not in ("cniVersion", "name", "type")}  # fmt: skip
    return {"name": conf["name"], "id": "f" * 64, "driver": "cloudnet-netavark", "ipv6_enabled": False,
            "internal": False, "dns_enabled": False, "options": given, "ipam_options": {"driver": "none"}}  # fmt: skip


def request(net: dict[str, Any], container_id: str, ifname: str = "eth0", **per: Any) -> dict[str, Any]:
    """setup's and teardown's input: the network, the container and its per-network options."""
    return {"container_id": container_id, "container_name": f"c-{container_id[:8]}", "network": net,
            "network_options": {"interface_name": ifname, "aliases": [container_id[:12]], **per}}  # fmt: skip
