"""Request ids and the event stream (issue 30). Prints figures beside their targets; asserts nothing.

  an event reaches `cloudnet monitor` <= 100 ms after its commit: a real `cloudnet serve` and a real
    `cloudnet monitor -f json` reading its long poll; each network created is timed from the moment its POST was
    answered (the commit is a little before: the answer's trip back) to the moment its line arrives, and from the
    moment it was sent (an upper bound: the whole request besides)
  API p50 overhead of request ids on port create <= 5%: two servers in one run, one as shipped and one whose
    request-id middleware passes requests through untouched, creates alternated between them in rounds (the
    context copy on the worker hop and the event's extra columns stay in both: they are the same code path)

Usage: .venv/bin/python bench/event_stream.py [--events N] [--creates N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import logging
import os
import queue
import subprocess
import tempfile
import threading
import time
from contextlib import AbstractContextManager
from typing import Any

import httpx
from common import (
    ROOT,
    WITHOUT_REQUEST_IDS,
    alternated,
    cloudnet_server,
    machine_load,
    median,
    ms,
    percentile,
    pin_client,
    row,
)

from cloudnet.api.request_ids import RequestIds
from cloudnet.wire import logs

CLOUDNET = str(ROOT / ".venv/bin/cloudnet")


def server(ids: bool = True) -> AbstractContextManager[str]:
    return cloudnet_server(command=None if ids else WITHOUT_REQUEST_IDS, extra=("--metadata-listen", "off"))


def event_latency(url: str, n: int) -> tuple[list[float], list[float]]:
    """(from the POST's answer, from the POST's start) to the event's line at the monitor, per network."""
    arrivals: queue.Queue[tuple[str, float]] = queue.Queue()
    with httpx.Client(base_url=url + "/v2.0", headers={"X-Auth-Token": "bench"}, timeout=60) as api:
        since = api.get("/events", params={"since": 0, "limit": 1}).json()["revision"]
        monitor = subprocess.Popen([CLOUDNET, "--url", url, "monitor", "--since", str(since), "--type",
                                    "network.created", "-f", "json"], stdout=subprocess.PIPE, text=True)  # fmt: skip

        def read() -> None:
            assert monitor.stdout is not None
            for line in monitor.stdout:
                arrivals.put((json.loads(line)["resource_id"], time.perf_counter()))

        threading.Thread(target=read, daemon=True).start()
        after_answer, after_start = [], []
        try:
            for i in range(n + 10):  # (the first 10: the monitor's start-up and warm-up)
                t0 = time.perf_counter()
                r = api.post("/networks", json={"network": {"name": f"e{i}"}})
                t1 = time.perf_counter()
                got, at = arrivals.get(timeout=30)
                if got != r.json()["network"]["id"]:
                    raise SystemExit(f"the monitor printed {got}, not the network just made: {r.text}")
                if i >= 10:
                    after_answer.append(max(0.0, at - t1))
                    after_start.append(at - t0)
        finally:
            monitor.terminate()
            monitor.wait(timeout=30)
    return after_answer, after_start


def own_cost(n: int = 20000) -> dict[str, float]:
    """Seconds the request-id middleware adds to one request, in-process against an application that answers at
    once (no server, no database: a steady figure where the servers' p50s drift with the machine's other work): for
    a GET, and for a POST with its log line written to a file as the server writes it."""
    out = tempfile.NamedTemporaryFile("w", prefix="cloudnet-bench-log-")  # noqa: SIM115
    handler, writer = logs.in_thread("text", out)  # (as the server logs: written by a thread of its own)
    logger = logging.getLogger("cloudnet.api.requests")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False

    async def answer(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 201, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b"{}"})

    async def ignore(message: Any) -> None:
        return None

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def run(app: Any, method: str) -> float:
        headers = [(b"x-auth-token", b"t"), (b"content-type", b"application/json")]
        scope = {"type": "http", "method": method, "path": "/v2.0/ports", "headers": headers}
        t0 = time.perf_counter()
        for _ in range(n):  # (each request in a context of its own, as uvicorn's task per request has)
            await asyncio.create_task(app(dict(scope), receive, ignore), context=contextvars.copy_context())
        return (time.perf_counter() - t0) / n

    async def measure() -> dict[str, float]:
        bare, wrapped = answer, RequestIds(answer)
        out = {}
        for method in ("GET", "POST"):
            out[method] = min([await run(wrapped, method) - await run(bare, method) for _ in range(3)])
        return out

    try:
        return asyncio.run(measure())
    finally:
        logger.removeHandler(handler)
        writer.stop()
        out.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--creates", type=int, default=2000)
    args = parser.parse_args()
    machine_load()
    pin_client(1)
    with server() as url:
        answered, started = event_latency(url, args.events)
    print(f"event stream: {args.events} networks, each followed to its `cloudnet monitor` line")
    for name, values in (("after the POST's answer", answered), ("after its start (upper bound)", started)):
        p50, p99 = percentile(values, 50), percentile(values, 99)
        row(f"event at monitor {name}: p50", ms(p50), "<= 100 ms", p50 <= 0.1)
        row("  p99", ms(p99), "<= 100 ms", p99 <= 0.1)
    with server(ids=True) as on_url, server(ids=False) as off_url:
        on_times, off_times, ratios = alternated(on_url, off_url, args.creates)
    on, off, per_round = percentile(on_times, 50), percentile(off_times, 50), median(ratios)
    ratio = on / off - 1
    print(f"request ids: {args.creates} port creates on each server, alternated in rounds")
    row("port create p50, request ids on", ms(on), "-")
    row("port create p50, request ids off", ms(off), "-")
    row("overhead of request ids (p50s)", f"{ratio * 100:+.1f} %", "<= 5 %", ratio <= 0.05)
    row("  (median of the rounds' p50 ratios)", f"{(per_round - 1) * 100:+.1f} %", "<= 5 %", per_round <= 1.05)
    cost = own_cost()
    row("  (the middleware's own cost: a GET)", f"{cost['GET'] * 1e6:.1f} us", "-")
    share = cost["POST"] / off
    row("  (a POST, its log line included)", f"{cost['POST'] * 1e6:.1f} us", "<= 5 % of a create", share <= 0.05)
    print(f"(client on CPU 1, servers on CPU 0; {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
