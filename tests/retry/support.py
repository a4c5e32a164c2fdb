"""Shared identities and helpers for the retry tests."""

from __future__ import annotations

from pathlib import Path

from stdbmod import At, Database, Identity, Timestamp
from stdbmod.runtime import apply_changes

ADMIN = Identity.from_claims("tests", "admin")
WORKER = Identity.from_claims("tests", "worker")
WORKER2 = Identity.from_claims("tests", "worker2")
STRANGER = Identity.from_claims("tests", "stranger")


def next_due(db: Database) -> Timestamp | None:
    """`db.next_due()` leaving out the retention sweep, which a finished task arms days ahead
    (retention.py): when the retry module's attempt and lease timers are next due."""
    with db.read() as view:
        times = [
            row.scheduled_at.time
            for name, table in db.module.tables.items()
            if table.scheduled is not None and name != "retention_sweep"
            for row in getattr(view.db, name).iter()
            if isinstance(row.scheduled_at, At)
        ]
    return min(times, default=None)


def replayed_hash(db: Database, where: Path) -> str:
    """The state hash of a fresh copy built by applying `db`'s commit log."""
    copy = Database.create(where, db.module, owner=db.owner, identity=db.identity, run_init=False, durable=False)
    try:
        apply_changes(copy, db.commit_log())
        return copy.state_hash()
    finally:
        copy.close()
