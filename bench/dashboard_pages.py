"""What the dashboard's reads and the metrics' index counts cost on a big task table.

    python bench/dashboard_pages.py                 # 1,000,000 tasks (about two minutes to build)
    python bench/dashboard_pages.py --tasks 100000 --db /tmp/tasks   # keep the database for reruns

Builds the table once (enqueue_many; then 10% completed and 1% dead through the batch
reducers), then times each read in-process, the median of several runs: a jobs page per filter
(keyset pages along an index, at most `BUDGET` rows read each), a page deep in the table, one
job with its history, and the overview's index counts (the same counts /metrics serves).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from stdbmod import Database, Identity
from stdbmod.http.dashboard import Cursor, JobFilter, reads
from stdbmod.http.metrics_tasks import take
from stdbmod.retry import Completion, NewTask, TaskStatus, create_retry_module
from stdbmod.runtime import Range
from stdbmod.types import Timestamp

OWNER = Identity.from_claims("bench", "owner")
CHUNK = 1000


def build(path: str, tasks: int) -> Database:
    module = create_retry_module().module
    if os.path.exists(os.path.join(path, "data.mdb")):
        return Database.open(path, module, durable=False)
    db = Database.create(path, module, owner=OWNER, durable=False)
    for i in range(0, tasks, CHUNK):
        specs = [
            NewTask("email" if j % 3 else "webhook", f"q{j % 4}", {"user": i + j, "note": "needle" if (i + j) % 10_007 == 0 else "hay"}, 1, 30, None, 0, None)
            for j in range(CHUNK)
        ]
        db.call("enqueue_many", specs, sender=OWNER)
    for _ in range(tasks // 10 // 500):  # 10% completed
        claimed = db.call("claim_many", 500, None, "bench", sender=OWNER)
        db.call("complete_many", [Completion(t.id, None, None) for t in claimed], sender=OWNER)
    for _ in range(tasks // 100):  # 1% dead (one attempt allowed)
        t = db.call("claim", None, "bench", sender=OWNER)
        db.call("fail", t.id, f"provider 5xx for user {t.payload['user']}", sender=OWNER)
    return db


def timed(fn: Callable[[], Any], runs: int) -> float:
    spent = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        spent.append(time.perf_counter() - started)
    return statistics.median(spent) * 1000


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", type=int, default=1_000_000)
    p.add_argument("--db", default=None, help="keep the database here (reused when it exists)")
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args(argv)
    path = a.db or tempfile.mkdtemp(prefix="stdbmod-dashboard-")
    started = time.perf_counter()
    db = build(path, a.tasks)
    with db.read() as view:
        total = view.db.task.count()
        newest = next(iter(view.db.task.id.filter(Range(), reverse=True)))
    print(f"{total:,} tasks at {path} (ready in {time.perf_counter() - started:.0f} s)\n")
    hour_ago = Timestamp(newest.created_at.micros - 3_600_000_000)
    cases: list[tuple[str, Callable[[], Any]]] = [
        ("jobs page, no filter", lambda: reads.jobs(db, OWNER, JobFilter())),
        ("jobs page, status=queued", lambda: reads.jobs(db, OWNER, JobFilter(status=TaskStatus.QUEUED))),
        ("jobs page, status=dead (dead-letter page)", lambda: reads.jobs(db, OWNER, JobFilter(status=TaskStatus.DEAD))),
        ("jobs page, status=completed, queue=q3", lambda: reads.jobs(db, OWNER, JobFilter(status=TaskStatus.COMPLETED, queue="q3"))),
        ("jobs page, job_type=webhook", lambda: reads.jobs(db, OWNER, JobFilter(job_type="webhook"))),
        ("jobs page, created in the last hour", lambda: reads.jobs(db, OWNER, JobFilter(since=hour_ago))),
        ("jobs page, search 'needle' (rare: budget-bound)", lambda: reads.jobs(db, OWNER, JobFilter(search="needle"))),
        ("jobs page, search in errors 'provider 5xx'", lambda: reads.jobs(db, OWNER, JobFilter(search="provider 5xx"))),
        ("jobs page at the bottom (before=#100)", lambda: reads.jobs(db, OWNER, JobFilter(), Cursor(100))),
        ("one job with its history", lambda: reads.job(db, OWNER, newest.id)),
        ("overview / metrics index counts", lambda: take(db)),
    ]
    print(f"| read ({total:,} tasks) | median ms ({a.runs} runs) |\n|---|---:|")
    for name, fn in cases:
        print(f"| {name} | {timed(fn, a.runs):.1f} |")
    db.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
