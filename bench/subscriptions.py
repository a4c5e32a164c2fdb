"""Subscriptions: what subscribers cost the writer, and how many updates reach them per second.

    python -m bench.subscriptions [--n 300] [--reps 3]

Rows (medians of `--reps` runs, each on a fresh durable LMDB database):
- the durable lifecycle (enqueue, claim, complete: one caller, one call at a time) with 0, 100
  and 1,000 idle subscribers (subscribed to a query the lifecycle never touches), in process and
  over the WebSocket (a `stdbmod serve` subprocess, the lifecycle over HTTP); and with 100
  subscribers to the lifecycle's own table, each receiving every change;
- updates delivered per second: every commit of the lifecycle to each of 100 subscribers of the
  task table, in process (inline callbacks) and over the WebSocket (clients reading as fast as
  they can).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.http_load import stdbmod_server  # noqa: E402
from stdbmod import Database  # noqa: E402
from stdbmod.retry import create_retry_module  # noqa: E402

IDLE = "SELECT * FROM retry_worker"  # the lifecycle never writes it
ACTIVE = "SELECT * FROM task"


def _lifecycle(call: Callable[..., Any], n: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        call("enqueue", "bench", None, {"n": i})
        task = call("claim", None, "w0")
        call("complete", task["id"] if isinstance(task, dict) else task.id)
    return n / (time.perf_counter() - t0)


def inproc(d: str, n: int, subscribers: int, query: str) -> tuple[float, float]:
    """(lifecycles/s, updates delivered/s) with `subscribers` inline subscribers of `query`."""
    rm = create_retry_module()
    owner_db = Database.create(os.path.join(d, "db"), rm.module, owner=_owner())
    delivered = [0]
    lock = threading.Lock()

    def count(event: Any) -> None:
        with lock:
            delivered[0] += 1

    subs = [owner_db.subscribe([query], count, sender=_owner(), inline=True) for _ in range(subscribers)]
    try:
        def call(name: str, *args: Any) -> Any:
            return owner_db.call(name, *args, sender=_owner())

        delivered[0] = 0
        t0 = time.perf_counter()
        rate = _lifecycle(call, n)
        for s in subs[:1]:
            s.sync(120)
        elapsed = time.perf_counter() - t0
        return rate, delivered[0] / elapsed if subscribers else 0.0
    finally:
        for s in subs:
            s.unsubscribe()
        owner_db.close()


def _owner() -> Any:
    from stdbmod import Identity

    return Identity.from_claims("bench", "owner")


def over_ws(d: str, n: int, subscribers: int, query: str) -> tuple[float, float]:
    """(lifecycles/s over HTTP, updates received/s) with `subscribers` WebSocket clients."""
    # 1,000 subscribers are 1,000 open connections: past the default cap (--max-connections 1000)
    with stdbmod_server(d, "--max-connections", "4000") as (port, token, _pid):
        return _over_ws(port, token, n, subscribers, query)


def _over_ws(port: int, token: str, n: int, subscribers: int, query: str) -> tuple[float, float]:
    base = f"http://127.0.0.1:{port}"
    received = [0]
    ready = threading.Event()
    stop = threading.Event()
    loop = asyncio.new_event_loop()

    async def client() -> None:
        from websockets.asyncio.client import connect

        async with connect(f"ws://127.0.0.1:{port}/v1/database/retry/subscribe?token={token}", subprotocols=["v1.json.spacetimedb"],  # type: ignore[list-item]
                           open_timeout=120, max_size=None) as ws:
            await ws.recv()
            await ws.send(json.dumps({"SubscribeSingle": {"query": query, "request_id": 1, "query_id": {"id": 1}}}))
            await ws.recv()
            while not stop.is_set():
                try:
                    await asyncio.wait_for(ws.recv(), 0.5)
                    received[0] += 1
                except TimeoutError:
                    pass

    async def clients() -> None:
        tasks = []
        for i in range(subscribers):
            tasks.append(asyncio.ensure_future(client()))
            if i % 50 == 49:
                await asyncio.sleep(0.05)
        while received[0] < 0:
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        ready.set()
        await asyncio.gather(*tasks, return_exceptions=True)

    runner = threading.Thread(target=lambda: loop.run_until_complete(clients()), daemon=True)
    runner.start()
    if subscribers:
        ready.wait(300)
    else:
        ready.set()
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
        def call(name: str, *args: Any) -> Any:
            r = http.post(f"/v1/database/retry/call/{name}", json=list(args))
            r.raise_for_status()
            return r.json()

        before = received[0]
        t0 = time.perf_counter()
        rate = _lifecycle(call, n)
        want = before + (3 * n * subscribers if query == ACTIVE else 0)
        deadline = time.monotonic() + 120
        while received[0] < want and time.monotonic() < deadline:
            time.sleep(0.05)
        elapsed = time.perf_counter() - t0
    stop.set()
    runner.join(30)
    return rate, (received[0] - before) / elapsed if subscribers else 0.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=300, help="lifecycles per run")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--no-ws", action="store_true", help="only the in-process rows")
    a = p.parse_args(argv)
    rows: list[tuple[str, float, float, list[float]]] = []
    cases: list[tuple[str, Callable[[str], tuple[float, float]]]] = [
        ("in process, 0 subscribers", lambda d: inproc(d, a.n, 0, IDLE)),
        ("in process, 100 idle subscribers", lambda d: inproc(d, a.n, 100, IDLE)),
        ("in process, 1,000 idle subscribers", lambda d: inproc(d, a.n, 1000, IDLE)),
        ("in process, 100 subscribers of task (every update)", lambda d: inproc(d, a.n, 100, ACTIVE)),
    ]
    if not a.no_ws:
        cases += [
            ("WebSocket, 0 subscribers (lifecycle over HTTP)", lambda d: over_ws(d, a.n, 0, IDLE)),
            ("WebSocket, 100 idle subscribers", lambda d: over_ws(d, a.n, 100, IDLE)),
            ("WebSocket, 1,000 idle subscribers", lambda d: over_ws(d, a.n, 1000, IDLE)),
            ("WebSocket, 100 subscribers of task (every update)", lambda d: over_ws(d, a.n, 100, ACTIVE)),
        ]
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in cases}
    for rep in range(a.reps):  # the cases take turns, so a machine's drift affects them alike
        for name, fn in cases:
            with tempfile.TemporaryDirectory(prefix="stdbmod-bench-subs-") as d:
                samples[name].append(fn(d))
            print(f"  rep {rep + 1}: {name}: {samples[name][-1][0]:.1f} lifecycles/s, {samples[name][-1][1]:.0f} updates/s", file=sys.stderr)
    for name, _ in cases:
        rates = [r for r, _ in samples[name]]
        rows.append((name, statistics.median(rates), statistics.median(u for _, u in samples[name]), rates))
    base = {"in": rows[0][1], "We": rows[4][1] if len(rows) > 4 else rows[0][1]}
    print("| subscribers | lifecycle/s (median) | min - max | vs 0 subscribers | updates delivered/s |")
    print("|---|---|---|---|---|")
    for name, rate, updates, rates in rows:
        print(f"| {name} | {rate:.1f} | {min(rates):.1f} - {max(rates):.1f} | {rate / base[name[:2]]:.2f} | {updates:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
