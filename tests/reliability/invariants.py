"""Module-level invariants checked after every restart: the things a crash must never break."""

from __future__ import annotations

from collections import Counter

from stdbmod import Database


def module_invariants(db: Database) -> list[str]:
    if "task" in db.module.tables:
        return retry_invariants(db)
    if "account" in db.module.tables:
        return bank_invariants(db)
    return []


def bank_invariants(db: Database) -> list[str]:
    with db.read() as v:
        return [f"account {a.id} has a negative balance {a.balance}" for a in v.db.account.iter() if a.balance < 0]


def retry_invariants(db: Database) -> list[str]:
    """One status per task with the fields that status implies; attempts within bounds; one task
    per idempotency key; a lease timer exactly for each running task; the history cap."""
    problems: list[str] = []
    with db.read() as v:
        tasks = list(v.db.task.iter())
        timers = {t.task_id: t for t in v.db.lease_timer.iter()}
        settings = v.db.retry_settings.id.find(0)
        history = v.db.attempt.count()
    keys = Counter(t.idempotency_key for t in tasks if t.idempotency_key is not None)
    problems += [f"idempotency key {k!r} has {n} tasks" for k, n in keys.items() if n > 1]
    for t in tasks:
        status = t.status.value
        where = f"task {t.id} ({status}, attempt {t.attempts}/{t.max_attempts})"
        if not 0 <= t.attempts <= t.max_attempts:
            problems.append(f"{where}: attempts out of bounds")
        if status == "queued" and t.attempts >= t.max_attempts:
            problems.append(f"{where}: queued with no attempt left")
        leased = t.lease_holder is not None or t.lease_expires_at is not None
        if status == "running" and not t.in_module:
            if not leased:
                problems.append(f"{where}: running without a lease")
            timer = timers.get(t.id)
            if timer is None or timer.attempt != t.attempts:
                problems.append(f"{where}: running without a lease timer for this attempt")
        elif leased:
            problems.append(f"{where}: holds a lease while not running")
        elif t.id in timers:
            problems.append(f"{where}: has a lease timer while not running")
        if (status == "dead") != (t.dead_reason is not None):
            problems.append(f"{where}: dead_reason {t.dead_reason} does not fit")
        if (status == "completed") != (t.completed_at is not None):
            problems.append(f"{where}: completed_at {t.completed_at} does not fit")
    cap = settings.history_cap if settings is not None else None
    if cap is not None and history > cap:
        problems.append(f"attempt history holds {history} rows, over its cap {cap}")
    return problems
