"""The proxy-to-API signature and the shared secret behind it."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from cloudnet.metadata.server import MetadataApp
from cloudnet.store.db import Store
from cloudnet.wire import signing

INSTANCE = "0b1f7c2e-0000-4000-8000-000000000010"
# `echo -n <instance> | openssl dgst -sha256 -hmac secret`: what neutron's sign_instance_id produces.
EXPECTED = "b348d9e18faeab69faf2292048b96cc8709c7134d81b0aa7863396fec76c7ffa"


def test_signature_is_lowercase_hex_hmac_sha256_of_the_instance_id() -> None:
    assert signing.sign("secret", INSTANCE) == EXPECTED


def test_verify_accepts_only_the_exact_signature() -> None:
    assert signing.verify("secret", INSTANCE, EXPECTED)
    for wrong in ("", EXPECTED.upper(), EXPECTED[:-1], EXPECTED + "0", signing.sign("other", INSTANCE), "é" * 64):
        assert not signing.verify("secret", INSTANCE, wrong), wrong
    assert not signing.verify("secret", INSTANCE.replace("0", "1", 1), EXPECTED)


def test_an_empty_secret_signs_and_verifies_nothing(store: Store) -> None:
    with pytest.raises(signing.SecretError):
        signing.sign("", INSTANCE)
    with pytest.raises(signing.SecretError):
        signing.verify("", INSTANCE, EXPECTED)
    with pytest.raises(signing.SecretError):
        MetadataApp(store, "")


def test_secret_is_generated_once_with_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "state" / "metadata_secret"
    first = signing.load_or_create_secret(path)
    assert len(first) == 64 and int(first, 16) >= 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert signing.load_or_create_secret(path) == first  # kept across restarts
    assert [p.name for p in path.parent.iterdir()] == ["metadata_secret"]  # no temporary files left


def test_concurrent_first_starts_agree_on_one_secret(tmp_path: Path) -> None:
    path = tmp_path / "metadata_secret"
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(signing.load_or_create_secret(path))) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(results) == 8 and len(set(results)) == 1


def test_an_operator_supplied_secret_is_used_and_tightened(tmp_path: Path) -> None:
    path = tmp_path / "metadata_secret"
    path.write_text("  shared-by-all-hosts \n")
    os.chmod(path, 0o644)
    assert signing.load_or_create_secret(path) == "shared-by-all-hosts"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_an_empty_secret_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "metadata_secret"
    path.write_text("\n")
    with pytest.raises(signing.SecretError, match="is empty"):
        signing.load_or_create_secret(path)
    with pytest.raises(signing.SecretError, match="does not exist"):
        signing.read_secret(tmp_path / "missing")
