"""Parsing of option values, and the wording of errors."""

from __future__ import annotations

import pytest

from cloudnet.cli.client import api_root
from cloudnet.cli.errors import ApiError, CliError, api_error_line
from cloudnet.cli.parsing import (
    ethertype_of,
    ip_version_of,
    parse_allocation_pool,
    parse_assignment,
    parse_assignments,
    parse_fixed_ip,
    parse_gateway,
    parse_host_route,
    parse_pairs,
    parse_port_range,
)


def test_allocation_pool() -> None:
    assert parse_allocation_pool("start=10.0.0.10,end=10.0.0.20") == {"start": "10.0.0.10", "end": "10.0.0.20"}
    assert parse_allocation_pool(" start = 10.0.0.10 , end=10.0.0.20") == {
        "start": "10.0.0.10",
        "end": "10.0.0.20",
    }


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("start=10.0.0.10", "missing end"),
        ("start=10.0.0.10,end=", "missing end"),
        ("start=10.0.0.10,stop=10.0.0.20", "unknown key 'stop'"),
        ("10.0.0.10-10.0.0.20", "expected start=...,end=..."),
        ("start=1,start=2,end=3", "'start' given twice"),
    ],
)
def test_allocation_pool_errors(text: str, fragment: str) -> None:
    with pytest.raises(CliError) as info:
        parse_allocation_pool(text)
    assert str(info.value).startswith(f"--allocation-pool '{text}'")
    assert fragment in str(info.value)


def test_host_route_maps_gateway_to_nexthop() -> None:
    expected = {"destination": "192.168.0.0/16", "nexthop": "10.0.0.1"}
    assert parse_host_route("destination=192.168.0.0/16,gateway=10.0.0.1") == expected
    assert parse_host_route("destination=192.168.0.0/16,nexthop=10.0.0.1") == expected
    with pytest.raises(CliError, match="missing gateway"):
        parse_host_route("destination=192.168.0.0/16")


def test_fixed_ip() -> None:
    assert parse_fixed_ip("subnet=private,ip-address=10.0.0.5") == {"subnet": "private", "ip-address": "10.0.0.5"}
    assert parse_fixed_ip("subnet=private") == {"subnet": "private"}
    assert parse_fixed_ip("ip-address=10.0.0.5") == {"ip-address": "10.0.0.5"}
    assert parse_fixed_ip("ip_address=10.0.0.5") == {"ip-address": "10.0.0.5"}
    assert parse_fixed_ip("subnet_id=abc") == {"subnet": "abc"}


@pytest.mark.parametrize("text", ["subnet=", "ip=10.0.0.5", "10.0.0.5"])
def test_fixed_ip_errors(text: str) -> None:
    with pytest.raises(CliError, match=r"^--fixed-ip"):
        parse_fixed_ip(text)


def test_pairs_keep_values_with_colons() -> None:
    assert parse_pairs("a=x:y", option="--o", allowed=("a",)) == {"a": "x:y"}


def test_assignment() -> None:
    assert parse_assignment("ipv4.nat.address=203.0.113.7") == ("ipv4.nat.address", "203.0.113.7")
    assert parse_assignment("k=a=b") == ("k", "a=b")
    assert parse_assignment("k=") == ("k", "")


@pytest.mark.parametrize("text", ["novalue", "=value", " =x"])
def test_assignment_errors(text: str) -> None:
    with pytest.raises(CliError, match="expected KEY=VALUE"):
        parse_assignment(text, option="--binding-profile")


def test_assignments_later_wins() -> None:
    assert parse_assignments(["a=1", "b=2", "a=3"]) == {"a": "3", "b": "2"}


def test_port_range() -> None:
    assert parse_port_range("22") == (22, 22)
    assert parse_port_range("8000:8080") == (8000, 8080)
    for bad in ("ssh", "80:", "90:80", "70000", "-1"):
        with pytest.raises(CliError, match=r"^--dst-port"):
            parse_port_range(bad)


def test_gateway() -> None:
    assert parse_gateway("none") is None
    assert parse_gateway("None") is None
    assert parse_gateway("10.0.0.1") == "10.0.0.1"
    assert parse_gateway("fd00::1") == "fd00::1"
    with pytest.raises(CliError, match="expected an IP address or 'none'"):
        parse_gateway("gw")


def test_ip_version_and_ethertype_from_cidr() -> None:
    assert ip_version_of("10.0.0.0/24") == 4
    assert ip_version_of("10.0.0.1/24") == 4
    assert ip_version_of("fd00::/64") == 6
    assert ethertype_of("::/0") == "IPv6"
    assert ethertype_of("0.0.0.0/0") == "IPv4"
    with pytest.raises(CliError, match="not a valid CIDR"):
        ip_version_of("10.0.0.0/33")


def test_api_root() -> None:
    assert api_root("http://h:9696") == "http://h:9696/v2.0"
    assert api_root("http://h:9696/") == "http://h:9696/v2.0"
    assert api_root("http://h:9696/v2.0/") == "http://h:9696/v2.0"
    assert api_root("https://h/cloudnet") == "https://h/cloudnet/v2.0"


def test_neutron_error_line() -> None:
    payload = {"NeutronError": {"type": "NetworkNotFound", "message": "Network foo could not be found.", "detail": ""}}
    error = ApiError.from_payload(404, payload, "Not Found")
    assert str(error) == "Network foo could not be found. (404 NetworkNotFound)"
    assert (error.status, error.type) == (404, "NetworkNotFound")


def test_neutron_error_line_with_detail_is_one_line() -> None:
    payload = {"NeutronError": {"type": "InvalidInput", "message": "Invalid input\nfor operation.", "detail": "mtu"}}
    assert str(ApiError.from_payload(400, payload)) == "Invalid input for operation. mtu (400 InvalidInput)"


def test_fastapi_error_shapes() -> None:
    assert str(ApiError.from_payload(404, {"detail": "Not Found"}, "Not Found")) == "Not Found (404)"
    validation = {"detail": [{"loc": ["body", "network", "mtu"], "msg": "Input should be a valid integer"}]}
    assert (
        str(ApiError.from_payload(422, validation, "Unprocessable Entity"))
        == "network.mtu: Input should be a valid integer (422 Unprocessable Entity)"
    )


def test_non_json_error_body() -> None:
    assert str(ApiError.from_payload(502, None, "Bad Gateway")) == "Bad Gateway (502)"


def test_api_error_line_without_type() -> None:
    assert api_error_line(500, "boom") == "boom (500)"
