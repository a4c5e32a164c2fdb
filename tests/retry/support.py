"""Shared identities and helpers for the retry tests."""

from __future__ import annotations

from pathlib import Path

from stdbmod import Database, Identity
from stdbmod.runtime import apply_changes

ADMIN = Identity.from_claims("tests", "admin")
WORKER = Identity.from_claims("tests", "worker")
WORKER2 = Identity.from_claims("tests", "worker2")
STRANGER = Identity.from_claims("tests", "stranger")


def replayed_hash(db: Database, where: Path) -> str:
    """The state hash of a fresh copy built by applying `db`'s commit log."""
    copy = Database.create(where, db.module, owner=db.owner, identity=db.identity, run_init=False, durable=False)
    try:
        apply_changes(copy, db.commit_log())
        return copy.state_hash()
    finally:
        copy.close()
