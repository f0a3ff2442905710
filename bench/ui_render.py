"""Web UI benchmark (issue 30): headless Debian chromium (Selenium) against a `cloudnet serve`. Prints figures
beside their targets; asserts nothing.

  first render of the ports page with 1,000 ports: from navigation to the table drawn (page, scripts, API reads)
  the topology map with 500 instances: from navigation to the map drawn (grouped, as it opens), and every group
  expanded (500 instance nodes drawn, then painted)

Each is the median of RUNS fresh page loads (the browser's cache off: every file is fetched again).
Usage: .venv/bin/python bench/ui_render.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import httpx
from common import cloudnet_server, median, row
from selenium.webdriver import Chrome

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.browser import chromium, wait_for

PORTS, INSTANCES, NETWORKS = 1_000, 500, 10
WHO = json.dumps({"user": "bench", "project": "admin", "admin": True})


def populate(url: str) -> None:
    with httpx.Client(base_url=url + "/v2.0", headers={"X-Auth-Token": "bench"}, timeout=300) as api:
        ext = api.post("/networks", json={"network": {"name": "public", "router:external": True}}).json()["network"]
        api.post("/subnets", json={"subnet": {"network_id": ext["id"], "cidr": "192.0.2.0/24", "ip_version": 4}})
        gateway = {"network_id": ext["id"]}
        router = api.post("/routers", json={"router": {"name": "edge", "external_gateway_info": gateway}})
        router_id = router.json()["router"]["id"]
        api.put("/hosts/bench-host", json={"host": {"agent_version": "bench", "report": {}}}).raise_for_status()
        for k in range(NETWORKS):
            net = api.post("/networks", json={"network": {"name": f"net{k}"}}).json()["network"]
            sub = api.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": f"10.{k}.0.0/16",
                                                        "ip_version": 4}}).json()["subnet"]  # fmt: skip
            api.put(f"/routers/{router_id}/add_router_interface", json={"subnet_id": sub["id"]}).raise_for_status()
            per = INSTANCES // NETWORKS
            made = api.post(
                "/instances",
                json={
                    "instances": [
                        {"name": f"vm-{k}-{i}", "host": "bench-host", "nets": [{"network": net["id"]}]}
                        for i in range(per)
                    ]
                },
            )
            made.raise_for_status()
            if k == 0:  # the rest of the 1,000 ports (beside the instances', the routers' and metadata's): plain ones
                plain = [{"network_id": net["id"]} for _ in range(PORTS - INSTANCES)]
                api.post("/ports", json={"ports": plain}).raise_for_status()
                api.post(
                    f"/networks/{net['id']}/forwards",
                    json={
                        "listen_address": "192.0.2.10",
                        "ports": [{"protocol": "tcp", "listen_port": "80", "target_address": "10.0.0.5"}],
                    },
                ).raise_for_status()


def rendered_ms(driver: Chrome, url: str, page: str) -> float:
    """ms from navigation start to the page's data drawn (the app's performance mark)."""
    driver.get("about:blank")
    driver.get(f"{url}/ui/#/{page}")
    script = f"return performance.getEntriesByName('cloudnet:rendered:{page}').map(e => e.startTime)[0]"
    return float(wait_for(lambda: driver.execute_script(script), timeout=60, why=f"{page} drawn"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    with cloudnet_server(server_cpu=None) as url:
        populate(url)
        driver = chromium()
        try:
            driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": True})
            driver.get(url + "/ui/")
            driver.execute_script("sessionStorage.setItem('cloudnet.token', 'bench');"
                                  f"sessionStorage.setItem('cloudnet.who', {json.dumps(WHO)})")  # fmt: skip
            ports_page = [rendered_ms(driver, url, "ports") for _ in range(runs)]
            rows = driver.execute_script("return document.querySelectorAll('#page tbody tr').length")
            grouped = [rendered_ms(driver, url, "map") for _ in range(runs)]
            expanded = []
            for _ in range(runs):
                rendered_ms(driver, url, "map")
                expanded.append(
                    driver.execute_async_script("""
                    const done = arguments[arguments.length - 1];
                    const t0 = performance.now();
                    document.querySelector('button[aria-label="Expand every group of instances"]').click();
                    requestAnimationFrame(() => setTimeout(() => done(performance.now() - t0), 0));""")
                )
            nodes = driver.execute_script("return document.querySelectorAll('svg.map g.instance').length")
        finally:
            driver.quit()
    print(f"web UI, headless chromium 1280x800, median of {runs} loads (cache off)")
    row(f"ports page first render ({rows} rows)", f"{median(ports_page):.0f} ms", "<= 1000 ms",
        median(ports_page) <= 1000)  # fmt: skip
    row(f"map, {INSTANCES} instances, grouped", f"{median(grouped):.0f} ms", "<= 2000 ms", median(grouped) <= 2000)
    total = median(grouped) + median(expanded)
    row(f"map, all expanded ({nodes} instance nodes)", f"{total:.0f} ms", "<= 2000 ms", total <= 2000)
    row("  of which expanding (draw + paint)", f"{median(expanded):.0f} ms", "-")


if __name__ == "__main__":
    main()
