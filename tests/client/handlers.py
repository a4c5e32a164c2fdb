"""Workers for the process tests, started as `stdbmod worker tests.client.handlers:worker`.

Each run appends one line `job_id attempt worker_id` to $STDBMOD_TEST_RUNS (one short O_APPEND
write, so processes do not interleave). The gate handlers wait until the file $STDBMOD_TEST_GATE
exists: a job that stays running until the test says so (a bounded wait on a condition)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from stdbmod.client import Worker, current_job

worker = Worker()
GATE_DEADLINE = 120.0


def _record() -> str:
    ctx = current_job()
    fd = os.open(os.environ["STDBMOD_TEST_RUNS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{ctx.job.id} {ctx.attempt} {ctx.worker_id}\n".encode())
    finally:
        os.close(fd)
    return ctx.worker_id


def _gate_open() -> bool:
    return os.path.exists(os.environ["STDBMOD_TEST_GATE"])


@worker.job("sync_job")
def sync_job(payload: Any) -> dict[str, Any]:
    return {"n": payload["n"], "by": _record()}


@worker.job("async_job")
async def async_job(payload: Any) -> dict[str, Any]:
    by = _record()
    await asyncio.sleep(0)
    return {"n": payload["n"], "by": by}


@worker.job("gate")
def gate(payload: Any) -> dict[str, Any]:
    by = _record()
    deadline = time.monotonic() + GATE_DEADLINE
    while not _gate_open() and time.monotonic() < deadline:
        time.sleep(0.01)
    return {"by": by}


@worker.job("gate_async")
async def gate_async(payload: Any) -> dict[str, Any]:
    by = _record()
    deadline = time.monotonic() + GATE_DEADLINE
    while not _gate_open() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return {"by": by}
