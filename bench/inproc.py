"""stdbmod in process: the durable lifecycle one call at a time, from many threads (group
commit), through the batch API, and the runtime's own overhead against raw LMDB."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from stdbmod import Database

from .jobqueue import JobQueue, job_queue
from .raw_lmdb import Recorder, replay


def _open(path: str, durable: bool = True, q: JobQueue | None = None) -> tuple[Database, JobQueue]:
    q = q or job_queue()
    return Database.create(path, q.module, owner=q.sender, durable=durable), q


def _lifecycle(db: Database, q: JobQueue, first: int, count: int, worker: str) -> None:
    call = db.call
    sender = q.sender
    for i in range(first, first + count):
        name, args = q.enqueue(i)
        call(name, *args, sender=sender)
        name, args = q.claim(worker)
        task = call(name, *args, sender=sender)
        name, args = q.complete(task.id)
        call(name, *args, sender=sender)


def single(path: str, n: int, durable: bool = True) -> float:
    """One caller, one call at a time: every call is its own transaction and fsync."""
    db, q = _open(path, durable)
    try:
        t0 = time.perf_counter()
        _lifecycle(db, q, 0, n, "w0")
        return n / (time.perf_counter() - t0)
    finally:
        db.close()


# the subscribers row's turns a side: ~10 ms each at the full run's 4,000 lifecycles
TURNS = 40


def subscribed(path: str, n: int, subscribers: int = 100, chunks: int = TURNS) -> float:
    """Lifecycles/s with `subscribers` live subscribers of a table the lifecycle never writes,
    over the same without any (fsync off, so the disk's noise does not hide a few percent): what
    live subscriptions cost calls that concern none of them. Each side on a fresh database, both
    open at once: the `n` lifecycles a side run in `chunks` turns, the sides alternating in the
    order ABBA, so that the machine's drift within the run (a few percent in a second on the
    shared machines of docs/performance.md) falls on both sides alike. A turn stays ~10 ms, short
    enough for the drift; many turns, because a stall of a few ms lands on one side only and
    weighs less the longer a side runs in all (ten turns of 100 lifecycles read 0.88x-1.02x in
    one run of the forty-fifth round, whose cost measured 1.00x alone)."""
    sides = []
    for subs in (0, subscribers):
        db, q = _open(os.path.join(path, str(subs)), durable=False)
        # every table the lifecycle writes is in a record of its first jobs; subscribe to another
        _lifecycle(db, q, 0, 3, "w0")
        written = {c.table for r in db.commit_log() for c in r.changes}
        quiet = next(t for t in q.module.tables if t not in written)
        handles = [db.subscribe([f"SELECT * FROM {quiet}"], lambda e: None, sender=q.sender, inline=True) for _ in range(subs)]
        sides.append((db, q, handles))
    spent = [0.0, 0.0]
    done = [3, 3]
    try:
        for turn in range(chunks):
            for side in ((0, 1) if turn % 2 == 0 else (1, 0)):
                db, q, _ = sides[side]
                count = n * (turn + 1) // chunks - n * turn // chunks
                t0 = time.perf_counter()
                _lifecycle(db, q, done[side], count, "w0")
                spent[side] += time.perf_counter() - t0
                done[side] += count
    finally:
        for db, _, handles in sides:
            for h in handles:
                h.unsubscribe()
            db.close()
    return spent[0] / spent[1]


def threaded(path: str, n: int, threads: int = 16) -> float:
    """`threads` workers each running the lifecycle; concurrent calls share commits."""
    db, q = _open(path)
    per = n // threads
    errors: list[BaseException] = []
    start = threading.Barrier(threads + 1)

    def work(k: int) -> None:
        start.wait()
        try:
            _lifecycle(db, q, k * per, per, f"w{k}")
        except BaseException as e:  # reported after the run
            errors.append(e)

    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    try:
        start.wait()
        t0 = time.perf_counter()
        for t in pool:
            t.join()
        elapsed = time.perf_counter() - t0
    finally:
        db.close()
    if errors:
        raise errors[0]
    return per * threads / elapsed


def batched(path: str, n: int, batch: int = 100) -> float:
    """The batch API: `call_many` of `batch` enqueues, then of `batch` claims, then of the
    completes, each call still its own nested transaction, each step acknowledged durably."""
    db, q = _open(path)
    s = q.sender
    try:
        t0 = time.perf_counter()
        done = 0
        while done < n:
            k = min(batch, n - done)
            _check(db.call_many([(*q.enqueue(done + i), s) for i in range(k)]))
            tasks = _check(db.call_many([(*q.claim("w"), s) for _ in range(k)]))
            _check(db.call_many([(*q.complete(t.id), s) for t in tasks]))
            done += k
        return n / (time.perf_counter() - t0)
    finally:
        db.close()


def batch_reducers(path: str, n: int, batch: int = 100) -> float:
    """The retry module's batch reducers: one `enqueue_many` of `batch` tasks, one `claim_many`,
    one `complete_many`: three transactions (and fsyncs) per `batch` jobs. Not group commit
    (one call carries many jobs), a different API: rate it beside the rows above, not as them."""
    from stdbmod.retry import Completion, NewTask

    db, q = _open(path)
    s = q.sender
    try:
        if "enqueue_many" not in db.module.reducers:
            raise RuntimeError("the job queue module has no batch reducers")
        t0 = time.perf_counter()
        done = 0
        while done < n:
            k = min(batch, n - done)
            db.call("enqueue_many", [NewTask("bench", payload={"n": done + i}) for i in range(k)], sender=s)
            tasks = db.call("claim_many", k, None, "w", sender=s)
            assert len(tasks) == k
            db.call("complete_many", [Completion(t.id, {"ok": True}) for t in tasks], sender=s)
            done += k
        return n / (time.perf_counter() - t0)
    finally:
        db.close()


def _check(results: list[Any]) -> list[Any]:
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results


def overhead(path: str, n: int, rounds: int = 3) -> tuple[float, float]:
    """(stdbmod's seconds, raw LMDB's seconds) for the same n lifecycles, one call per
    transaction, fsync off on both sides. Raw LMDB replays exactly the storage operations a
    recorded stdbmod run made (same keys, values, gets, scans), with nothing around them.

    Each side runs `rounds` times, the two alternating, each on a fresh store, and each keeps
    its fastest: one run of a side is a fraction of a second, and on a shared machine a single
    pair of them spread from 1.4x to 2.6x on one tree."""
    q = job_queue()
    rec = Recorder(os.path.join(path, "rec"), durable=False)
    db = Database.create(rec, q.module, owner=q.sender)
    try:
        rec.txns.clear()
        _lifecycle(db, q, 0, n, "w0")
        txns = list(rec.txns)
    finally:
        db.close()
    raws: list[float] = []
    ours: list[float] = []
    for r in range(rounds):
        raws.append(replay(txns, os.path.join(path, f"raw{r}"), durable=False))
        db, q = _open(os.path.join(path, f"rt{r}"), durable=False, q=job_queue())
        try:
            t0 = time.perf_counter()
            _lifecycle(db, q, 0, n, "w0")
            ours.append(time.perf_counter() - t0)
        finally:
            db.close()
    return min(ours), min(raws)
