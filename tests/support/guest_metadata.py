"""The host's real agent with its metadata proxy, and cloud-init's readers run inside an instance."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cloudnet.agent.client import ApiClient
from cloudnet.agent.metadata.mdata_service import MdataService
from cloudnet.agent.metadata.proxy import MetadataProxy
from cloudnet.dataplane.linux.driver import LinuxDataplane
from cloudnet.metadata.model import Settings
from cloudnet.metadata.server import MetadataApp
from tests.support.cloud import Cloud, running_agent
from tests.support.installed import DEBIAN_PYTHON, require_cloud_init
from tests.support.metadata import RunningMetadata
from tests.support.server import RunningServer

SECRET = "proxy-test-secret"
READER = str(Path(__file__).resolve().parent / "cloudinit_reader.py")


@contextlib.contextmanager
def agent_with_proxy(
    cloud: Cloud,
    server: RunningServer,
    park: bool = False,
    dataplane: LinuxDataplane | None = None,
    report: dict[str, Any] | None = None,
    mdata_dir: Path | None = None,
) -> Iterator[MetadataProxy]:
    """The host's agent with the proxy as it runs it (an observer of the desired state, in the namespaces the
    driver builds), and a metadata API on the server's store; with `mdata_dir`, the SmartOS metadata sockets too
    (under mdata_dir/zonecontrol)."""
    app = MetadataApp(server.store, SECRET, Settings(), poll_interval=0.05)
    metadata = RunningMetadata.start(app)
    proxy = MetadataProxy(cloud.host, metadata.url, SECRET, retry_interval=0.1, burst=200)  # 3 boots of reads
    observers: list[Any] = [proxy]
    client = ApiClient(server.url, cloud.host, "admin")  # the mdata service's (guests' writes go to the API)
    if mdata_dir is not None:
        observers.append(MdataService(mdata_dir, client, check_interval=0.5))
    try:
        dataplane = dataplane or LinuxDataplane(cloud.host, cloud.uplinks, park=park)
        with running_agent(server.url, cloud.host, dataplane, report, observers=observers) as agent:
            cloud.agent = agent
            yield proxy
    finally:
        cloud.agent = None
        for observer in observers:
            observer.close()
        client.close()
        metadata.stop()


def read_as_cloud_init(inst: dict[str, Any]) -> dict[str, Any]:
    """cloud-init's OpenStack and EC2 readers, run inside the instance, get its own metadata (returned)."""
    require_cloud_init()
    run = subprocess.run(["ip", "netns", "exec", inst["netns"], DEBIAN_PYTHON, READER, "http://169.254.169.254"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    got: dict[str, Any] = json.loads(run.stdout)
    assert got["openstack"]["metadata"]["uuid"] == inst["id"]
    assert got["ec2_metadata"]["local-ipv4"] == inst["nets"][0]["fixed_ips"][0]["ip_address"]
    return got
