"""The retention soak: many task lifecycles under a steady load with retention on, the data
file's size recorded as it goes. LMDB reuses the pages pruned rows free, so after a warm-up (the
retention window filling) the file stops growing. CI runs a short pass
(tests/retry/test_retention_soak.py); the long one:

    python -m tests.soak.retention --lifecycles 1000000
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from stdbmod import Database, Identity, ManualClock
from stdbmod.retry import Completion, NewTask, create_retry_module
from stdbmod.runtime.logtrim import LogKeeper

ADMIN = Identity.from_claims("soak", "admin")
PAYLOAD = {"customer": "c-000000", "items": list(range(20)), "note": "x" * 120}


@dataclass
class Soak:
    sizes: list[int]  # the data file's size after each round, bytes
    rounds: int
    per_round: int
    kept: int  # finished tasks left at the end

    def warm(self, fraction: float = 0.25) -> int:
        """The size once a `fraction` of the rounds ran (the retention window well filled)."""
        return self.sizes[int(len(self.sizes) * fraction)]


def run(where: Path, lifecycles: int, per_round: int = 100, seconds_per_round: int = 10, keep_seconds: int = 600, log_keep: int = 1000) -> Soak:
    """`lifecycles` tasks, `per_round` at a time: enqueued, claimed, nine in ten completed and
    one failed to dead, then the clock moves `seconds_per_round` and the due timers fire (the
    retention sweep among them); completed and dead tasks are kept `keep_seconds`. The commit
    log is bounded as `stdbmod serve --log-keep` bounds it (a `LogKeeper` tick each round,
    keeping `log_keep` records): without that, the log alone grows with every call."""
    rm = create_retry_module()
    clock = ManualClock()
    db = Database.create(str(where), rm.module, owner=ADMIN, clock=clock, durable=False)
    data = where / "data.mdb"
    keeper = LogKeeper(db, log_keep)  # ticked by hand: the server's thread would tick each minute
    sizes: list[int] = []
    try:
        db.call("set_retention", "completed", keep_seconds, None, sender=ADMIN)
        db.call("set_retention", "dead", keep_seconds, None, sender=ADMIN)
        rounds = lifecycles // per_round
        for r in range(rounds):
            specs = [NewTask("work", payload={**PAYLOAD, "n": r * per_round + i}, max_attempts=1) for i in range(per_round)]
            db.call("enqueue_many", specs, sender=ADMIN)
            claimed = db.call("claim_many", per_round, None, "soak", 60, sender=ADMIN)
            db.call("complete_many", [Completion(t.id, {"ok": True}) for t in claimed[: per_round * 9 // 10]], sender=ADMIN)
            for t in claimed[per_round * 9 // 10 :]:
                db.call("fail", t.id, f"provider said no to {t.id}", sender=ADMIN)
            clock.advance(seconds_per_round)
            db.run_due()
            keeper.tick()
            sizes.append(os.path.getsize(data))
        with db.read() as view:
            kept = view.db.task.count()
    finally:
        db.close()
    return Soak(sizes, rounds, per_round, kept)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lifecycles", type=int, default=1_000_000)
    parser.add_argument("--per-round", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        soak = run(Path(tmp) / "db", args.lifecycles, args.per_round)
        took = time.monotonic() - started
    mib = 1 << 20
    print(f"{soak.rounds * soak.per_round} lifecycles in {took:.0f} s; finished tasks kept at the end: {soak.kept}")
    for fraction in (0.1, 0.25, 0.5, 0.75, 1.0):
        at = min(int(len(soak.sizes) * fraction), len(soak.sizes) - 1)
        print(f"after {fraction:>4.0%} of the rounds: data.mdb {soak.sizes[at] / mib:.2f} MiB")


if __name__ == "__main__":
    main()
