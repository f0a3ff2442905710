"""Which NB databases the writer stages new ports for (northbound/staging.py): those of a northd that processes
changes incrementally, i.e. any NB schema after OVN 23.03's 7.0."""

from __future__ import annotations

from cloudnet.northbound.staging import needed


def test_ovn_23_03s_schema_is_spared_the_staging() -> None:
    assert not needed("7.0.0") and not needed("6.3.0")


def test_later_schemas_are_staged() -> None:
    assert needed("7.11.0") and needed("7.3.0") and needed("8.0.0")
