"""The Debian guest's cache (tests/support/debian_guest.py) without building one: which mirror it takes from the
host's apt sources, and that workers asking at once get one build (the builder here writes the files a build
leaves; the real build is exercised by tests/integration/test_vm_debian.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.support.debian_guest import debian_guest, mirrors

DEB822 = """Types: deb
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main

Types: deb
URIs: http://mirror.example/debian-security/
Suites: bookworm-security
"""


def test_the_mirror_is_the_hosts() -> None:
    assert mirrors(DEB822) == ("http://mirror.example/debian", "http://mirror.example/debian-security")
    one_line = "deb [signed-by=/k.gpg] http://m.example/debian bookworm main\ndeb http://s.example/debian-security x\n"
    assert mirrors(one_line) == ("http://m.example/debian", "http://s.example/debian-security")
    # Other repositories (a vendor's) are not Debian's archive; with none of Debian's, Debian's own.
    assert mirrors("deb https://packages.example/apt cloud-sdk main\n") == (
        "http://deb.debian.org/debian", "http://deb.debian.org/debian-security")  # fmt: skip


def test_workers_asking_at_once_get_one_build(tmp_path: Path) -> None:
    builds: list[Path] = []

    def builder(into: Path) -> None:
        builds.append(into)
        time.sleep(0.2)  # a build in progress while the others ask (what the lock must cover)
        for name in ("vmlinuz", "initrd.img", "root.img"):
            (into / name).write_text(name)

    found = []
    workers = [threading.Thread(target=lambda: found.append(debian_guest(tmp_path, builder))) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(builds) == 1 and len(found) == 4 and len({g.root for g in found}) == 1
    assert found[0].root.read_text() == "root.img"
    # Renamed into place whole: no scratch directory is left beside the entry.
    assert sorted(p.name for p in tmp_path.iterdir()) == [".debian12.lock", found[0].root.parent.name]
