"""The SmartOS key space of an instance: generated sdc: keys, customer/internal routing, KEYS, write rules."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cloudnet.agent.metadata.keyspace import KeySpace, UnservableValue, build
from cloudnet.wire import mdata_keys

INST = "7a1c3c1e-1111-4d7e-9f00-000000000001"
NET1, NET2 = "net-1", "net-2"


def state(**instance: Any) -> dict[str, Any]:
    inst = {
        "id": INST, "name": "web", "hostname": "web1.example.com", "project_id": "p1", "netns": "ns",
        "ports": ["p-a", "p-b", "p-missing"], "metadata": {"role": "db", "user-script": "#!/bin/sh\n"},
        "internal_metadata": {}, "ssh_keys": [{"name": "k1", "key": "ssh-ed25519 AAAA one "}], "user_data": None,
        **instance,
    }  # fmt: skip
    return {
        "revision": 7,
        "host": "hv1",
        "instances": [inst],
        "ports": {
            "p-a": {"id": "p-a", "network_id": NET1, "mac_address": "fa:16:3e:00:00:01", "fixed_ips": [
                {"subnet_id": "s4", "ip_address": "10.0.0.5", "prefixlen": 24},
                {"subnet_id": "s6", "ip_address": "fd00::5", "prefixlen": 64},
            ]},
            "p-b": {"id": "p-b", "network_id": NET2, "mac_address": "fa:16:3e:00:00:02", "fixed_ips": [
                {"subnet_id": "s2", "ip_address": "192.168.7.9", "prefixlen": 28},
            ]},
        },
        "networks": {NET1: {"id": NET1, "mtu": 1450}, NET2: {"id": NET2, "mtu": 9000}},
        "subnets": {
            "s4": {"id": "s4", "network_id": NET1, "cidr": "10.0.0.0/24", "ip_version": 4, "gateway_ip": "10.0.0.1",
                   "dns_nameservers": ["10.0.0.2", "1.1.1.1"],
                   "host_routes": [{"destination": "172.16.0.0/12", "nexthop": "10.0.0.254"}]},
            "s6": {"id": "s6", "network_id": NET1, "cidr": "fd00::/64", "ip_version": 6, "gateway_ip": "fd00::1",
                   "dns_nameservers": [], "host_routes": []},
            "s2": {"id": "s2", "network_id": NET2, "cidr": "192.168.7.0/28", "ip_version": 4, "gateway_ip": None,
                   "dns_nameservers": ["1.1.1.1"],
                   "host_routes": [{"destination": "172.16.0.0/12", "nexthop": "192.168.7.1"},
                                   {"destination": "10.8.0.0/16", "nexthop": "192.168.7.1"}]},
        },
    }  # fmt: skip


def keys_of(**instance: Any) -> KeySpace:
    s = state(**instance)
    return build(s["instances"][0], s, datacenter_name="dc-1")


def test_sdc_keys_from_the_instance() -> None:
    ks = keys_of()
    assert ks.get("sdc:uuid") == INST
    assert ks.get("sdc:zonename") == INST
    assert ks.get("sdc:alias") == "web"
    assert ks.get("sdc:hostname") == "web1.example.com"
    assert ks.get("sdc:dns_domain") == "example.com"
    assert ks.get("sdc:owner_uuid") == "p1"
    assert ks.get("sdc:datacenter_name") == "dc-1"
    server = ks.get("sdc:server_uuid")
    assert server and server == keys_of().get("sdc:server_uuid")  # stable for the host
    assert ks.get("sdc:nope") is None
    assert ks.get("sdc:operator-script") is None
    assert keys_of(hostname="plain").get("sdc:dns_domain") is None


def test_nics_in_interface_order() -> None:
    nics = json.loads(keys_of().get("sdc:nics") or "")
    assert nics == [
        {"interface": "eth0", "mac": "fa:16:3e:00:00:01", "primary": True, "ips": ["10.0.0.5/24", "fd00::5/64"],
         "gateways": ["10.0.0.1", "fd00::1"], "network_uuid": NET1, "mtu": 1450, "ip": "10.0.0.5",
         "netmask": "255.255.255.0", "gateway": "10.0.0.1"},
        {"interface": "eth1", "mac": "fa:16:3e:00:00:02", "primary": False, "ips": ["192.168.7.9/28"],
         "gateways": [], "network_uuid": NET2, "mtu": 9000, "ip": "192.168.7.9", "netmask": "255.255.255.240"},
    ]  # fmt: skip


def test_resolvers_and_routes() -> None:
    ks = keys_of()
    assert json.loads(ks.get("sdc:resolvers") or "") == ["10.0.0.2", "1.1.1.1"]
    assert json.loads(ks.get("sdc:routes") or "") == [
        {"dst": "172.16.0.0/12", "gateway": "10.0.0.254", "linklocal": False},
        {"dst": "10.8.0.0/16", "gateway": "192.168.7.1", "linklocal": False},
    ]
    empty = keys_of(ports=[])
    assert json.loads(empty.get("sdc:nics") or "") == []
    assert json.loads(empty.get("sdc:resolvers") or "") == []


def test_customer_internal_and_implied_keys() -> None:
    ks = keys_of(
        metadata={"role": "db", "root_pw": "shadowed", "docker:cmd": "shadowed"},
        internal_metadata={"root_pw": "s3cret", "docker:cmd": "sleep", "operator-script": "#!/bin/sh\nop\n"},
        user_data="#cloud-config\n",
    )
    assert ks.namespaces == frozenset({"docker"})
    assert ks.get("role") == "db"
    assert ks.get("root_pw") == "s3cret"  # *_pw: internal metadata
    assert ks.get("docker:cmd") == "sleep"  # internal namespace
    assert ks.get("operator-script") is None  # a customer key of that name: none
    assert ks.get("sdc:operator-script") == "#!/bin/sh\nop\n"
    assert ks.get("user-data") == ks.get("cloud-init:user-data") == "#cloud-config\n"
    assert ks.get("root_authorized_keys") == "ssh-ed25519 AAAA one\n"
    assert ks.names() == ["role", "root_authorized_keys", "user-data", "cloud-init:user-data", "root_pw", "docker:cmd"]
    assert not any(k.startswith("sdc:") for k in ks.names())


def test_customer_metadata_overrides_implied_keys() -> None:
    ks = keys_of(metadata={"user-data": "mine"}, user_data="theirs", ssh_keys=[])
    assert ks.get("user-data") == "mine"
    assert ks.get("cloud-init:user-data") == "theirs"
    assert ks.get("root_authorized_keys") is None
    assert ks.names() == ["user-data", "cloud-init:user-data"]


def test_values_that_are_not_strings() -> None:
    ks = keys_of(metadata={"flag": True, "n": 3, "f": 1.5, "off": False, "obj": {"a": 1}})
    assert (ks.get("flag"), ks.get("n"), ks.get("f"), ks.get("off")) == ("true", "3", "1.5", "false")
    with pytest.raises(UnservableValue):
        ks.get("obj")


def test_with_metadata_replaces_stored_maps() -> None:
    ks = keys_of().with_metadata({"new": "1"}, {"operator-script": "x", "acme:k": "v"})
    assert ks.get("new") == "1" and ks.get("role") is None
    assert ks.get("sdc:operator-script") == "x"
    assert ks.get("sdc:uuid") == INST
    assert ks.namespaces == frozenset({"acme"})


def test_write_rules() -> None:
    ns = frozenset({"docker"})
    assert mdata_keys.refusal("sdc:uuid", ns) == 'Cannot update the "sdc" Namespace.'
    assert mdata_keys.refusal("docker:x", ns) == 'Cannot update the "docker" Namespace.'
    assert mdata_keys.refusal("other:x", ns) is None
    assert mdata_keys.refusal("root_pw", ns) is None
    assert mdata_keys.writes_internal("root_pw") and mdata_keys.writes_internal("operator-script")
    assert not mdata_keys.writes_internal("user-script")
    # Namespaces come from internal keys, never from *_pw ones (a guest may write those) nor sdc:.
    assert mdata_keys.internal_namespaces({"a:b": 1, "c:d_pw": 1, "sdc:volumes": 1, "plain": 1}) == {"a"}


@pytest.mark.parametrize("key", ["", " k", "k ", "a\nb", "a\x00b", "x" * 1025])
def test_bad_keys(key: str) -> None:
    assert mdata_keys.key_error(key)


@pytest.mark.parametrize("key", ["k", "com.example:role", "a/b", "with space", "ü"])
def test_good_keys(key: str) -> None:
    assert mdata_keys.key_error(key) is None
