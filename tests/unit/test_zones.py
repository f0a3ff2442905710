"""Availability zone names (wire/zones.py) and a chassis' ovn-cms-options (ovn/daemons.py), as pure functions."""

from __future__ import annotations

import pytest

from cloudnet.ovn.daemons import cms_options
from cloudnet.wire import zones


@pytest.mark.parametrize("name", ["nova", "az1", "us-east-1a", "zone_2.b", "z" * 255])
def test_zone_names_taken(name: str) -> None:
    assert zones.check(name) == name


@pytest.mark.parametrize("name", ["", "a:b", "a,b", "a=b", "a b", "-a", ".a", "z" * 256, "zoné", "a\n", "a\x00"])
def test_zone_names_refused(name: str) -> None:
    with pytest.raises(ValueError, match="is not an availability zone name"):
        zones.check(name)


def test_cms_options() -> None:
    assert cms_options("az1", gateway=True) == "enable-chassis-as-gw,availability-zones=az1"
    assert cms_options("az1", gateway=False) == "availability-zones=az1"
    assert cms_options(None, gateway=False) == ""
    # An operator's other options are kept; ours replace what they said of the zone and the gateway role.
    current = "enable-chassis-as-gw, enable-chassis-as-extport-host,availability-zones=a:b,card-serial-number=7"
    assert cms_options("az2", gateway=False, current=current) == (
        "enable-chassis-as-extport-host,card-serial-number=7,availability-zones=az2")  # fmt: skip
