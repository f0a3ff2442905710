"""cloudnet-oci-hook's reading of what the runtime gives it (state on stdin, the bundle's config.json), and its
mount point walk in a directory tree (no namespaces: tests/integration/test_cni_mdata.py runs it under podman)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cloudnet.cni import mounts, oci_hook
from cloudnet.cni.oci_hook import HookError, read_state


def bundle(tmp_path: Path, netns: str | None = "/run/netns/cni-x") -> Path:
    namespaces = [{"type": "pid"}, {"type": "network", **({"path": netns} if netns else {})}]
    (tmp_path / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}, "linux": {"namespaces": namespaces}}))
    return tmp_path


def state(path: Path, **annotations: str) -> bytes:
    return json.dumps({"id": "c1", "pid": 4242, "bundle": str(path), "annotations": annotations}).encode()


def test_only_containers_that_ask_are_touched(tmp_path: Path) -> None:
    assert read_state(state(bundle(tmp_path))) is None
    assert read_state(state(bundle(tmp_path), **{"other": "x"})) is None
    got = read_state(state(bundle(tmp_path), **{"io.cloudnet.mdata": "lx"}))
    assert got is not None
    assert (got.pid, got.netns, got.root, got.place) == (4242, "/run/netns/cni-x", str(tmp_path / "rootfs"),
                                                          ("native", ".zonecontrol"))  # fmt: skip


@pytest.mark.parametrize("value", ["", "yes", "../x", "/.zonecontrol", "0f8f1b4e-6c53-4e3c-9b7c-2f1f0b6a4d11"])
def test_an_annotation_naming_anything_else_is_refused(tmp_path: Path, value: str) -> None:
    with pytest.raises(HookError, match="must be one of lx, true, zone"):
        read_state(state(bundle(tmp_path), **{"io.cloudnet.mdata": value}))


def test_a_state_without_pid_or_netns_path_is_refused(tmp_path: Path) -> None:
    asked = {"io.cloudnet.mdata": "zone"}
    with pytest.raises(HookError, match="no container pid"):
        read_state(json.dumps({"id": "c", "pid": 0, "bundle": str(tmp_path), "annotations": asked}).encode())
    with pytest.raises(HookError, match="not JSON"):
        read_state(b"{")
    with pytest.raises(HookError, match=r"no path in its config\.json"):
        read_state(state(bundle(tmp_path, netns=None), **asked))
    with pytest.raises(HookError, match=r"cannot read the container's config\.json"):
        read_state(state(tmp_path / "missing", **asked))


def test_the_mount_point_is_made_and_never_reached_through_a_symlink(tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    root.mkdir()
    fd = mounts.directory_beneath(str(root), ("native", ".zonecontrol"))
    os.close(fd)
    assert (root / "native" / ".zonecontrol").is_dir()
    (root / "elsewhere").mkdir()
    (root / "link").symlink_to(root / "elsewhere")
    with pytest.raises(mounts.MountError, match="symlink"):
        mounts.directory_beneath(str(root), ("link", ".zonecontrol"))
    assert not (root / "elsewhere" / ".zonecontrol").exists()
    with pytest.raises(mounts.MountError, match="bad path component"):
        mounts.directory_beneath(str(root), ("..", ".zonecontrol"))


def test_the_hooks_file_runs_only_for_the_annotation_and_names_a_path_that_always_exists() -> None:
    conf = oci_hook.hook_config("/opt/x/cloudnet-oci-hook", ["--state-dir", "/s"])
    assert conf["hook"]["path"] == "/usr/bin/env" and Path("/usr/bin/env").exists()
    assert conf["hook"]["args"] == ["env", "/opt/x/cloudnet-oci-hook", "--state-dir", "/s"]
    assert conf["when"] == {"annotations": {"^io[.]cloudnet[.]mdata$": ".*"}}
    assert conf["stages"] == ["createRuntime"]
