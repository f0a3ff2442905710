"""SmartOS metadata over a VM's serial port (issue 28). Prints figures beside targets; asserts nothing.

  GET of one key, one at a time, v2 frames, on one VM instance's serial channel:
  - as the VMM sees it: a client connection to <state>/vmserial/<uuid>/ttyb (what QEMU's chardev carries);
  - as a guest sees it: on a tty in raw mode (a pty) whose master a relay carries to the same socket, as
    QEMU carries a UART (tests/support/serial_line.py; the relay is Python, so this is an upper bound of
    what the serial path adds, not QEMU's figure).
  Target (issue 28): serial metadata GET p50 <= 1 ms.

The metadata service (MdataService fed the desired state of a real `cloudnet serve`, the instance marked a VM
as the API marks one) runs in its own process pinned to one core; this client runs on the other.

Usage: .venv/bin/python bench/mdata_serial.py [--requests N]
"""

from __future__ import annotations

import argparse
import os
import socket
import tty

from common import cloudnet_server, percentile, row
from mdata import _instance, get_loop, metadata_service, us
from tests.support.serial_line import SerialPort


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20_000)
    args = parser.parse_args()
    with cloudnet_server() as url:
        instance_id = _instance(url, vm=True)
        with metadata_service(url) as (_child, state_dir):
            path = f"{state_dir}/vmserial/{instance_id}/ttyb"
            print(f"serial metadata GET ({args.requests:,} sequential requests, v2 frames):")
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(path)
                get_loop(s.sendall, s.recv, "sdc:uuid", 2_000)  # warm-up (negotiates first)
                for key in ("sdc:uuid", "user-script"):
                    _report(f"VMM socket: GET {key}", get_loop(s.sendall, s.recv, key, args.requests))
            port = SerialPort(path)
            try:
                port.wait_connected()
                guest = os.open(port.device, os.O_RDWR | os.O_NOCTTY)
                tty.setraw(guest)  # as mdata-client and pyserial set it
                send, recv = (lambda data: os.write(guest, data)), (lambda n: os.read(guest, n))
                get_loop(send, recv, "sdc:uuid", 500)  # warm-up
                for key in ("sdc:uuid", "user-script"):
                    _report(f"guest tty (pty + relay): GET {key}", get_loop(send, recv, key, args.requests // 4))
                os.close(guest)
            finally:
                port.close()


def _report(what: str, times: list[float]) -> None:
    p50, p99 = percentile(times, 50), percentile(times, 99)
    row(f"{what} p50", us(p50), "<= 1 ms (issue 28)", p50 <= 1e-3)
    row(f"{what} p99", us(p99), "(no target)", True)


if __name__ == "__main__":
    main()
