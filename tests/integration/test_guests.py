"""The test-side VM machinery (issue 28), proven without cloudnet: the tiny guest boots under the detected accelerator
and its console runs commands; the extra arguments reach the guest (a second serial port, a drive); and on a LAN of
the test's own (a namespace, a bridge, taps, a static-lease dnsmasq) a guest gets by DHCP exactly its address and
pings the bridge, while a guest whose MAC has no lease gets nothing (root)."""

from __future__ import annotations

import io
import re
import socket
import subprocess
import time
from pathlib import Path

import pycdlib
import pytest

from tests.support.console import GuestCommandError
from tests.support.guest_init import LEASE_RE, NO_LEASE, SHELL_MARKER
from tests.support.guests import TinyGuest
from tests.support.tap_lan import dhcp_server, nic_args, tap_lan
from tests.support.vm_fixtures import StartVM

BOOT = 120  # seconds: ~6 s under TCG on an idle machine; the suite's other workers load both cores


def _iso(path: Path, text: str) -> None:
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, vol_ident="config-2", joliet=3, rock_ridge="1.09")
    data = text.encode()
    iso.add_fp(io.BytesIO(data), len(data), "/HELLO.TXT;1", rr_name="hello.txt")
    iso.write(str(path))
    iso.close()


def test_the_tiny_guest_boots_and_its_console_runs_commands(vms: StartVM, tiny_guest: TinyGuest) -> None:
    vm = vms("boot")
    vm.expect(SHELL_MARKER, BOOT)
    assert vm.run("uname -r").strip() == tiny_guest.release
    assert vm.run("echo one; echo two >&2") == "one\ntwo\n"
    status, output = vm.console.run_status('echo "it\'s" $((6 * 7)); exit 3')
    assert (status, output) == (3, "it's 42\n")
    with pytest.raises(GuestCommandError) as failed:
        vm.run("cat /no/such/file")
    assert failed.value.status == 1 and "No such file" in failed.value.output
    # What a virtio NIC and a config drive need is there, built in or loaded (every module of the guest's list).
    loaded = {line.split()[0] for line in vm.run("cat /proc/modules").splitlines()}
    assert set(tiny_guest.modules) <= loaded and "insmod" not in vm.console.transcript
    drivers = "/sys/bus/pci/drivers/virtio-pci /sys/bus/virtio/drivers/virtio_net /sys/bus/virtio/drivers/virtio_blk"
    vm.run(f"ls -d {drivers} && grep -w iso9660 /proc/filesystems")


def test_extra_args_reach_the_guest_a_second_serial_port_and_a_drive(vms: StartVM, tmp_path: Path) -> None:
    sock_path, drive = tmp_path / "ttyS1.sock", tmp_path / "drive.iso"
    _iso(drive, "from the host\n")
    # QEMU listens on the socket (server=on) and does not wait for a client to boot (wait=off).
    serial = ["-chardev", f"socket,id=md,path={sock_path},server=on,wait=off", "-serial", "chardev:md"]
    # The same image as a virtio disk and as an IDE CD-ROM (the two ways a config drive is attached).
    drives = [
        "-drive",
        f"file={drive},if=virtio,format=raw,readonly=on",
        "-drive",
        f"file={drive},if=none,id=cd,format=raw,media=cdrom,readonly=on",
        "-device",
        "ide-cd,drive=cd",
    ]
    vm = vms("args", [*serial, *drives])
    vm.expect(SHELL_MARKER, BOOT)
    for device in ("/dev/vda", "/dev/sr0"):
        read = f"mkdir -p /mnt && mount -t iso9660 -o ro {device} /mnt && cat /mnt/hello.txt; umount /mnt"
        assert vm.run(read) == "from the host\n"
    with socket.socket(socket.AF_UNIX) as host_end:
        host_end.connect(str(sock_path))
        host_end.settimeout(30)
        vm.run("stty -F /dev/ttyS1 raw -echo && printf 'from the guest\\n' > /dev/ttyS1")
        got = b""
        while b"\n" not in got:
            chunk = host_end.recv(4096)
            assert chunk, "QEMU closed the serial socket"
            got += chunk
        assert got == b"from the guest\n"


def test_a_guest_gets_its_static_lease_by_dhcp_and_pings_the_lan_a_stranger_gets_none(
    vms: StartVM, tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    mac, stranger_mac = "52:54:00:8a:00:2a", "52:54:00:8a:00:99"
    with tap_lan("10.87.0.0/24") as lan:
        address = lan.address(42)
        with dhcp_server(lan, {mac: address}, tmp_path) as log:
            guest = vms("dhcp", nic_args(lan.tap(), mac), netns=lan.netns)
            stranger = vms("stranger", nic_args(lan.tap(), stranger_mac), netns=lan.netns)
            lease = guest.expect(LEASE_RE, BOOT)
            record_property("qemu_start_to_dhcp_lease_s", round(time.monotonic() - guest.started, 2))
            assert (lease["dev"], lease["ip"], lease["prefix"]) == ("eth0", address, "24")
            guest.expect(SHELL_MARKER, BOOT)
            assert re.search(rf"inet {re.escape(address)}/24 .*eth0", guest.run("ip -4 addr show dev eth0"))
            assert guest.run(f"ip link show eth0 | grep -c {mac}").strip() == "1"
            guest.run(f"ping -c 1 -W 5 {lan.gateway}", timeout=60)
            # And the LAN reaches the guest at the address dnsmasq gave.
            pinged = subprocess.run(["ip", "netns", "exec", lan.netns, "ping", "-c", "1", "-W", "5", address],
                                    capture_output=True, text=True)  # fmt: skip
            assert pinged.returncode == 0, pinged.stdout + pinged.stderr
            # Static leases only: the stranger's discovers go unanswered (the test can fail: a lease would show).
            stranger.expect(NO_LEASE, BOOT)
            assert "cloudnet-tiny: lease" not in stranger.console.transcript
            assert f"DHCPACK(br0) {address} {mac}" in log.read_text()
            assert f"{stranger_mac} no address available" in log.read_text()
