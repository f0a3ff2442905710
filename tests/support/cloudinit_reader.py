"""Read instance metadata with Debian cloud-init's own code and print what it got, as JSON.

Run with Debian's interpreter inside an instance namespace (the package installs into it, not the venv):
    ip netns exec <instance-ns> /usr/bin/python3 tests/support/cloudinit_reader.py http://169.254.169.254
It drives the readers the OpenStack and EC2 datasources use; it never runs the `cloud-init` command, which
would reconfigure the machine it runs on. Imports nothing from cloudnet.
    /usr/bin/python3 tests/support/cloudinit_reader.py --config-drive DIR
reads a config drive's file tree as the ConfigDrive datasource does (read_config_drive: cloud-init 22.4 and 25.1).
"""

from __future__ import annotations

import base64
import json
import logging
import sys
import time
from typing import Any

from cloudinit.sources import DataSourceConfigDrive, DataSourceOpenStack
from cloudinit.sources.helpers import ec2, openstack


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def config_drive(path: str) -> dict[str, Any]:
    """What the ConfigDrive datasource reads from a mounted drive; user data and the random seed (bytes) in
    base64, so that they compare byte for byte."""
    read = DataSourceConfigDrive.read_config_drive(path)
    seed = read["metadata"].pop("random_seed", b"")
    userdata = read.pop("userdata", b"")  # "" when the drive has none
    userdata = userdata if isinstance(userdata, bytes) else userdata.encode()
    return {**_plain(read), "userdata_b64": base64.b64encode(userdata).decode(), "random_seed_bytes": len(seed)}


def main() -> None:
    logging.basicConfig(level=logging.ERROR)
    if sys.argv[1] == "--config-drive":
        print(json.dumps(config_drive(sys.argv[2])))
        return
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
