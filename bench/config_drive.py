"""Config drive benchmark (issue 28): how long `GET /v2.0/instances/{id}/config-drive` takes to build its ISO 9660
image for an instance with user data, ssh keys, metadata and two NICs, through a real `cloudnet serve` over HTTP
(the whole request: the instance's view, the OpenStack and EC2 trees, the image). Prints figures beside the target;
asserts nothing.

Usage: .venv/bin/python bench/config_drive.py [--requests N]
"""

from __future__ import annotations

import argparse
import time

import httpx
from common import cloudnet_server, ms, percentile, pin_client, row

HOST = "bench-host"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    print("config drive (ISO 9660, config-2) built per request")
    with cloudnet_server() as url, httpx.Client(base_url=url + "/v2.0", headers={"X-Auth-Token": "admin"},
                                                timeout=60) as api:  # fmt: skip
        pin_client()
        assert api.put(f"/hosts/{HOST}", json={"host": {"agent_version": "bench"}}).status_code == 200
        net = api.post("/networks", json={"network": {"name": "cd"}}).json()["network"]
        for cidr in ("10.40.0.0/24", "fd40::/64"):
            r = api.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": cidr}})
            assert r.status_code == 201, r.text
        body = {"name": "vm", "kind": "vm", "host": HOST, "user_data": "#cloud-config\n" + "# padding\n" * 2000,
                "metadata": {f"k{i}": "v" * 100 for i in range(50)},
                "ssh_keys": [{"name": f"key{i}", "key": "ssh-ed25519 " + "A" * 68 + f" k{i}"} for i in range(5)],
                "nets": [{"network": net["id"]}, {"network": net["id"]}]}  # fmt: skip
        r = api.post("/instances", json={"instance": body})
        assert r.status_code == 201, r.text
        path = f"/instances/{r.json()['instance']['id']}/config-drive"
        size = len(api.get(path).content)
        times = []
        for _ in range(args.requests):
            started = time.perf_counter()
            response = api.get(path)
            times.append(time.perf_counter() - started)
            assert response.status_code == 200
        p50 = percentile(times, 50)
        row(f"image of {size // 1024} KiB, p50 ({args.requests} requests)", ms(p50), "<= 50 ms", p50 <= 0.050)
        row("p99", ms(percentile(times, 99)), "(reported)")


if __name__ == "__main__":
    main()
