"""Static leases on disk (dataplane/linux/dnsmasq.sync_leases): a few added ports get a file each (dnsmasq reads it
as it appears, no reread of the others), anything else rewrites the one hosts file and asks for a reread."""

from __future__ import annotations

from pathlib import Path

from cloudnet.dataplane.linux import dnsmasq


def leases(n: int, start: int = 0) -> dict[str, str]:
    return {f"p{i}": f"fa:16:3e:00:00:{i:02x},host-{i},10.0.0.{i}\n" for i in range(start, start + n)}


def hosts(path: Path) -> list[str]:
    return sorted(line for line in path.read_text().splitlines() if not line.startswith("#"))


def test_first_all_in_the_hosts_file_then_additions_in_files_of_their_own(tmp_path: Path) -> None:
    bulk, new = tmp_path / "host", tmp_path / "hosts.d"
    first = leases(10)
    assert dnsmasq.sync_leases(bulk, new, first) is True  # (no hosts file yet: written whole)
    assert hosts(bulk) == sorted(t.strip() for t in first.values()) and list(new.iterdir()) == []
    more = {**first, **leases(2, start=10)}
    assert dnsmasq.sync_leases(bulk, new, more) is False  # read by dnsmasq as they appear
    assert sorted(p.name for p in new.iterdir()) == ["p10", "p11"]
    assert dnsmasq.sync_leases(bulk, new, more) is False  # (nothing to do)
    assert (new / "p10").read_text() == more["p10"]


def test_a_change_or_a_removal_rewrites_the_hosts_file_and_asks_for_a_reread(tmp_path: Path) -> None:
    bulk, new = tmp_path / "host", tmp_path / "hosts.d"
    dnsmasq.sync_leases(bulk, new, leases(5))
    dnsmasq.sync_leases(bulk, new, leases(6))
    changed = {**leases(6), "p2": "fa:16:3e:00:00:02,host-2,10.0.0.99\n"}
    assert dnsmasq.sync_leases(bulk, new, changed) is True
    assert "fa:16:3e:00:00:02,host-2,10.0.0.99" in hosts(bulk) and list(new.iterdir()) == []
    del changed["p4"]
    assert dnsmasq.sync_leases(bulk, new, changed) is True
    assert len(hosts(bulk)) == 5 and not any("10.0.0.4" in line for line in hosts(bulk))


def test_many_additions_go_to_the_hosts_file(tmp_path: Path) -> None:
    bulk, new = tmp_path / "host", tmp_path / "hosts.d"
    dnsmasq.sync_leases(bulk, new, leases(3))
    assert dnsmasq.sync_leases(bulk, new, leases(3 + dnsmasq.NEW_FILES + 1)) is True
    assert len(hosts(bulk)) == 3 + dnsmasq.NEW_FILES + 1 and list(new.iterdir()) == []
