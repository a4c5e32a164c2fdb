"""The durable lifecycle through stdbmod.client: `stdbmod serve` in its own process; in another,
16 `AsyncClient` tasks enqueue the jobs while one `Worker(concurrency=16)` claims and completes
them (an async handler that returns at once), as the raw HTTP rows do with bare connections. The
time runs from the first enqueue to the last completion.

The worker claims with `claim_many` when several slots are free, so it sends fewer claims than
the raw rows; what this row adds over them is the SDK's own cost (httpx, msgspec, the worker's
tasks and heartbeat timers) on the same 2 cores.

    python -m bench.sdk_load gen URL TOKEN JOBS SLOTS      # the generator; prints JSON
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from typing import Any

from .http_load import _process_cpu, generate_in_process, stdbmod_server

LAST_CLIENT_CPU: list[float] = []  # the SDK process's CPU use / wall time, per run (1.0 = one core)
LAST_SERVER_CPU_US: list[float] = []  # the server's CPU time per job, in us


async def _lifecycle(url: str, token: str, jobs: int, slots: int) -> float:
    from stdbmod.client import AsyncClient, Worker

    worker = Worker(url, token=token, concurrency=slots, poll_max_seconds=0.05)
    done = 0

    @worker.job("bench")
    async def bench(payload: Any) -> None:
        nonlocal done
        done += 1
        if done == jobs:
            worker.stop()

    async def enqueue(client: AsyncClient, n: int) -> None:
        for i in range(n):
            await client.enqueue("bench", i)

    per = jobs // slots
    t0 = time.perf_counter()
    async with AsyncClient(url, token, max_connections=slots) as client:
        await asyncio.gather(worker.run_async(), *(enqueue(client, per) for _ in range(slots)))
    return time.perf_counter() - t0


def generate(url: str, token: str, jobs: int, slots: int) -> dict[str, float]:
    jobs = jobs // slots * slots
    elapsed = asyncio.run(_lifecycle(url, token, jobs, slots))
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"jobs": jobs, "elapsed": elapsed, "client_cpu": ru.ru_utime + ru.ru_stime}


def run(path: str, jobs: int, slots: int = 16) -> float:
    """Jobs/s of the lifecycle through the SDK against a fresh `stdbmod serve`."""
    try:
        import stdbmod.client  # noqa: F401
    except ImportError as e:
        from .stats import SkipRow

        raise SkipRow(f"stdbmod.client is not installed ({e})") from None
    with stdbmod_server(path) as (port, token, pid):
        cpu0 = _process_cpu(pid)
        m = generate_in_process("bench.sdk_load", f"http://127.0.0.1:{port}", token, jobs, slots)
        cpu1 = _process_cpu(pid)
    LAST_CLIENT_CPU.append(m["client_cpu"] / m["elapsed"])
    if cpu0 is not None and cpu1 is not None:
        LAST_SERVER_CPU_US.append((cpu1 - cpu0) / m["jobs"] * 1e6)
    return float(m["jobs"] / m["elapsed"])


if __name__ == "__main__":
    if sys.argv[1] != "gen":
        raise SystemExit("usage: python -m bench.sdk_load gen URL TOKEN JOBS SLOTS")
    print(json.dumps(generate(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))))
