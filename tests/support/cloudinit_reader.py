"""Read instance metadata with Debian cloud-init's own code and print what it got, as JSON.

Run with Debian's interpreter inside an instance namespace (the package installs into it, not the venv):
    ip netns exec <instance-ns> /usr/bin/python3 tests/support/cloudinit_reader.py http://169.254.169.254
It drives the readers the OpenStack and EC2 datasources use; it never runs the `cloud-init` command, which
would reconfigure the machine it runs on. Imports nothing from cloudnet.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from cloudinit.sources import DataSourceOpenStack
from cloudinit.sources.helpers import ec2, openstack


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def main() -> None:
    logging.basicConfig(level=logging.ERROR)
    url = sys.argv[1]
    out: dict[str, Any] = {}
    started = time.perf_counter()
    # The OpenStack datasource's read: /openstack, the newest known version's files, then the EC2 crawl of
    # http://169.254.169.254/latest/meta-data/ (hard-wired in cloud-init).
    v2 = openstack.MetadataReader(url, timeout=5, retries=0).read_v2()
    out["crawl_seconds"] = time.perf_counter() - started
    out["openstack"] = _plain(v2)
    networkdata = v2.get("networkdata") or {}
    macs = {link["ethernet_mac_address"]: f"eth{i}" for i, link in enumerate(networkdata.get("links", []))}
    out["network_config"] = _plain(openstack.convert_net_json(networkdata, known_macs=macs)) if networkdata else None
    out["read_metadata_service_uuid"] = DataSourceOpenStack.read_metadata_service(url, timeout=5, retries=0)[
        "metadata"
    ]["uuid"]
    out["ec2_metadata"] = _plain(ec2.get_instance_metadata(api_version="latest", metadata_address=url, timeout=5,
                                                           retries=0))  # fmt: skip
    out["ec2_userdata"] = _plain(ec2.get_instance_userdata(api_version="latest", metadata_address=url, timeout=5,
                                                           retries=0))  # fmt: skip
    print(json.dumps(out))


if __name__ == "__main__":
    main()
