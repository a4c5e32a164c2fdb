"""What a durable commit costs: the bench's enqueues (bench/jobqueue.py, the task-retry module) in
batches of B (`db.call_many`, one commit a batch), durable and with fsync off, each batch's process CPU time
(the kernel's share included: the flushes' work) and its wall time.

    python -m bench.commit_cost                       # batches of 1, 14 and 50, 300 of each
    python -m bench.commit_cost --batches 16 64 --rounds 100

The difference between the two columns of CPU is what durability costs a commit on this machine
(docs/performance.md, "Twenty-second round").
"""

from __future__ import annotations

import argparse
import tempfile
import time

from .inproc import _check, _open


def measure(batch: int, durable: bool, rounds: int) -> tuple[float, float]:
    """CPU and wall seconds a batch of `batch` enqueues."""
    with tempfile.TemporaryDirectory(prefix="stdbmod-commit-cost-") as d:
        db, q = _open(d, durable)
        s = q.sender
        try:
            _check(db.call_many([(*q.enqueue(i), s) for i in range(20)]))  # the tables' first pages, outside the measure
            cpu0, wall0 = time.process_time(), time.perf_counter()
            for _ in range(rounds):
                _check(db.call_many([(*q.enqueue(i), s) for i in range(batch)]))
            return (time.process_time() - cpu0) / rounds, (time.perf_counter() - wall0) / rounds
        finally:
            db.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 14, 50], help="calls a commit")
    ap.add_argument("--rounds", type=int, default=300, help="batches of each size")
    a = ap.parse_args(argv)
    if a.rounds < 1 or min(a.batches) < 1:
        ap.error("--rounds and --batches must be at least 1")
    print("calls a commit | fsync off, CPU a batch | durable, CPU a batch | durable, CPU a call | durable, wall a batch")
    for b in a.batches:
        off, _ = measure(b, False, a.rounds)
        cpu, wall = measure(b, True, a.rounds)
        print(f"{b} | {off * 1e6:.0f} us | {cpu * 1e6:.0f} us | {cpu / b * 1e6:.0f} us | {wall * 1e6:.0f} us")


if __name__ == "__main__":
    main()
