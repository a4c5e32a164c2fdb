"""The peer queues, each in its durable setting, running the same lifecycle: N jobs, each
enqueued, claimed and completed, every step acknowledged only once it is on disk.

Every function takes a fresh directory and N and returns jobs/s. A missing package raises
SkipRow("not installed"), so the table says so instead of failing.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

from .servers import postgres_server, redis_server
from .stats import SkipRow


def _need(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise SkipRow("not installed") from None


def noop(n: int) -> dict[str, bool]:
    """The job every peer runs: nothing (the queue is what is measured)."""
    return {"ok": True}


def huey_sqlite(path: str, n: int) -> float:
    """SqliteHuey with fsync=True (synchronous=FULL on a WAL journal): enqueue, dequeue,
    execute (which stores the result)."""
    huey_mod = _need("huey")
    huey = huey_mod.SqliteHuey("bench", filename=os.path.join(path, "huey.db"), fsync=True, results=True)
    task = huey.task()(noop)
    t0 = time.perf_counter()
    for i in range(n):
        huey.enqueue(task.s(i))
        job = huey.dequeue()
        huey.execute(job)
    elapsed = time.perf_counter() - t0
    huey.storage.close()
    return n / elapsed


def persist_queue(path: str, n: int) -> float:
    """persist-queue's SQLiteAckQueue (auto_commit) with synchronous=FULL: put, get (marks the
    item unacked), ack."""
    pq = _need("persistqueue")
    q = pq.SQLiteAckQueue(os.path.join(path, "pq"), auto_commit=True, multithreading=False)
    for conn in {id(c): c for c in (q._putter, q._getter)}.values():
        conn.execute("PRAGMA synchronous=FULL")
    t0 = time.perf_counter()
    for i in range(n):
        q.put({"n": i})
        item = q.get(raw=True)
        q.ack(id=item["pqid"])
    elapsed = time.perf_counter() - t0
    q.close()
    return n / elapsed


def litequeue(path: str, n: int) -> float:
    """litequeue with synchronous=FULL (it sets NORMAL, which does not sync a WAL commit):
    put, pop (locks the message), done."""
    lq = _need("litequeue")
    q = lq.LiteQueue(os.path.join(path, "lq.db"))
    q.conn.execute("PRAGMA synchronous = FULL;")
    t0 = time.perf_counter()
    for i in range(n):
        q.put(f'{{"n": {i}}}')
        m = q.pop()
        q.done(m.message_id)
    elapsed = time.perf_counter() - t0
    q.close()
    return n / elapsed


def rq_redis(path: str, n: int) -> float:
    """RQ on a loopback redis-server with appendonly yes, appendfsync always: enqueue N jobs,
    then one SimpleWorker (no fork) in burst mode claims, runs and finishes them all."""
    rq = _need("rq")
    redis = _need("redis")
    with redis_server(path) as port:
        conn = redis.Redis(host="127.0.0.1", port=port)
        q = rq.Queue("bench", connection=conn)
        w = rq.SimpleWorker([q], connection=conn)
        t0 = time.perf_counter()
        for i in range(n):
            q.enqueue(noop, i)
        w.work(burst=True, logging_level="WARNING")
        elapsed = time.perf_counter() - t0
        done = rq.registry.FinishedJobRegistry(queue=q).count
        conn.close()
    if done != n:
        raise RuntimeError(f"rq finished {done} of {n} jobs")
    return n / elapsed


def procrastinate_pg(path: str, n: int) -> float:
    """procrastinate on a loopback PostgreSQL (fsync, synchronous_commit on): defer N jobs,
    then a worker (concurrency 1) fetches and finishes them."""
    with postgres_server(path) as conninfo:
        return procrastinate_on(conninfo, n)


def procrastinate_on(conninfo: str, n: int) -> float:
    """`procrastinate_pg` on a server already running (bench/postgres.py shares one per run)."""
    pc = _need("procrastinate")
    _need("psycopg")
    app = pc.App(connector=pc.PsycopgConnector(conninfo=conninfo))
    task = app.task(name="noop", queue="bench")(noop)

    async def run() -> float:
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            t0 = time.perf_counter()
            for i in range(n):
                await task.defer_async(n=i)
            await app.run_worker_async(queues=["bench"], wait=False, concurrency=1, install_signal_handlers=False)
            return time.perf_counter() - t0

    elapsed = asyncio.run(run())
    return n / elapsed


HUEY = "huey (SqliteHuey, fsync=True)"  # the row the targets are ratios to

PEERS: list[tuple[str, Callable[[str, int], float], bool]] = [
    # (name, function, needs a server)
    (HUEY, huey_sqlite, False),
    ("persist-queue (SQLiteAckQueue, synchronous=FULL)", persist_queue, False),
    ("litequeue (synchronous=FULL)", litequeue, False),
    ("RQ on redis (appendfsync always)", rq_redis, True),
    ("procrastinate on PostgreSQL", procrastinate_pg, True),
]
