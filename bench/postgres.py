"""The durable lifecycle on PostgreSQL: stdbmod's PostgreSQL backend with 1 and 3 nodes, and
procrastinate, on one throwaway server (fsync and synchronous_commit on), in the same run.

Each repetition starts one server and measures, in this order: procrastinate (defer N, then a
worker of concurrency 1), stdbmod one node one call at a time, stdbmod one node with 16 threads
(group commit), stdbmod 3 nodes (3 processes on one schema, 8 threads each). A node here is a
`Database` on a `PostgresStorage`, as `stdbmod serve --data postgresql://...` would hold.

    python -m bench.postgres node CONNINFO SCHEMA N THREADS    (one node; the runner starts 3)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

from stdbmod import Database

from .inproc import _lifecycle
from .jobqueue import job_queue
from .servers import postgres_server
from .stats import SkipRow

NODE_THREADS = 8


def _storage(conninfo: str, schema: str) -> Any:
    try:
        from stdbmod.storage.postgres import PostgresStorage
    except ImportError as e:
        raise SkipRow(f"the postgres extra is not installed: {e}") from None
    return PostgresStorage(conninfo, schema=schema, readers=2)


def _threads(db: Database, n: int, threads: int, tag: str) -> float:
    """n lifecycles from `threads` threads on `db`; seconds."""
    import threading

    q = job_queue()
    per = n // threads
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            _lifecycle(db, q, k * per, per, f"{tag}w{k}")
        except BaseException as e:  # reported below
            errors.append(e)

    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    t0 = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - t0


def stdbmod_one(conninfo: str, schema: str, n: int, threads: int) -> float:
    q = job_queue()
    db = Database.create(_storage(conninfo, schema), q.module, owner=q.sender)
    try:
        if threads == 1:
            t0 = time.perf_counter()
            _lifecycle(db, q, 0, n, "w0")
            return n / (time.perf_counter() - t0)
        return (n // threads * threads) / _threads(db, n, threads, "")
    finally:
        db.close()


def stdbmod_nodes(conninfo: str, schema: str, n: int, nodes: int) -> float:
    """`nodes` processes on one schema, started together; jobs per second of wall time."""
    q = job_queue()
    Database.create(_storage(conninfo, schema), q.module, owner=q.sender).close()
    per = n // nodes
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root}
    procs = [
        subprocess.Popen([sys.executable, "-m", "bench.postgres", "node", conninfo, schema, str(per), str(NODE_THREADS)],
                         cwd=root, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(nodes)
    ]
    try:
        for p in procs:
            assert p.stdout is not None
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("a bench node did not start")
        t0 = time.perf_counter()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        done = 0
        for p in procs:
            out, _ = p.communicate(timeout=600)
            done += int(out.split()[-1])
        elapsed = time.perf_counter() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return done / elapsed


def same_server(workdir: str, n: int, peer_n: int) -> dict[str, float]:
    """One repetition: every PostgreSQL row on one fresh server."""
    from .peers import procrastinate_on

    with postgres_server(workdir) as conninfo:
        out = {"procrastinate": procrastinate_on(conninfo, peer_n)}
        out["one node, one call at a time"] = stdbmod_one(conninfo, "one_single", max(60, n // 8), 1)
        out["one node, 16 threads"] = stdbmod_one(conninfo, "one_threads", n, 16)
        out["3 nodes, 8 threads each"] = stdbmod_nodes(conninfo, "three", n, 3)
    return out


def _node(conninfo: str, schema: str, n: int, threads: int) -> None:
    q = job_queue()
    db = Database.open(_storage(conninfo, schema), q.module)
    try:
        print("ready", flush=True)
        sys.stdin.readline()
        _threads(db, n, threads, f"{os.getpid()}-")
    finally:
        db.close()
    print(n // threads * threads, flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "node":
        _node(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        sys.exit(__doc__)
