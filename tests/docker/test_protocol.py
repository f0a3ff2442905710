"""The plugin protocol as dockerd speaks it (libnetwork docs/remote.md, docs/ipam.md), against a real server:
the handshake and capabilities, the IPAM and network calls of `docker network create`, and what a hostile or
broken caller gets: {"Err": ...} with the reason, never a traceback, nothing done."""

from __future__ import annotations

from typing import Any

import httpx

NID = "a" * 64
EID = "b" * 64


def test_handshake_and_capabilities(driver_for: Any) -> None:
    d = driver_for("admin")
    assert d.call("Plugin.Activate").json() == {"Implements": ["NetworkDriver", "IpamDriver"]}
    assert d.call("NetworkDriver.GetCapabilities").json()["Scope"] == "local"
    assert d.call("IpamDriver.GetDefaultAddressSpaces").json() == {
        "LocalDefaultAddressSpace": "cloudnet-local", "GlobalDefaultAddressSpace": "cloudnet-global"}  # fmt: skip
    assert d.call("IpamDriver.GetCapabilities").json()["RequiresMACAddress"] is False
    assert d.call("NetworkDriver.NoSuchMethod").status_code == 404  # libnetwork: unknown methods are 404


def _network(d: Any, cidr: str = "10.77.0.0/24") -> dict[str, Any]:
    pool = d.call("IpamDriver.RequestPool", {"AddressSpace": "cloudnet-local", "Pool": cidr, "SubPool": "",
                                             "Options": {}, "V6": False}).json()  # fmt: skip
    gateway = {"RequestAddressType": "com.docker.network.gateway"}
    gw = d.call("IpamDriver.RequestAddress", {"PoolID": pool["PoolID"], "Address": "", "Options": gateway})
    assert gw.json()["Address"] == cidr.replace("0/24", "1/24")
    r = d.call("NetworkDriver.CreateNetwork", {"NetworkID": NID, "Options": {"com.docker.network.generic": {}},
               "IPv4Data": [{"AddressSpace": "cloudnet-local", "Pool": cidr, "Gateway": gw.json()["Address"],
                             "AuxAddresses": None}], "IPv6Data": []})  # fmt: skip
    assert r.status_code == 200 and r.json() == {}, r.text
    return dict(pool)


def test_network_endpoint_lifecycle_without_join(driver_for: Any, api: httpx.Client) -> None:
    d = driver_for("admin")
    pool = _network(d)
    net = api.get("/networks", params={"name": f"docker-{NID[:12]}"}).json()["networks"]
    assert len(net) == 1 and api.get("/subnets", params={"network_id": net[0]["id"]}).json()["subnets"][0][
        "gateway_ip"] == "10.77.0.1"  # fmt: skip
    addr = d.call("IpamDriver.RequestAddress", {"PoolID": pool["PoolID"], "Address": "", "Options": {}}).json()
    ip = addr["Address"].split("/")[0]
    r = d.call("NetworkDriver.CreateEndpoint", {"NetworkID": NID, "EndpointID": EID, "Options": {},
               "Interface": {"Address": addr["Address"], "AddressIPv6": "", "MacAddress": ""}})  # fmt: skip
    port = api.get("/ports", params={"network_id": net[0]["id"]}).json()["ports"]
    assert [p["fixed_ips"][0]["ip_address"] for p in port] == [ip]
    assert r.json() == {"Interface": {"MacAddress": port[0]["mac_address"]}}
    info = d.call("NetworkDriver.EndpointOperInfo", {"NetworkID": NID, "EndpointID": EID}).json()
    assert info["Value"]["cloudnet.port.id"] == port[0]["id"]
    assert d.call("NetworkDriver.DeleteEndpoint", {"NetworkID": NID, "EndpointID": EID}).json() == {}
    assert d.call("IpamDriver.ReleaseAddress", {"PoolID": pool["PoolID"], "Address": ip}).json() == {}
    assert api.get("/ports", params={"network_id": net[0]["id"]}).json()["ports"] == []
    assert d.call("NetworkDriver.DeleteNetwork", {"NetworkID": NID}).json() == {}
    assert d.call("IpamDriver.ReleasePool", {"PoolID": pool["PoolID"]}).json() == {}
    assert api.get(f"/networks/{net[0]['id']}").status_code == 404


def test_overlapping_pool_refused(driver_for: Any) -> None:
    d = driver_for("admin")
    _network(d, "10.78.0.0/24")
    r = d.call("IpamDriver.RequestPool", {"AddressSpace": "cloudnet-local", "Pool": "10.78.0.0/16"})
    assert r.status_code == 500 and "overlaps" in r.json()["Err"]


def test_another_projects_network_and_port(driver_for: Any, users: dict[str, httpx.Client]) -> None:
    """Driver acting for alice; bob's network and port are not found, whatever dockerd's options say."""
    bob_net = users["bob"].post("/networks", json={"network": {"name": "b"}}).json()["network"]
    users["bob"].post("/subnets", json={"subnet": {"network_id": bob_net["id"], "cidr": "10.79.0.0/24"}})
    bob_port = users["bob"].post("/ports", json={"port": {"network_id": bob_net["id"]}}).json()["port"]
    d = driver_for("alice-token")
    r = d.call("NetworkDriver.CreateNetwork", {"NetworkID": NID, "Options": {"com.docker.network.generic": {
        "cloudnet.network": bob_net["id"]}}, "IPv4Data": [{"AddressSpace": "x", "Pool": "10.79.0.0/24"}]})  # fmt: skip
    assert r.status_code == 500 and "could not be found" in r.json()["Err"]
    _network(d, "10.80.0.0/24")
    r = d.call("NetworkDriver.CreateEndpoint", {"NetworkID": NID, "EndpointID": EID,
                                                "Options": {"cloudnet.port": bob_port["id"]}})  # fmt: skip
    assert r.status_code == 500 and "could not be found" in r.json()["Err"]
    assert users["bob"].get(f"/ports/{bob_port['id']}").json()["port"]["device_id"] == ""
    r = d.call("NetworkDriver.CreateEndpoint", {"NetworkID": NID, "EndpointID": EID,
                                                "Options": {"cloudnet.port": "../../networks"}})  # fmt: skip
    assert r.status_code == 500 and "invalid cloudnet id" in r.json()["Err"]


def test_hostile_bodies(driver_for: Any) -> None:
    d = driver_for("admin")
    r = d.client.post("/NetworkDriver.Join", content=b"{not json")
    assert r.status_code == 400 and r.json() == {"Err": "malformed JSON"}
    r = d.client.post("/NetworkDriver.Join", content=b"[" * 60000)
    assert r.status_code == 400 and r.json() == {"Err": "malformed JSON"}
    r = d.client.post("/NetworkDriver.CreateNetwork", content=b"{" + b" " * (80 * 1024) + b"}")
    assert r.status_code == 413 and "over" in r.json()["Err"]
    r = d.call("NetworkDriver.Join", {"NetworkID": NID, "EndpointID": "../x", "SandboxKey": "/proc/1/ns/net"})
    assert r.status_code == 400 and "EndpointID" in r.json()["Err"]
    for method in ("NetworkDriver.Join", "NetworkDriver.Leave", "NetworkDriver.EndpointOperInfo",
                   "NetworkDriver.DeleteEndpoint"):  # fmt: skip
        r = d.call(method, {"NetworkID": NID, "EndpointID": EID, "SandboxKey": "/x"})
        assert r.status_code == 500 and r.json() == {"Err": f"unknown endpoint {EID}"}
    r = d.call("IpamDriver.RequestAddress", {"PoolID": "nope", "Address": ""})
    assert r.status_code == 500 and "unknown pool" in r.json()["Err"]
    assert d.call("Plugin.Activate").status_code == 200  # still serving


def test_a_pool_without_subnet_is_a_free_block_of_the_default_range(driver_for: Any) -> None:
    """`docker network create -d cloudnet --ipam-driver cloudnet NAME` with no --subnet: as Docker's own IPAM and
    Kuryr's default subnet pool, a block no other pool of the address space overlaps."""
    d = driver_for("admin")

    def pool(**body: Any) -> str:
        r = d.call("IpamDriver.RequestPool", {"AddressSpace": "cloudnet-local", **body})
        assert r.status_code == 200, r.text
        return str(r.json()["Pool"])

    assert pool(Pool="10.213.1.0/24") == "10.213.1.0/24"  # a user's pool inside the range is skipped
    assert [pool(), pool(), pool()] == ["10.213.0.0/24", "10.213.2.0/24", "10.213.3.0/24"]
    assert pool(V6=True) == "fd00:cd::/64"
    r = d.call("IpamDriver.RequestPool", {"AddressSpace": "cloudnet-local", "Pool": "10.213.0.0/16"})
    assert r.status_code == 500 and "overlaps" in r.json()["Err"]  # the given ones are still checked
