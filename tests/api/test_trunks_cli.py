"""`openstack network trunk create/set --subport/unset/delete` and `network subport list` against the live API
(the real python-openstackclient, with test_openstack_cli.py's clouds.yaml)."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.api.test_openstack_cli import backend, openstack  # noqa: F401  (its fixtures: SQLite, the CLI)
from tests.support.api import create


def test_trunk_commands(openstack: Any, api: httpx.Client) -> None:  # noqa: F811
    net = create(api, "networks", "network", name="trunked")
    create(api, "subnets", "subnet", network_id=net["id"], cidr="10.0.0.0/24")
    parent, a, b = (create(api, "ports", "port", network_id=net["id"], name=n) for n in ("p", "a", "b"))
    done = openstack("network", "trunk", "create", "--parent-port", "p", "--subport",
                     "port=a,segmentation-type=vlan,segmentation-id=100", "t1", "-f", "json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    trunk = json.loads(done.stdout)
    assert trunk["port_id"] == parent["id"]
    done = openstack("network", "trunk", "set", "--subport", "port=b,segmentation-type=vlan,segmentation-id=200", "t1")
    assert done.returncode == 0, done.stderr
    done = openstack("network", "subport", "list", "--trunk", "t1", "-f", "json")
    assert done.returncode == 0, done.stderr
    listed = {s["Port"]: s["Segmentation ID"] for s in json.loads(done.stdout)}
    assert listed == {a["id"]: 100, b["id"]: 200}
    # hostile: a VLAN id out of range fails the command, with Neutron's words, and adds nothing
    c = create(api, "ports", "port", network_id=net["id"], name="c")
    done = openstack("network", "trunk", "set", "--subport", "port=c,segmentation-type=vlan,segmentation-id=4095",
                     "t1")  # fmt: skip
    assert done.returncode != 0 and "is not in range" in done.stderr, done.stderr
    done = openstack("network", "trunk", "unset", "--subport", "a", "t1")
    assert done.returncode == 0, done.stderr
    subs = api.get(f"/trunks/{trunk['id']}/get_subports").json()["sub_ports"]
    assert [s["port_id"] for s in subs] == [b["id"]]
    assert c["id"] not in {s["port_id"] for s in subs}
    done = openstack("network", "trunk", "delete", "t1")
    assert done.returncode == 0, done.stderr
    assert api.get("/trunks").json()["trunks"] == []
