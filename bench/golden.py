"""The golden run: a deterministic retry workload whose every outcome is digested, to show that a
change to the hot path changed nothing a user can see:

    python bench/golden.py                 # this checkout's digests
    python bench/golden.py --tree DIR      # another checkout's (a git worktree of main, say)

The workload (a manual clock; the runtime's rng is seeded per call) has handlers that fail,
failures and retries, a queue with limits, a paused queue, leases left to the sweep, retention,
a history cap and a dead-letter bulk requeue. It prints digests of every call's answer (and the
dead-letter groups, the task lists, the history, the queues), the commit log (scheduled records
with their sender blanked: the database's identity is random), the state hash, the state hash
with every row as a MessagePack map (`maps`: the rows' stored form before storage format 2, so
it compares trees across that change, where `commitlog` and `state` differ by design), the
database log, and the integrity check's findings. Two trees whose lines are equal behaved the
same.

Each tree's `stdbmod` is copied to one fixed path before it runs: the error fingerprints of
failed handlers hash their tracebacks, and a traceback names the source file's path.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any

FIXED = os.path.join(tempfile.gettempdir(), "stdbmod-golden-tree")


def workload() -> str:
    import msgspec

    from stdbmod import Database, Identity, ManualClock, ReducerContext
    from stdbmod.codec import msgpack_encoder as enc
    from stdbmod.retry import NewTask, create_retry_module, queries
    from stdbmod.retry.triage import BulkAction, TriageFilter, dlq_groups

    owner = Identity.from_claims("golden", "owner")
    worker = Identity.from_claims("golden", "worker")
    rm = create_retry_module()

    @rm.handler("inmod")
    def inmod(ctx: ReducerContext, payload: Any) -> Any:
        if payload["n"] % 3 == 0:
            raise RuntimeError(f"handler boom {payload['n']}")
        return {"ok": payload["n"]}

    clock = ManualClock()
    db = Database.create(tempfile.mkdtemp(), rm.module, owner=owner, clock=clock, durable=False)
    h = hashlib.sha256()

    def call(*args: Any, sender: Identity = owner) -> Any:
        try:
            r = db.call(*args, sender=sender)
        except Exception as e:  # the answer is what is compared, errors included
            r = f"{type(e).__name__}: {e}"
        h.update(enc.encode(r))
        return r

    call("grant_worker", worker)
    call("set_history_cap", 50)
    call("set_retention", "completed", 3600, 20)
    call("set_queue_limits", "lim", 2, 5, 60, None)
    for i in range(300):
        task = NewTask("email" if i % 5 else "inmod", queue=("default", "lim", "other")[i % 3], payload={"n": i}, max_attempts=2,
                       backoff_seconds=1, priority=i % 4, idempotency_key=f"k{i // 2}" if i % 7 == 0 else None)
        call("enqueue", task, sender=worker)
        if i % 2:
            c = call("claim", None, "w", 30, sender=worker)
            if c is not None and not isinstance(c, str):
                if c.id % 4 == 0:
                    call("fail", c.id, f"error {c.id % 3} at 0x{c.id:x}", sender=worker)
                elif c.id % 11 != 0:  # every 11th is left to the lease sweep
                    call("complete", c.id, {"r": c.id}, sender=worker)
        if i == 150:
            call("pause_queue", "other")
        if i == 200:
            call("resume_queue", "other")
        clock.advance(1)
        db.run_due()
    for _ in range(40):
        clock.advance(30)
        db.run_due()
        c = call("claim", "lim", "w2", 10, sender=worker)
        if c is not None and not isinstance(c, str):
            call("fail", c.id, "late failure", sender=worker)
    groups = dlq_groups(db, owner)
    h.update(enc.encode(groups))
    if groups:
        call("bulk_dlq", BulkAction.REQUEUE, TriageFilter(fingerprint=groups[0].fingerprint))
    for _ in range(5):
        clock.advance(3600)
        db.run_due()
    lists = [queries.list_tasks(db, owner, status=s, per_page=200, page=p) for s in (None, "queued", "dead", "completed") for p in (1, 2)]
    h.update(enc.encode(lists))
    h.update(enc.encode(queries.history(db, owner, limit=1000)))
    h.update(enc.encode(queries.queue_list(db, owner)))
    records = [msgspec.structs.replace(r, sender=b"") if r.kind == "scheduled" else r for r in db.commit_log()]
    log = hashlib.sha256(enc.encode(records)).hexdigest()
    dblog = hashlib.sha256(enc.encode(db.logs())).hexdigest()
    state, maps = db.state_hash(), _maps_hash(db)
    line = f"answers {h.hexdigest()[:16]} commitlog {log[:16]} state {state[:16]} maps {maps[:16]} dblog {dblog[:16]} integrity {db.check_integrity()}"
    db.close()
    return line


def _maps_hash(db: Any) -> str:
    """The state hash with every row as a MessagePack map: what trees before rows were stored as
    arrays (storage format 1) hashed, so this one compares across that change, where the commit
    log's digest and `state` (rows as arrays) cannot."""
    import inspect

    from stdbmod.runtime.logtrim import state_hash_of

    if "form" not in inspect.signature(state_hash_of).parameters:
        return str(db.state_hash())  # a tree from before arrays: its rows and its hash are maps
    from stdbmod.rowformat import MAP

    with db.storage.begin_read() as r:
        return state_hash_of(r, db.module.tables, MAP)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tree", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), help="checkout whose stdbmod to run")
    p.add_argument("--here", action="store_true", help=argparse.SUPPRESS)  # the child: run the workload as imported
    a = p.parse_args(argv)
    if a.here:
        print(workload())
        return 0
    source = os.path.join(os.path.abspath(a.tree), "stdbmod")
    if not os.path.isdir(source):
        print(f"error: no stdbmod package in {a.tree}", file=sys.stderr)
        return 2
    shutil.rmtree(FIXED, ignore_errors=True)
    shutil.copytree(source, os.path.join(FIXED, "stdbmod"), ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": FIXED}
    return subprocess.run([sys.executable, os.path.abspath(__file__), "--here"], env=env, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main())
