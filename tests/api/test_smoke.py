from __future__ import annotations

import httpx


def test_network_subnet_port_roundtrip(api: httpx.Client) -> None:
    net = api.post("/networks", json={"network": {"name": "n1"}}).json()["network"]
    sub = api.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.0.0.0/24"}}).json()["subnet"]
    port = api.post("/ports", json={"port": {"network_id": net["id"], "name": "p1"}})
    assert port.status_code == 201, port.text
    body = port.json()["port"]
    assert body["fixed_ips"] == [{"subnet_id": sub["id"], "ip_address": "10.0.0.2"}]
    assert body["mac_address"].startswith("fa:16:3e:")
    assert api.get("/ports", params={"name": "p1"}).json()["ports"][0]["id"] == body["id"]
