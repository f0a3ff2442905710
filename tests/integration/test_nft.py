"""libnftables contexts kept per namespace (root): they must follow the namespace, not its name."""

from __future__ import annotations

import os
import subprocess
import threading
import uuid
from typing import Any

import pytest

from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.linux import nft


def ruleset(name: str) -> str:
    return subprocess.run(["ip", "netns", "exec", name, "nft", "list", "ruleset"], capture_output=True,
                          text=True, check=True).stdout  # fmt: skip


def test_elements_added_and_deleted_through_a_kept_context(ns: str) -> None:
    nft.run(ns, "table ip t {\n map m { type ipv4_addr : ipv4_addr; }\n}\n")
    nft.run(ns, "add element ip t m { 198.18.0.1 : 10.0.0.1, 198.18.0.2 : 10.0.0.2 }\n")
    nft.run(ns, "delete element ip t m { 198.18.0.1 }\n")
    text = ruleset(ns)
    assert "198.18.0.2 : 10.0.0.2" in text and "198.18.0.1 :" not in text


def test_a_namespace_recreated_under_the_same_name_gets_a_new_context(ns: str) -> None:
    nft.run(ns, "table ip first {}\n")
    subprocess.run(["ip", "netns", "del", ns], check=True)  # behind the module's back
    netns.ensure(ns)
    nft.run(ns, "table ip second {}\n")
    text = ruleset(ns)
    assert "table ip second" in text and "table ip first" not in text


def test_errors_leave_the_kept_context_usable(ns: str) -> None:
    with pytest.raises(nft.NftError):
        nft.run(ns, "delete table ip missing\n")
    nft.run(ns, "table ip ok {}\n")
    assert "table ip ok" in ruleset(ns)


def test_a_check_changes_nothing_and_the_context_applies_afterwards(ns: str) -> None:
    nft.check(ns, "table ip checked {}\n")
    with pytest.raises(nft.NftError):
        nft.check(ns, "add element ip missing m { 192.0.2.1 }\n")
    nft.run(ns, "table ip applied {}\n")
    text = ruleset(ns)
    assert "table ip applied" in text and "checked" not in text


def test_a_namespace_where_nftables_hangs_holds_up_no_other(ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step abandoned while it hangs inside libnftables in one router's namespace keeps that namespace busy, but
    every other namespace (other routers' NAT, the host's firewall) goes on; a call behind it fails with the reason
    after a while instead of hanging too."""
    other = f"cnt-nft-{uuid.uuid4().hex[:8]}"
    netns.ensure(other)
    release, entered = threading.Event(), threading.Event()
    real = nft._run

    def hang_in_first(*args: Any) -> None:  # the first script sent to `ns` hangs until released
        if netns.exists(ns) and os.stat("/proc/thread-self/ns/net").st_ino == os.stat(netns.path_of(ns)).st_ino:
            entered.set()
            release.wait(30)
        real(*args)

    monkeypatch.setattr(nft, "_run", hang_in_first)
    monkeypatch.setattr(nft, "LOCK_WAIT", 0.2, raising=False)
    stuck = threading.Thread(target=nft.run, args=(ns, "table ip stuck {}\n"), daemon=True)
    stuck.start()
    try:
        assert entered.wait(10)
        done = threading.Thread(target=nft.run, args=(other, "table ip free {}\n"), daemon=True)
        done.start()
        done.join(5)
        assert not done.is_alive(), "another namespace waited for the one that hangs"
        assert "table ip free" in ruleset(other)
        with pytest.raises(nft.NftError, match="still in use"):
            nft.run(ns, "table ip behind {}\n")
    finally:
        release.set()
        stuck.join(10)
        nft.forget(other)
        netns.remove(other)
    assert "table ip stuck" in ruleset(ns) and "behind" not in ruleset(ns)
