"""What deleting a network with forwards and SNAT addresses really does (docs/forwards.md, "Life cycle"): refused
(409 NetworkInUse) while they keep its router link, detaching refused too, nothing changed by either; then the
documented order (forwards, SNAT addresses, router interfaces, network) works, command for command, through the
real CLI against the live server."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.test_forward_lifecycle import state
from tests.api.test_forwards import Site, build_site, url
from tests.support.cli import Cli
from tests.support.server import RunningServer

SNAT = "198.51.100.9"  # in the site's routed range


@pytest.fixture
def site(api: httpx.Client) -> Site:
    return build_site(api)


@pytest.fixture
def cli(server: RunningServer) -> Cli:
    return Cli(server.url)


def forwards(api: httpx.Client, network: dict[str, Any]) -> list[str]:
    return sorted(f["listen_address"] for f in api.get(url(network["id"])).json()["forwards"])


def test_a_network_with_forwards_is_deleted_in_the_documented_order(cli: Cli, api: httpx.Client, site: Site) -> None:
    net = site.networks["private"]
    cli.ok("network", "forward", "create", "private", "192.0.2.50", "target_address=10.0.0.5")
    cli.ok("network", "forward", "create", "private", "2001:db8::50", "target_address=fd00::5")
    cli.ok("network", "set", "private", f"ipv4.nat.address={SNAT}")
    before = state(api)

    # Not the cascade docs/forwards.md once promised: the router interfaces are ports in use on the network ...
    error = cli.fail("network", "delete", "private")
    assert "There are one or more ports still in use on the network" in error and "NetworkInUse" in error, error
    # ... which the forwards and the SNAT address keep.
    v4 = next(s for s in site.subnets["private"] if s["ip_version"] == 4)
    error = cli.fail("router", "remove", "subnet", "edge", v4["id"])
    assert "RouterInterfaceInUseByForward" in error and "192.0.2.50" in error, error
    assert state(api) == before  # neither refusal changed anything
    assert sorted(cli.out("network", "forward", "list", "private", "-f", "value", "-c", "listen_address").split()) == [
        "192.0.2.50",
        "2001:db8::50",
    ]

    # The documented order, step by step; each step before its time is refused.
    cli.ok("network", "forward", "delete", "private", "192.0.2.50")
    assert "RouterInterfaceInUseByForward" in cli.fail("router", "remove", "subnet", "edge", v4["id"])  # the SNAT
    cli.ok("network", "forward", "delete", "private", "2001:db8::50")
    cli.ok("network", "unset", "private", "ipv4.nat.address")
    assert "NetworkInUse" in cli.fail("network", "delete", "private")  # still linked
    for sub in site.subnets["private"]:
        cli.ok("router", "remove", "subnet", "edge", sub["id"])
    cli.ok("network", "delete", "private")
    assert api.get(f"/networks/{net['id']}").status_code == 404
    assert api.get(url(net["id"])).status_code == 404
    # the addresses it held are free: another network of the router may take them
    site.network("next", "10.1.0.0/24")
    cli.ok("network", "forward", "create", "next", "192.0.2.50", "target_address=10.1.0.5")
    cli.ok("network", "set", "next", f"ipv4.nat.address={SNAT}")
    assert forwards(api, site.networks["next"]) == ["192.0.2.50"]


def test_another_projects_member_cannot_clear_the_way(server: RunningServer, users: dict[str, httpx.Client]) -> None:
    """The steps are the owner's: a member of another project can take none of them (not found: not hers)."""
    admin = users["admin"]
    site = build_site(admin)
    net = site.networks["private"]
    owner = Cli(server.url)
    owner.ok("network", "forward", "create", net["id"], "192.0.2.50", "target_address=10.0.0.5",
             env={"CLOUDNET_TOKEN": "admin-token"})  # fmt: skip
    before = state(admin)
    v4 = next(s for s in site.subnets["private"] if s["ip_version"] == 4)
    for args in (
        ("network", "forward", "delete", net["id"], "192.0.2.50"),
        ("router", "remove", "subnet", site.router["id"], v4["id"]),
        ("network", "delete", net["id"]),
    ):
        error = owner.fail(*args, env={"CLOUDNET_TOKEN": "bob-token"})
        assert "404" in error or "No network found" in error or "No router found" in error, error
    assert state(admin) == before
