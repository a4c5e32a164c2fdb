"""A replica fed the commit log, for the model-based tests: after every step it must hold the
live database's state (row changes only, `apply_changes`)."""

from __future__ import annotations

from stdbmod import Database
from stdbmod.runtime import apply_changes


def feed_replica(replica: Database, live: Database, replayed: int) -> int:
    """Feed `replica` the live database's records from offset `replayed` on, check that the two
    states hash alike, and return the offset to resume from."""
    records = live.commit_log(replayed)
    apply_changes(replica, records)
    assert replica.state_hash() == live.state_hash()
    return replayed + len(records)
