"""`openstack floating ip ...` and `openstack floating ip port forwarding ...` (python-openstackclient, unmodified)
against the live server, and what they made seen through the forwards API."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.api.test_floating_ips import public, tenant
from tests.support.server import RunningServer


@pytest.fixture
def backend() -> str:
    """One backend: each `openstack` run costs seconds, and the API under it is tested on both elsewhere."""
    return "sqlite"


def _openstack(clouds: Path, *args: str) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env.update(OS_CLIENT_CONFIG_FILE=str(clouds), OS_CLOUD="cloudnet", OS_TOKEN="admin")
    exe = Path(sys.executable).parent / "openstack"
    shows = args[0].rsplit(" ", 1)[-1] in ("create", "show", "list")  # set, unset, delete print nothing
    argv = [str(exe), *args, *(["-f", "json"] if shows else [])]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, (args, done.stderr)
    return yaml.safe_load(done.stdout) if done.stdout.strip() else None


def test_openstack_floating_ip_commands(api: httpx.Client, server: RunningServer, tmp_path: Path) -> None:
    clouds = tmp_path / "clouds.yaml"
    clouds.write_text(yaml.safe_dump({"clouds": {"cloudnet": {
        "auth_type": "admin_token", "auth": {"endpoint": server.url + "/v2.0"},
        "network_endpoint_override": server.url + "/v2.0", "identity_endpoint_override": server.url + "/v3",
    }}}))  # fmt: skip
    ext = public(api)
    a = tenant(api, ext["id"], 1)
    port = a.port(name="web")
    fixed = port["fixed_ips"][0]["ip_address"]

    made = _openstack(clouds, "floating ip create", "--description", "front", "public")
    fip_id, address = made["id"], made["floating_ip_address"]
    assert made["status"] == "DOWN" and made["description"] == "front" and address.startswith("192.0.2.")

    _openstack(clouds, "floating ip set", "--port", "web", fip_id)
    shown = _openstack(clouds, "floating ip show", address)
    assert (shown["port_id"], shown["fixed_ip_address"], shown["router_id"]) == (port["id"], fixed, a.router["id"])
    (fwd,) = api.get(f"/networks/{a.network['id']}/forwards").json()["forwards"]
    assert (fwd["listen_address"], fwd["config"]) == (address, {"target_address": fixed})

    _openstack(clouds, "floating ip unset", "--port", fip_id)
    assert api.get(f"/floatingips/{fip_id}").json()["floatingip"]["port_id"] is None
    assert api.get(f"/networks/{a.network['id']}/forwards").json()["forwards"] == []

    pf = _openstack(clouds, "floating ip port forwarding create", "--internal-ip-address", fixed, "--port", "web",
                    "--internal-protocol-port", "22", "--external-protocol-port", "2222", "--protocol", "tcp",
                    "--description", "ssh", fip_id)  # fmt: skip
    assert (pf["internal_port"], pf["external_port"], pf["internal_port_id"]) == (22, 2222, port["id"])
    listed = api.get(f"/floatingips/{fip_id}/port_forwardings").json()["port_forwardings"]
    assert [p["id"] for p in listed] == [pf["id"]]
    (fwd,) = api.get(f"/networks/{a.network['id']}/forwards").json()["forwards"]
    assert [(p["listen_port"], p["target_port"], p["target_address"]) for p in fwd["ports"]] == [("2222", "22", fixed)]
    assert api.delete(f"/floatingips/{fip_id}/port_forwardings/{pf['id']}").status_code == 204

    _openstack(clouds, "floating ip delete", fip_id)
    assert api.get("/floatingips").json()["floatingips"] == []
