"""Module-level invariants checked after every restart: the things a crash must never break."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from stdbmod import Database, Identity
from stdbmod.retry.transitions import SWEEP_SPACING


def module_invariants(db: Database) -> list[str]:
    if "task" in db.module.tables:
        return retry_invariants(db) + TransitionChecker().feed(db)
    if "account" in db.module.tables:
        return bank_invariants(db)
    return []


def bank_invariants(db: Database) -> list[str]:
    with db.read() as v:
        return [f"account {a.id} has a negative balance {a.balance}" for a in v.db.account.iter() if a.balance < 0]


def retry_invariants(db: Database) -> list[str]:
    """One status per task with the fields that status implies; attempts within bounds; one task
    per idempotency key; the lease sweep due no later than a second after any lease's end (its
    spacing after a firing); the history cap."""
    problems: list[str] = []
    with db.read() as v:
        tasks = list(v.db.task.iter())
        sweep = v.db.lease_sweep.scheduled_id.find(0)
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
            elif sweep is None or sweep.scheduled_at.time > t.lease_expires_at + SWEEP_SPACING:
                problems.append(f"{where}: the lease sweep is not due by its lease's end {t.lease_expires_at} (+1 s): {sweep}")
        elif leased:
            problems.append(f"{where}: holds a lease while not running")
        if (status == "dead") != (t.dead_reason is not None):
            problems.append(f"{where}: dead_reason {t.dead_reason} does not fit")
        if (status == "completed") != (t.completed_at is not None):
            problems.append(f"{where}: completed_at {t.completed_at} does not fit")
    cap = settings.history_cap if settings is not None else None
    if cap is not None and history > cap:
        problems.append(f"attempt history holds {history} rows, over its cap {cap}")
    return problems


class TransitionChecker:
    """Follows the commit log and checks every change of every task against the state machine:
    a claim takes a queued task (attempts + 1, the claimer holds the lease); while it runs only
    its lease holder heartbeats, completes or fails it (or the reaper ends it); completed is
    final; only dead goes back to queued, with attempts reset. A claim of a running task is a
    lease overlap. Incremental: feed it the log as it grows."""

    def __init__(self) -> None:
        self.tasks: dict[int, Any] = {}
        self.offset = 0
        self.problems: list[str] = []
        self.completions = 0
        self.reruns = 0  # attempts that started after an earlier one of the same task

    def feed(self, db: Database) -> list[str]:
        return self.feed_records(db.iter_commit_log(self.offset), db.module.tables["task"].row_format.decode)

    def feed_records(self, records: Iterable[Any], decode: Callable[[bytes], Any]) -> list[str]:
        for rec in records:
            self.offset = rec.offset + 1
            for change in rec.changes:
                if change.table != "task":
                    continue
                for raw in change.inserts:
                    self._step(rec, decode(raw))
        return self.problems

    def _step(self, rec: Any, new: Any) -> None:
        old = self.tasks.get(new.id)
        self.tasks[new.id] = new
        where = f"record {rec.offset} ({rec.reducer}) on task {new.id}"
        s_new = new.status.value
        if old is None:
            if s_new != "queued" or new.attempts != 0:
                self.problems.append(f"{where}: a new task is {s_new} at attempt {new.attempts}")
            return
        s_old = old.status.value
        if s_old == "completed":
            self.problems.append(f"{where}: a completed task changed (to {s_new})")
        elif s_new == "running" and s_old == "running":
            if new.attempts != old.attempts or new.lease_holder != old.lease_holder:
                self.problems.append(f"{where}: claimed again while its lease was held (lease overlap)")
            elif Identity(rec.sender) != old.lease_holder:
                self.problems.append(f"{where}: the lease was extended by someone other than its holder")
        elif s_new == "running":
            if s_old != "queued" or new.attempts != old.attempts + 1:
                self.problems.append(f"{where}: {s_old} -> running at attempt {old.attempts} -> {new.attempts}")
            if new.attempts > 1:
                self.reruns += 1
        elif s_old == "running":
            if new.attempts != old.attempts:
                self.problems.append(f"{where}: attempts changed while ending an attempt")
            if rec.kind == "call" and Identity(rec.sender) != old.lease_holder:
                self.problems.append(f"{where}: ended by {Identity(rec.sender).abbreviated()}, not the lease holder")
            if s_new == "completed":
                self.completions += 1
        elif s_old == "dead" and s_new == "queued" and new.attempts != 0:
            self.problems.append(f"{where}: requeued without resetting attempts")
        elif not (s_old == "queued" and s_new == "dead") and not (s_old == "dead" and s_new == "queued") and s_old != s_new:
            self.problems.append(f"{where}: {s_old} -> {s_new} is not a transition")
