"""The retry module's one-row tables as the hot path reads and arms them: the settings row, and
the sweep timers (`lease_sweep`, `retention_sweep`: id 0, fired with `At`). Compiled
(stdbmod/_mypyc.py): every claim and every finish goes through here."""

from __future__ import annotations

from typing import Any

from ..types import At, Timestamp
from .tables import DEFAULT_HISTORY_CAP, DEFAULT_LEASE_SECONDS, RetrySettings


def arm_no_later(timer: Any, row_type: Any, due: Timestamp) -> None:
    """Make a one-row sweep timer (`lease_sweep`, `retention_sweep`: id 0, fired with `At`) due
    no later than `due`: made if missing, moved earlier if later or repeating, else left alone.
    `timer` is the table's handle (`ctx.db.lease_sweep`), `row_type` its row's class."""
    sweep = timer.scheduled_id.find(0)
    if sweep is None:
        timer.insert(row_type(0, At(due)))
    elif not isinstance(sweep.scheduled_at, At) or sweep.scheduled_at.time > due:
        timer.scheduled_id.update(row_type(0, At(due)))


def settings_of(db: Any) -> RetrySettings:
    row: RetrySettings | None = db.retry_settings.id.find(0)
    if row is None:  # a database whose init never ran the retry module's hook
        return RetrySettings(0, DEFAULT_HISTORY_CAP, DEFAULT_LEASE_SECONDS)
    return row
