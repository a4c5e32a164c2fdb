"""Measurements beyond throughput: claim latency against queue depth, peak RSS and the size on
disk per job, scheduler lateness with many timers, commit-log replay rate.

`python -m bench.extras depth D DIR` builds one depth in a fresh process (so its peak RSS is its
own) and prints JSON; `python -m bench.extras claims N D1=DIR1 D2=DIR2 ...` then times N claims
on each, round-robin, in one process. run.py calls both.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Annotated

import msgspec

from stdbmod import At, Database, Module, PrimaryKey, ReducerContext, Scheduler, Timestamp
from stdbmod.runtime import apply_changes, reexecute

from .inproc import _lifecycle
from .jobqueue import job_queue

BULK = 10_000


def depth(path: str, jobs: int, claims: int = 20) -> dict[str, float]:
    """Build a queue of `jobs` tasks (bulk enqueues, fsync off: only the build), reopen it
    durable and make `claims` claims (so the peak RSS includes claiming). Sizes in bytes, RSS in
    MiB. The latencies come from `claim_latency`, which times every depth in one window."""
    q = job_queue()
    t0 = time.perf_counter()
    db = Database.create(path, q.module, owner=q.sender, durable=False)
    futures = []
    for first in range(0, jobs, BULK):
        name, args = q.bulk(first, min(BULK, jobs - first))
        futures.append(db.submit(name, *args, sender=q.sender))
        if len(futures) >= 8:
            futures.pop(0).result()
    for f in futures:
        f.result()
    db.close()
    build = time.perf_counter() - t0
    size = os.path.getsize(os.path.join(path, "data.mdb"))
    db = Database.open(path, q.module)  # durable: what a worker sees
    try:
        for _ in range(claims):
            name, args = q.claim("w")
            assert db.call(name, *args, sender=q.sender) is not None
            name, args = q.enqueue(jobs)
            db.call(name, *args, sender=q.sender)  # the depth stays `jobs`
    finally:
        db.close()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"jobs": jobs, "build_s": build, "bytes_per_job": size / jobs, "peak_rss_mib": rss}


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[max(0, int(len(xs) * q) - 1)]


def claim_latency(paths: dict[int, str], claims: int = 500, warm: int = 20) -> dict[int, dict[str, float]]:
    """Time durable single claims on queues of several depths (`paths`: depth -> a directory
    `depth` built), round-robin: one claim on each depth in turn, so disk and CPU noise hit
    every depth alike. After each timed claim an untimed enqueue keeps the depth constant.
    Per depth: wall p50/p99 (ms) and the claiming thread's CPU time p50/p99 (ms; a lone caller
    runs its call on its own thread, so this is the claim's whole CPU cost, fsync syscalls
    included but not the time spent waiting for the disk)."""
    q = job_queue()
    dbs = {n: Database.open(p, q.module) for n, p in paths.items()}
    wall: dict[int, list[float]] = {n: [] for n in dbs}
    cpu: dict[int, list[float]] = {n: [] for n in dbs}
    try:
        for k in range(warm + claims):
            for n, db in dbs.items():
                name, args = q.claim("w")
                t, c = time.perf_counter(), time.thread_time()
                task = db.call(name, *args, sender=q.sender)
                c, t = time.thread_time() - c, time.perf_counter() - t
                assert task is not None
                if k >= warm:  # the first ones warm the caches
                    wall[n].append(t * 1000)
                    cpu[n].append(c * 1000)
                name, args = q.enqueue(n)
                db.call(name, *args, sender=q.sender)
    finally:
        for db in dbs.values():
            db.close()
    return {
        n: {
            "claims": claims,
            "claim_p50_ms": statistics.median(wall[n]),
            "claim_p99_ms": _pct(wall[n], 0.99),
            "claim_cpu_p50_ms": statistics.median(cpu[n]),
            "claim_cpu_p99_ms": _pct(cpu[n], 0.99),
        }
        for n in dbs
    }


def lifecycle_size(path: str, n: int) -> float:
    """Bytes of data.mdb per job after n durable lifecycles (rows, indexes, commit log)."""
    q = job_queue()
    db = Database.create(path, q.module, owner=q.sender, durable=False)
    try:
        _lifecycle(db, q, 0, n, "w")
    finally:
        db.close()
    return os.path.getsize(os.path.join(path, "data.mdb")) / n


# --- the scheduler -------------------------------------------------------------------------------


class Timer(msgspec.Struct):
    scheduled_id: Annotated[int, PrimaryKey(auto_inc=True)]
    scheduled_at: At
    seq: int


def _timer_module(lateness: list[float]) -> Module:
    mod = Module("timers")
    mod.table(scheduled="fire")(Timer)

    @mod.reducer
    def fire(ctx: ReducerContext, timer: Timer) -> None:
        ctx.require_scheduler()
        # A side channel for the bench only: a reducer must not read the wall clock.
        lateness.append(time.time() * 1e6 - timer.scheduled_at.time.micros)

    @mod.reducer
    def arm_many(ctx: ReducerContext, start_us: int, first: int, count: int, spacing_us: int) -> None:
        for i in range(first, first + count):
            ctx.db.timer.insert(Timer(0, At(Timestamp(start_us + i * spacing_us)), i))

    return mod


# The machine's floor during a scheduler run, from a separate process: every millisecond it wakes
# up (how late: CPU contention in the guest) and does a fixed piece of work that takes ~0.2 ms on
# an idle core (how much longer it takes: the vCPU shared with the host's other work). Both p99, ms.
_FLOOR_PROBE = """
import json, sys, time
def work(n):
    t = time.perf_counter()
    x = 0
    for i in range(n):
        x += i * i
    return time.perf_counter() - t
n = 500
while min(work(n) for _ in range(5)) < 0.0002:
    n *= 2
wake, busy = [], []
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    t = time.perf_counter()
    time.sleep(0.001)
    wake.append(time.perf_counter() - t - 0.001)
    busy.append(work(n))
wake.sort(); busy.sort()
p99 = lambda xs: xs[int(len(xs) * 0.99) - 1] * 1000
print(json.dumps({"wake_p99_ms": p99(wake), "work_p50_ms": busy[len(busy) // 2] * 1000, "work_p99_ms": p99(busy)}))
"""


def scheduler_lateness(path: str, timers: int, rate: float, measure_s: float, durable: bool = True) -> dict[str, float]:
    """Arm `timers` one-shot timers falling due at `rate` per second (so all of them are
    pending at the start), run the production scheduler for `measure_s` seconds, and report the
    lateness of the ones that fired (ms): the reducer's start minus the timer's due time.
    `wake_p99_ms`, `work_p50_ms` and `work_p99_ms` are the machine's floor meanwhile, from a
    separate process (see _FLOOR_PROBE): what CPU contention alone costs."""
    lateness: list[float] = []
    mod = _timer_module(lateness)
    owner = job_queue().sender
    db = Database.create(path, mod, owner=owner, durable=durable)
    spacing = int(1e6 / rate)
    start = int(time.time() * 1e6) + 2_000_000 + int(timers / 20_000 * 1e6)  # after the arming
    for first in range(0, timers, BULK):
        db.call("arm_many", start, first, min(BULK, timers - first), spacing, sender=owner)
    wait = max(0.0, start / 1e6 - time.time())
    probe = subprocess.Popen([sys.executable, "-c", _FLOOR_PROBE, str(wait + measure_s)], stdout=subprocess.PIPE, text=True)
    sched = Scheduler(db).start()
    try:
        time.sleep(wait + measure_s)
    finally:
        sched.stop()
        db.close()
        out, _ = probe.communicate()
    if not lateness:
        raise RuntimeError("no timer fired")
    ms = sorted(x / 1000 for x in lateness)
    return {"fired": len(ms), "p50_ms": statistics.median(ms), "p99_ms": _pct(ms, 0.99), "max_ms": ms[-1], **json.loads(out)}


# --- the commit log --------------------------------------------------------------------------------


def replay_rates(path: str, n: int) -> dict[str, float]:
    """Records/s of the two replays of a log of n lifecycles into fresh databases."""
    q = job_queue()
    src = Database.create(os.path.join(path, "src"), q.module, owner=q.sender, durable=False)
    try:
        _lifecycle(src, q, 0, n, "w")
        records = src.commit_log()
        want = src.state_hash()
    finally:
        src.close()
    out: dict[str, float] = {"records": len(records)}
    for name, fn in (("apply", apply_changes), ("reexecute", reexecute)):
        q2 = job_queue()
        dst = Database.create(os.path.join(path, name), q2.module, owner=q2.sender, run_init=False)
        try:
            t0 = time.perf_counter()
            fn(dst, records)
            out[name] = len(records) / (time.perf_counter() - t0)
            if dst.state_hash() != want:
                raise RuntimeError(f"{name}: the replayed state differs from the source")
        finally:
            dst.close()
    return out


if __name__ == "__main__":
    what, arg = sys.argv[1], int(sys.argv[2])
    if what == "depth":
        print(json.dumps(depth(sys.argv[3], arg)))
    elif what == "claims":  # claims N DEPTH=DIR ...
        print(json.dumps(claim_latency({int(d): p for d, p in (a.split("=", 1) for a in sys.argv[3:])}, arg)))
    else:
        raise SystemExit(f"unknown: {what}")
