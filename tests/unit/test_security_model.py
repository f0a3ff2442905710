"""The driver-neutral security model (dataplane/security.py) and the firewall's set elements (linux/fw_sets.py)."""

from __future__ import annotations

import ipaddress
import itertools
import random

import pytest

from cloudnet.dataplane import security
from cloudnet.dataplane.linux import fw_sets


def _rule(**kw: object) -> dict[str, object]:
    return {"direction": "ingress", "ethertype": "IPv4", "protocol": None, "port_range_min": None,
            "port_range_max": None, "remote_ip_prefix": None, "remote_group_id": None, **kw}  # fmt: skip


def test_rules_are_normalised_as_neutron_reads_them() -> None:
    icmp6 = security.parse_rule(_rule(ethertype="IPv6", protocol=1, port_range_min=128))
    assert icmp6 is not None and (icmp6.protocol, icmp6.icmp_type, icmp6.icmp_code) == (58, 128, None)
    tcp = security.parse_rule(_rule(protocol=6, port_range_min=22))
    assert tcp is not None and tcp.ports == (22, 22)
    everything = security.parse_rule(_rule(protocol=6, port_range_min=1, port_range_max=65535,
                                           remote_ip_prefix="0.0.0.0/0"))  # fmt: skip
    assert everything is not None and everything.ports is None and everything.prefix is None
    assert security.parse_rule(_rule(ethertype="IPv6", remote_ip_prefix="10.0.0.0/8")) is None  # matches nothing
    assert security.parse_rule(_rule(protocol=58)) is None  # ICMPv6 on an IPv4 rule
    member = security.parse_rule(_rule(remote_group_id="g1"))
    assert member is not None and member.remote == "group:g1"


@pytest.mark.parametrize(
    "bad",
    [_rule(protocol=300), _rule(protocol=47, port_range_min=1), _rule(protocol=6, port_range_min=90, port_range_max=80),
     _rule(protocol=1, port_range_max=0), _rule(direction="sideways"), _rule(ethertype="IPX"),
     _rule(remote_ip_prefix="10.0.0.0/8", remote_group_id="g"), _rule(remote_ip_prefix="10.0.0.300/32"),
     _rule(remote_address_group_id="ag")],
)  # fmt: skip
def test_rules_that_cannot_be_enforced_faithfully_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        security.parse_rule(bad)


def test_a_port_may_send_from_its_addresses_pairs_and_link_local() -> None:
    port = {"id": "p", "network_id": "n", "mac_address": "FA:16:3E:00:00:01", "port_security_enabled": True,
            "fixed_ips": [{"ip_address": "10.0.0.5"}], "security_groups": ["b", "a", "a"],
            "allowed_address_pairs": [{"ip_address": "10.0.9.0/24"}, {"ip_address": "fd00::7", "mac_address":
                                                                       "fa:16:3e:00:00:02"}]}  # fmt: skip
    policy = security.parse_port(port)
    assert policy is not None and policy.groups == ("a", "b")
    assert {(m, str(n)) for m, n in policy.allowed} == {
        ("fa:16:3e:00:00:01", "10.0.0.5/32"), ("fa:16:3e:00:00:01", "10.0.9.0/24"),
        ("fa:16:3e:00:00:02", "fd00::7/128"),
        ("fa:16:3e:00:00:01", "fe80::f816:3eff:fe00:1/128"), ("fa:16:3e:00:00:02", "fe80::f816:3eff:fe00:2/128"),
    }  # fmt: skip
    assert security.parse_port({**port, "port_security_enabled": False}) is None
    with pytest.raises(ValueError):
        security.parse_port({**port, "mac_address": "01:00:5e:00:00:01"})  # a multicast MAC


def _policy(rules: list[dict[str, object]], members: tuple[str, ...] = ()) -> tuple[security.HostPolicy,
                                                                                    security.PortPolicy]:  # fmt: skip
    port = security.parse_port({"id": "p", "network_id": "n", "mac_address": "fa:16:3e:00:00:01",
                                "fixed_ips": [{"ip_address": "10.0.0.5"}], "security_groups": ["g"]})  # fmt: skip
    assert port is not None
    group = security.parse_group({"id": "g", "rules": rules})
    remotes = {"group:g": security.parse_remote(members)}
    return security.HostPolicy({"p": port}, {}, {"g": group}, remotes), port


def _flow(direction: security.Direction, protocol: int, dport: int | None, remote: str,
          icmp: tuple[int, int] | None = None) -> security.Flow:  # fmt: skip
    return security.Flow(direction, 4, protocol, dport, icmp[0] if icmp else None, icmp[1] if icmp else None,
                         ipaddress.ip_network(remote))  # fmt: skip


def test_permits_decides_as_the_rules_say() -> None:
    rules = [_rule(protocol=6, port_range_min=22, remote_ip_prefix="10.0.0.0/8"),
             _rule(protocol=1, port_range_min=8, remote_group_id="g")]  # fmt: skip
    policy, port = _policy(rules, members=("10.0.0.7/32",))
    assert security.permits(policy, port, _flow("ingress", 6, 22, "10.1.2.3/32"))
    assert not security.permits(policy, port, _flow("ingress", 6, 22, "192.0.2.1/32"))
    assert not security.permits(policy, port, _flow("ingress", 6, 23, "10.1.2.3/32"))
    assert not security.permits(policy, port, _flow("egress", 6, 22, "10.1.2.3/32"))
    assert security.permits(policy, port, _flow("ingress", 1, None, "10.0.0.7/32", (8, 0)))
    assert not security.permits(policy, port, _flow("ingress", 1, None, "10.0.0.8/32", (8, 0)))
    assert security.permits(policy, port, _flow("egress", 6, 80, "169.254.169.254/32"))  # its metadata


def test_losers_are_the_ports_that_lost_something() -> None:
    before, _ = _policy([_rule(protocol=6, port_range_min=22), _rule(remote_group_id="g")], ("10.0.0.7/32",))
    more, _ = _policy([_rule(protocol=6, port_range_min=22), _rule(remote_group_id="g"), _rule(protocol=17)],
                      ("10.0.0.7/32", "10.0.0.8/32"))  # fmt: skip
    fewer_rules, _ = _policy([_rule(remote_group_id="g")], ("10.0.0.7/32",))
    fewer_members, _ = _policy([_rule(protocol=6, port_range_min=22), _rule(remote_group_id="g")], ())
    assert security.losers(before, more) == set()
    assert security.losers(before, fewer_rules) == {"p"}
    assert security.losers(before, fewer_members) == {"p"}
    nothing = security.HostPolicy({}, {}, {}, {})
    assert security.losers(nothing, before) == {"p"}  # new: its address may have been another port's
    assert security.losers(security.HostPolicy({}, {"p": "n"}, {}, {}), before) == {"p"}  # port security turned on


def _covered(elements: set[str]) -> set[tuple[int, int, int]]:
    """(proto, port, address) points of `proto . lo-hi . a.b.c.d/len` elements."""
    out = set()
    for e in elements:
        proto, span, net = e.split(" . ")
        lo, _, hi = span.partition("-")
        for port in range(int(lo), int(hi or lo) + 1):
            out |= {(int(proto), port, int(a)) for a in ipaddress.ip_network(net)}
    return out


def _box(e: str) -> tuple[int, tuple[int, int], tuple[int, int]]:
    proto, span, net = e.split(" . ")
    lo, _, hi = span.partition("-")
    n = ipaddress.ip_network(net)
    return int(proto), (int(lo), int(hi or lo)), (int(n.network_address), int(n.broadcast_address))


@pytest.mark.parametrize("seed", range(20))
def test_set_elements_cover_the_rules_exactly_and_never_overlap(seed: int) -> None:
    """nft refuses an interval element starting or ending inside another: the rules' boxes are made disjoint."""
    rng = random.Random(seed)
    boxes: list[fw_sets.Box] = []
    for _ in range(rng.randint(1, 12)):
        lo = rng.randint(0, 14)
        net = ipaddress.ip_network(f"10.0.0.{rng.choice([0, 4, 6, 8, 12])}/{rng.choice([28, 29, 30, 31, 32])}",
                                   strict=False)  # fmt: skip
        boxes.append(((str(rng.choice([6, 17])),), (lo, rng.randint(lo, 15)), net))
    wanted = set()
    for (proto,), (lo, hi), net in boxes:  # type: ignore[misc]
        wanted |= {(int(proto), p, int(a)) for p in range(lo, hi + 1) for a in net}
    elements = fw_sets.elements(boxes)
    assert _covered(elements) == wanted
    for one, other in itertools.permutations(map(_box, elements), 2):
        for end in (0, 1):  # neither its start nor its end inside another element
            dims = ((one[1], other[1]), (one[2], other[2]))
            assert one[0] != other[0] or not all(b[0] <= a[end] <= b[1] for a, b in dims), (one, other)
    assert fw_sets.elements(list(reversed(boxes))) == elements  # canonical: the same rules, the same elements


def test_raw_addresses_are_128_bit_integers() -> None:
    nets = [ipaddress.ip_network("fd00::/127"), ipaddress.ip_network("fd00::1/128"), ipaddress.ip_network("fe80::1")]
    exact, ranges = fw_sets.raw_addresses('"t"', nets)
    assert exact == {'"t" . 0x' + "fe80" + "0" * 27 + "1"}
    assert ranges == {'"t" . 0x' + "fd00" + "0" * 28 + "-0x" + "fd00" + "0" * 27 + "1"}


def test_single_addresses_go_to_a_hash_set() -> None:
    boxes: list[fw_sets.Box] = [(("1",), None, ipaddress.ip_network("10.0.0.5/32")),
                                (("1",), None, ipaddress.ip_network("10.0.0.0/24"))]  # fmt: skip
    assert fw_sets.split(boxes) == ({"1 . 10.0.0.5"}, {"1 . 10.0.0.0/24"})
