"""schemathesis against a cloudnet started here, as an admin and as a member: no 5xx, no answer that breaks the
schema /openapi.json gives for it (nor a status or content type it does not document).

The server is seeded with one of each resource first, so that lists and shows answer real representations for
the response schemas to check; schemathesis then runs its coverage, fuzzing and stateful phases (the stateful
one chains creates into shows, updates and deletes through the links it infers). Runtime is bounded by the
examples per operation (about a minute a token on 2 cores).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cloudnet.config import ServerConfig
from cloudnet.store.db import Store
from tests.support.api import create
from tests.support.server import RunningServer

TOKENS = {"st-admin": {"project_id": "ops", "role": "admin"}, "st-member": {"project_id": "alice"}}
CHECKS = "not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance"
EXAMPLES = 10  # per operation and phase (the coverage phase adds its own deterministic cases)
# One worker: with two, hypothesis (describing its filter lambdas) runs ast.parse in both threads at once, which
# CPython 3.11 can fail with "SystemError: AST constructor recursion depth mismatch", a crash of the tool rather
# than a finding. The run is CPU-bound on shared cores, so one worker takes no longer (~40 s a token).
WORKERS = 1
# The stateful phase leaves out the quota sub-resources: a link it infers may fill `project_id` with an empty
# value, which the client collapses into /v2.0/quotas/details, a different operation (the quota of a project
# named "details") whose answer it then checks against the sub-resource's schema.
CONFIG = """
[[operations]]
include-path-regex = "^/v2.0/quotas/[{]project_id[}]/(details|default)$"
phases.stateful.enabled = false
"""


@pytest.fixture(scope="module")
def cloudnet(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[RunningServer]:
    state = tmp_path_factory.mktemp("schemathesis")
    shutil.copyfile(sqlite_template, state / "cloudnet.db")
    # Long polls of /v2.0/events end at once: the run is about answers, not waiting.
    config = ServerConfig(state_dir=state, metadata_listen="off", max_event_wait=0.05)
    config.tokens_file.write_text(json.dumps({"tokens": TOKENS}))
    store = Store(f"sqlite:///{state / 'cloudnet.db'}")
    server = RunningServer.start(config, store)
    yield server
    server.stop()
    store.dispose()


def seed(url: str, token: str, host: str) -> None:
    """One of each resource the token may make, so that reads answer more than empty lists."""
    with httpx.Client(base_url=url + "/v2.0", headers={"X-Auth-Token": token}, timeout=30) as api:
        admin = token == "st-admin"
        with httpx.Client(base_url=url + "/v2.0", headers={"X-Auth-Token": "st-admin"}, timeout=30) as ops:
            # (registered for either token: the admin run's fuzzing may have deleted it, as an admin may)
            assert ops.put(f"/hosts/{host}", json={"host": {"agent_version": "st"}}).status_code == 200
        if admin:
            attrs = {"router:external": True, "cloudnet:routes": ["198.51.100.0/24"]}  # forwards listen there
            public = create(api, "networks", "network", name="public", **attrs)
            create(api, "subnets", "subnet", network_id=public["id"], cidr="192.0.2.0/24")
        net = create(api, "networks", "network", name=f"net-{token}", tags=["seeded"])
        sub = create(api, "subnets", "subnet", network_id=net["id"], cidr="10.40.0.0/24")
        create(api, "subnets", "subnet", network_id=net["id"], cidr="fd00:40::/64", ip_version=6)
        port = create(api, "ports", "port", network_id=net["id"], name="seeded")
        gateway = {"external_gateway_info": {"network_id": public["id"]}} if admin else {}
        router = create(api, "routers", "router", name="seeded", **gateway)
        r = api.put(f"/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]})
        assert r.status_code == 200, r.text
        group = create(api, "security-groups", "security_group", name="seeded")
        create(api, "security-group-rules", "security_group_rule", security_group_id=group["id"],
               direction="ingress", protocol="tcp", port_range_min=22, port_range_max=22)  # fmt: skip
        create(
            api,
            "instances",
            "instance",
            name="seeded",
            host=host,
            nets=[{"port": port["id"]}],
            metadata={"role": "web"},
        )
        if admin:
            r = api.post(f"/networks/{net['id']}/forwards",
                         json={"listen_address": "198.51.100.80", "ports": [{"protocol": "tcp", "listen_port": "80",
                               "target_address": port["fixed_ips"][0]["ip_address"]}]})  # fmt: skip
            assert r.status_code == 201, r.text


@pytest.mark.parametrize("token", ["st-admin", "st-member"])
def test_schemathesis_finds_nothing(cloudnet: RunningServer, token: str, tmp_path: Path) -> None:
    seed(cloudnet.url, token, "st-host")
    st = Path(sys.executable).parent / "st"
    config = tmp_path / "schemathesis.toml"
    cmd = [str(st), "--config-file", str(config), "run", f"{cloudnet.url}/openapi.json", "--url", cloudnet.url,
           "--header", f"X-Auth-Token: {token}", "--checks", CHECKS, "--phases", "coverage,fuzzing,stateful",
           "--max-examples", str(EXAMPLES), "--workers", str(WORKERS), "--request-timeout", "30", "--no-color",
           "--report", "junit", "--report-junit-path", str(tmp_path / "junit.xml")]  # fmt: skip
    config.write_text(CONFIG)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path)
    out = done.stdout + done.stderr
    failures = out[out.find("=== FAILURES ===") : out.find("=== SUMMARY ===")]
    assert done.returncode == 0, (failures or out)[-20000:]
    assert "Tested: " in out and " passed" in out, out[-5000:]
