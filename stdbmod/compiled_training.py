"""The workload the compiled build's profile-guided stage runs (compiled.py): the retry
module's lifecycle in process, a call a transaction and then in batches, fsync off. What it runs
is what the compiler lays out as hot; what it never runs is compiled as without a profile."""

from __future__ import annotations

import sys
from typing import Any

from .retry import create_retry_module
from .runtime.database import Database
from .types import Identity

OWNER = Identity.from_claims("stdbmod.compiled", "training")


def train(path: str, lifecycles: int = 1_500, batch: int = 50) -> int:
    """Run `lifecycles` enqueue -> claim -> complete one call at a time, then as many again in
    `call_many` batches; the number of tasks completed."""
    rm = create_retry_module("retry")
    db = Database.create(path, rm.module, owner=OWNER, durable=False)
    try:
        done = 0
        for i in range(lifecycles):
            db.call("enqueue", "training", None, {"n": i}, sender=OWNER)
            task = db.call("claim", None, "w0", sender=OWNER)
            db.call("complete", task.id, {"ok": True}, sender=OWNER)
            done += 1
        for first in range(0, lifecycles, batch):
            n = min(batch, lifecycles - first)
            db.call_many([("enqueue", ("training", None, {"n": first + i}), OWNER) for i in range(n)])
            claimed: list[Any] = db.call_many([("claim", (None, "w1"), OWNER) for _ in range(n)])
            db.call_many([("complete", (t.id, {"ok": True}), OWNER) for t in claimed])
            done += n
        return done
    finally:
        db.close()


if __name__ == "__main__":
    print(f"trained on {train(sys.argv[1])} lifecycles")
