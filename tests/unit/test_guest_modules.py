"""The tiny guest's module list (tests/support/guests.py): each module after what it needs, built-in ones skipped,
Debian 13's compressed names understood, and a module the kernel lacks named rather than left out."""

from __future__ import annotations

import pytest

from tests.support.guests import module_order

# As `depmod` writes it for Debian 13 (virtio_pci built in there, modules .ko.xz).
DEP = """kernel/net/core/failover.ko.xz:
kernel/drivers/net/net_failover.ko.xz: kernel/net/core/failover.ko.xz
kernel/drivers/net/virtio_net.ko.xz: kernel/drivers/net/net_failover.ko.xz kernel/net/core/failover.ko.xz
kernel/drivers/scsi/scsi_common.ko.xz:
kernel/drivers/scsi/scsi_mod.ko.xz: kernel/drivers/scsi/scsi_common.ko.xz
kernel/drivers/cdrom/cdrom.ko.xz:
kernel/drivers/scsi/sr_mod.ko.xz: kernel/drivers/scsi/scsi_mod.ko.xz kernel/drivers/scsi/scsi_common.ko.xz \
kernel/drivers/cdrom/cdrom.ko.xz
"""
BUILTIN = "kernel/drivers/virtio/virtio.ko\nkernel/drivers/virtio/virtio_pci.ko\n"


def test_each_module_comes_after_what_it_needs_once_and_built_in_ones_are_skipped() -> None:
    order = module_order(DEP, ["virtio-pci", "virtio_net", "sr_mod", "net_failover"], BUILTIN)
    names = [path.rsplit("/", 1)[1].removesuffix(".ko.xz") for path in order]
    assert sorted(names) == sorted(set(names))
    assert names.index("failover") < names.index("net_failover") < names.index("virtio_net")
    assert max(names.index(n) for n in ("scsi_common", "scsi_mod", "cdrom")) < names.index("sr_mod")
    assert names.index("scsi_common") < names.index("scsi_mod")
    assert "virtio_pci" not in names


def test_a_module_the_kernel_lacks_is_an_error_not_a_silent_gap() -> None:
    with pytest.raises(LookupError, match="e1000e"):
        module_order(DEP, ["virtio_net", "e1000e"], BUILTIN)
