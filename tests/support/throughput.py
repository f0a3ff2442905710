"""Measuring what QoS does to real traffic between two network namespaces, without extra programs: a timed TCP
transfer (the rate the receiver sees once the first second has filled the queues) and the DSCP a received UDP
datagram carried (IP_RECVTOS)."""

from __future__ import annotations

import socket
import threading
import time

from cloudnet.dataplane.kernel import netns

CHUNK = b"\x5a" * 65536


def tcp_rate(sender_ns: str, receiver_ns: str, address: str, port: int, seconds: float = 4.0,
             warmup: float = 1.0) -> float:  # fmt: skip
    """Mbit/s of one TCP stream from `sender_ns` to `address`:`port` in `receiver_ns`, measured after `warmup`."""
    with netns.entered(receiver_ns):
        listener = socket.socket()
    with netns.entered(sender_ns):
        client = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((address, port))
    listener.listen(1)
    stop = time.monotonic() + warmup + seconds

    def send() -> None:
        try:
            client.connect((address, port))
            while time.monotonic() < stop:
                client.sendall(CHUNK)
        except OSError:
            pass
        finally:
            client.close()

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    listener.settimeout(10)
    conn, _peer = listener.accept()
    conn.settimeout(10)
    try:
        start = time.monotonic()
        counted, counting_since = 0, None
        while True:
            data = conn.recv(1 << 20)
            if not data:
                break
            now = time.monotonic()
            if counting_since is None:
                if now - start >= warmup:
                    counting_since = now
                continue
            counted += len(data)
        ended = time.monotonic()
    finally:
        conn.close()
        listener.close()
        sender.join(10)
    if counting_since is None or ended <= counting_since:
        raise AssertionError("the transfer ended before it could be measured")
    return counted * 8 / (ended - counting_since) / 1e6


def received_dscp(sender_ns: str, receiver_ns: str, address: str, port: int, timeout: float = 3.0) -> int | None:
    """The DSCP of a UDP datagram sent with DSCP 0 from `sender_ns`, as `receiver_ns` got it (None: none came)."""
    with netns.entered(receiver_ns):
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with netns.entered(sender_ns):
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
        rx.bind((address, port))
        rx.settimeout(0.2)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            tx.sendto(b"dscp?", (address, port))
            try:
                _data, ancillary, _flags, _peer = rx.recvmsg(64, socket.CMSG_SPACE(1))
            except TimeoutError:
                continue
            for level, kind, value in ancillary:
                if level == socket.IPPROTO_IP and kind == socket.IP_TOS:
                    return value[0] >> 2
        return None
    finally:
        rx.close()
        tx.close()
