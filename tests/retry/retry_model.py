"""A plain-Python model of the retry module, for the state-machine test.

It mirrors the real module down to the auto_inc sequences of the task, attempt and timer tables,
so that the order in which the scheduler fires timers (due time, table, id) and the history the
cap trims are predicted exactly. A method either returns what the reducer should return, or
raises `Refused(error class)` before changing anything.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from stdbmod import Identity, Timestamp
from stdbmod.retry import AttemptTimedOut, InvalidArgument, InvalidTransition, NotAuthorized, StaleLease, TaskCancelled, TaskNotFound
from stdbmod.retry.cron import expression, instants_after, next_after, time_zone
from stdbmod.retry.fingerprint import fingerprint
from stdbmod.retry.limits import MAX_SNOOZES
from stdbmod.retry.recurring import RecurringNotFound

S = 1_000_000  # micros per second
HANDLED = "h"  # the job type with an in-module handler (when it is registered)
CRASH = "<traceback>"  # marks an expected traceback in last_error
CRASH_SHAPE = "RuntimeError: crash"  # the traceback's last line: what its fingerprint hashes


class Refused(Exception):
    def __init__(self, error: type[Exception]) -> None:
        super().__init__(error.__name__)
        self.error = error


@dataclass
class MTask:
    id: int
    job_type: str
    queue: str
    payload: Any
    max_attempts: int
    backoff: int
    priority: int
    run_after: int
    in_module: bool
    idem: str | None
    status: str = "queued"
    dead_reason: str | None = None
    attempts: int = 0
    lease_holder: Identity | None = None
    lease_expires: int | None = None
    claimed_by: str | None = None
    last_error: str | None = None
    result: Any = None
    finished_at: int | None = None  # when it became completed or dead
    max_backoff: int | None = None
    jitter: float = 0.0
    snoozes: int = 0
    fingerprint: str | None = None
    hold: bool = False
    partition: str | None = None
    recurring_id: int | None = None
    timeout: int | None = None
    started: int | None = None  # when the current (or last) attempt started
    ukey: tuple[Any, ...] | None = None  # the unique key: the named fields' values
    created: int = 0

    def deadline(self) -> int | None:
        return None if self.timeout is None or self.started is None else self.started + self.timeout * S


@dataclass
class MRecurring:
    """A recurring entry (recurring.py): its expression, zone, job, policy and watermark."""

    id: int
    name: str
    cron: str
    tz: str
    job_type: str
    queue: str
    enabled: bool
    catch_up: str
    limit: int
    last_fired: int
    next_fire: int | None = None


@dataclass
class MQueue:
    """A queue's controls (queues.py); a queue without one is open."""

    paused: bool = False
    concurrency: int | None = None
    rate: int | None = None
    period: int = 60
    partition_limit: int | None = None

    def idle(self) -> bool:
        return not self.paused and self.concurrency is None and self.rate is None and self.partition_limit is None


@dataclass
class Model:
    now: int
    admins: set[Identity]
    workers: set[Identity] = field(default_factory=set)
    cap: int = 1000
    default_lease: int = 300
    handler_on: bool = True
    tasks: dict[int, MTask] = field(default_factory=dict)
    history: list[tuple[int, int, int, str, str]] = field(default_factory=list)  # (id, task, attempt, outcome, worker)
    attempt_timers: dict[int, tuple[int, int]] = field(default_factory=dict)  # task -> (due, id)
    sweep: int | None = None  # when the lease sweep (its one row) is due
    notes: list[tuple[int, int]] = field(default_factory=list)  # handler writes that committed
    seq: dict[str, int] = field(
        default_factory=lambda: {"task": 0, "attempt": 0, "attempt_timer": 0, "claim_mark": 0, "recurring": 0, "recurring_timer": 0}
    )
    rng: random.Random | None = None  # the transaction's ctx.rng: seeded from its timestamp, made on first use

    def begin(self) -> None:
        """A new transaction (a reducer call, or one timer firing): a fresh rng."""
        self.rng = None

    def _rng(self) -> random.Random:
        if self.rng is None:
            self.rng = random.Random(self.now)
        return self.rng
    queues: dict[str, MQueue] = field(default_factory=dict)
    recurring: dict[int, MRecurring] = field(default_factory=dict)
    recurring_timers: dict[int, tuple[int, int]] = field(default_factory=dict)  # entry -> (due, id)
    marks: list[tuple[int, str, str | None, int]] = field(default_factory=list)  # (id, queue, partition, at)
    duplicate: bool = False  # whether the last create returned a task that existed
    retention: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)  # status -> (age, count), as set
    prune_due: int | None = None  # when the retention sweep (its one row) is due

    # --- helpers ---------------------------------------------------------------------------------

    def _next(self, table: str) -> int:
        self.seq[table] += 1
        return self.seq[table]

    def _handled(self, job_type: str) -> bool:
        return self.handler_on and job_type == HANDLED

    def _admin(self, who: Identity) -> None:
        if who not in self.admins:
            raise Refused(NotAuthorized)

    def _worker(self, who: Identity) -> None:
        if who not in self.admins and who not in self.workers:
            raise Refused(NotAuthorized)

    def _task(self, task_id: int) -> MTask:
        if task_id not in self.tasks:
            raise Refused(TaskNotFound)
        return self.tasks[task_id]

    def _arm(self, t: MTask) -> None:
        self.attempt_timers[t.id] = (t.run_after, self._next("attempt_timer"))

    def _disarm(self, task_id: int) -> None:
        self.attempt_timers.pop(task_id, None)

    def _arm_sweep(self, expires: int) -> None:
        if self.sweep is None or self.sweep > expires:
            self.sweep = expires

    def _record(self, t: MTask, outcome: str, worker: str) -> None:
        self.history.append((self._next("attempt"), t.id, t.attempts, outcome, worker))
        del self.history[: max(len(self.history) - self.cap, 0)]

    def _die(self, t: MTask, reason: str) -> None:
        fp = fingerprint(CRASH_SHAPE if t.last_error == CRASH else t.last_error)
        t.hold = t.fingerprint == fp and reason != "cancelled"
        t.status, t.dead_reason, t.finished_at, t.fingerprint = "dead", reason, self.now, fp
        self._finished("dead")

    def _delay(self, t: MTask) -> int:
        """Seed 000's formula, capped by the task's max_backoff, jittered down by the rng."""
        seconds: int = min(t.backoff * 2 ** (t.attempts - 1), 30 * 86_400)
        if t.max_backoff is not None:
            seconds = min(seconds, t.max_backoff)
        micros = seconds * S
        if t.jitter > 0 and micros > 0:
            micros -= int(micros * t.jitter * self._rng().random())
        return micros

    def _fail(self, t: MTask, error: str, outcome: str, worker: str, retry_in: int | None = None) -> None:
        self._record(t, outcome, worker)
        t.last_error, t.lease_holder, t.lease_expires = error, None, None
        if outcome in ("gave_up", "discarded"):
            self._die(t, outcome)
        elif t.attempts >= t.max_attempts:
            self._die(t, "exhausted")
        else:
            t.status = "queued"
            t.run_after = self.now + (retry_in * S if retry_in is not None else self._delay(t))
            t.in_module = self._handled(t.job_type)
        self._disarm(t.id)
        if t.status == "queued" and t.in_module:
            self._arm(t)

    def _snooze(self, t: MTask, seconds: int, worker: str) -> None:
        if t.snoozes >= MAX_SNOOZES:
            self._fail(t, f"snoozed {t.snoozes} times, the limit: this snooze counts as a failed attempt", "failed", worker, seconds)
            return
        self._record(t, "snoozed", worker)
        t.status, t.attempts, t.snoozes, t.run_after = "queued", t.attempts - 1, t.snoozes + 1, self.now + seconds * S
        t.lease_holder, t.lease_expires, t.in_module = None, None, self._handled(t.job_type)
        self._disarm(t.id)
        if t.in_module:
            self._arm(t)

    def _held(self, who: Identity, task_id: int, attempt: int | None = None) -> MTask:
        t = self._task(task_id)
        mine = attempt is None or attempt == t.attempts
        if t.dead_reason == "cancelled" and t.lease_holder == who and mine:
            raise Refused(TaskCancelled)
        if t.status != "running":
            raise Refused(InvalidTransition)
        if t.lease_holder != who or not mine:
            raise Refused(StaleLease)
        deadline = t.deadline()
        if deadline is not None and self.now >= deadline:
            raise Refused(AttemptTimedOut)
        return t

    # --- worker reducers -------------------------------------------------------------------------

    def create(self, who: Identity | None, role: str, job_type: str, queue: str, payload: Any, max_attempts: int,
               backoff: int, priority: int, delay: int, idem: str | None, max_backoff: int | None = None,
               jitter: float = 0.0, partition: str | None = None, timeout: int | None = None,
               unique: tuple[list[str], int | None, list[str] | None] | None = None) -> MTask:  # fmt: skip
        if role == "admin":
            self._admin(who)  # type: ignore[arg-type]
        elif role == "worker":
            self._worker(who)  # type: ignore[arg-type]
        if max_attempts < 1 or (max_backoff is not None and max_backoff < 0) or not 0 <= jitter <= 1 or (timeout is not None and timeout < 1):
            raise Refused(InvalidArgument)
        if unique is not None:
            fields, period, states = unique
            allowed = ("job_type", "queue", "payload", "partition_key")
            if not fields or any(f not in allowed and not f.startswith("payload.") for f in fields) or (period is not None and period < 1):
                raise Refused(InvalidArgument)
            if states is not None and not states:
                raise Refused(InvalidArgument)
        self.duplicate = True
        for t in self.tasks.values():
            if idem is not None and t.idem == idem:
                return t
        ukey = None
        if unique is not None:
            fields, period, states = unique
            named = {"job_type": job_type, "queue": queue, "payload": payload, "partition_key": partition}
            ukey = tuple((f, json.dumps(named[f] if f in named else (payload or {}).get(f[8:]), sort_keys=True)) for f in sorted(set(fields)))
            for t in sorted(self.tasks.values(), key=lambda t: -t.id):
                if t.ukey != ukey:
                    continue
                if period is not None and t.created <= self.now - period * S:
                    break
                if t.status in (states or ["queued", "running", "completed"]):
                    return t
        self.duplicate = False
        t = MTask(self._next("task"), job_type, queue, payload, max_attempts, backoff, priority,
                  self.now + delay * S, self._handled(job_type), idem, max_backoff=max_backoff, jitter=jitter,
                  partition=partition, timeout=timeout, ukey=ukey, created=self.now)  # fmt: skip
        self.tasks[t.id] = t
        if t.in_module:
            self._arm(t)
        return t

    def claim(self, who: Identity, queue: str | None, worker_id: str | None, lease: int | None) -> MTask | None:
        self._worker(who)
        t = self.next_allowed(queue)
        if t is None:
            return None
        self._note_claim(t)
        seconds = self.default_lease if lease is None else lease
        t.status, t.attempts, t.started = "running", t.attempts + 1, self.now
        t.lease_holder, t.lease_expires = who, self._lease_end(t, seconds)
        t.claimed_by = who.to_hex() if worker_id is None else worker_id
        self._arm_sweep(t.lease_expires)
        return t

    def _lease_end(self, t: MTask, seconds: int) -> int:
        deadline = t.deadline()
        return self.now + seconds * S if deadline is None else min(self.now + seconds * S, deadline)

    def heartbeat(self, who: Identity, task_id: int, lease: int | None) -> MTask:
        self._worker(who)
        t = self._held(who, task_id)
        t.lease_expires = self._lease_end(t, self.default_lease if lease is None else lease)
        self._arm_sweep(t.lease_expires)
        return t

    def complete(self, who: Identity, task_id: int, result: Any, attempt: int | None = None) -> MTask:
        self._worker(who)
        t = self._held(who, task_id, attempt)
        self._record(t, "completed", t.claimed_by or "")
        t.status, t.result, t.lease_holder, t.lease_expires, t.finished_at = "completed", result, None, None, self.now
        self._finished("completed")
        self._disarm(t.id)
        return t

    def fail(self, who: Identity, task_id: int, error: str, attempt: int | None = None, retry: bool = True,
             retry_in: int | None = None) -> MTask:  # fmt: skip
        self._worker(who)
        if retry_in is not None and (retry_in < 0 or not retry):
            raise Refused(InvalidArgument)
        t = self._held(who, task_id, attempt)
        self._fail(t, error, "failed" if retry else "discarded", t.claimed_by or "", retry_in)
        return t

    def snooze(self, who: Identity, task_id: int, seconds: int, attempt: int | None = None) -> MTask:
        self._worker(who)
        if seconds < 0:
            raise Refused(InvalidArgument)
        t = self._held(who, task_id, attempt)
        self._snooze(t, seconds, t.claimed_by or "")
        return t

    # --- queue control (queues.py) --------------------------------------------------------------

    def _in_window(self, queue: str, partition: str | None, any_partition: bool) -> int:
        q = self.queues[queue]
        lo = self.now - q.period * S
        return sum(1 for _, mq, mp, at in self.marks if mq == queue and lo < at <= self.now and (any_partition or mp == partition))

    def _blocked(self, queue: str) -> bool:
        q = self.queues.get(queue)
        if q is None:
            return False
        running = sum(1 for t in self.tasks.values() if t.queue == queue and t.status == "running")
        return (
            q.paused
            or (q.concurrency is not None and running >= q.concurrency)
            or (q.rate is not None and self._in_window(queue, None, True) >= q.rate)
        )

    def _partition_full(self, t: MTask) -> bool:
        q = self.queues.get(t.queue)
        if q is None or q.partition_limit is None or t.partition is None:
            return False
        return self._in_window(t.queue, t.partition, False) >= q.partition_limit

    def next_allowed(self, queue: str | None) -> MTask | None:
        ready = [
            t
            for t in self.tasks.values()
            if t.status == "queued" and not t.in_module and t.run_after <= self.now and queue in (None, t.queue)
            and not self._blocked(t.queue) and not self._partition_full(t)
        ]  # fmt: skip
        return min(ready, key=lambda t: (-t.priority, t.run_after, t.id), default=None)

    def _note_claim(self, t: MTask) -> None:
        q = self.queues.get(t.queue)
        if q is None or (q.rate is None and q.partition_limit is None):
            return
        cutoff = self.now - q.period * S
        self.marks = [m for m in self.marks if not (m[1] == t.queue and m[3] <= cutoff)]
        self.marks.append((self._next("claim_mark"), t.queue, t.partition, self.now))

    def _save_queue(self, queue: str, q: MQueue) -> None:
        if q.idle():
            self.queues.pop(queue, None)
            self.marks = [m for m in self.marks if m[1] != queue]
        else:
            self.queues[queue] = q

    def pause(self, who: Identity, queue: str, paused: bool) -> MQueue:
        self._admin(who)
        q = MQueue(**vars(self.queues.get(queue, MQueue())))
        q.paused = paused
        self._save_queue(queue, q)
        if not paused:  # in-module tasks whose timer fired while paused, in claim order
            waiting = [t for t in self.tasks.values() if t.status == "queued" and t.in_module and t.queue == queue]
            for t in sorted(waiting, key=lambda t: (-t.priority, t.run_after, t.id)):
                if t.id not in self.attempt_timers:
                    self._arm(t)
        return q

    def set_limits(self, who: Identity, queue: str, concurrency: int | None, rate: int | None, period: int | None,
                   partition_limit: int | None) -> MQueue:  # fmt: skip
        self._admin(who)
        for value in (concurrency, rate, partition_limit, period):
            if value is not None and value < 1:
                raise Refused(InvalidArgument)
        q = MQueue(**vars(self.queues.get(queue, MQueue())))
        q.concurrency, q.rate, q.period, q.partition_limit = concurrency, rate, 60 if period is None else period, partition_limit
        self._save_queue(queue, q)
        return q

    # --- retention (retention.py) ---------------------------------------------------------------

    def _policy(self, status: str) -> tuple[int | None, int | None]:
        return self.retention.get(status, (7 * 86_400 if status == "completed" else 30 * 86_400, None))

    def _arm_prune(self, due: int) -> None:
        if self.prune_due is None or self.prune_due > due:
            self.prune_due = due

    def _finished(self, status: str) -> None:
        age, count = self._policy(status)
        due = ([self.now + age * S] if age is not None else []) + ([self.now + 60 * S] if count is not None else [])
        if due:
            self._arm_prune(min(due))

    def set_retention(self, who: Identity, status: str, age: int | None, count: int | None) -> tuple[int | None, int | None]:
        self._admin(who)
        if status not in ("completed", "dead") or (age is not None and age < 0) or (count is not None and count < 0):
            raise Refused(InvalidArgument)
        self.retention[status] = (age, count)
        self._arm_prune(self.now)
        return age, count

    def _oldest_first(self, status: str) -> list[MTask]:
        return sorted((t for t in self.tasks.values() if t.status == status), key=lambda t: (t.finished_at or 0, t.id))

    def _prune(self, batch: int = 500) -> None:
        budget = batch
        for status in ("completed", "dead"):
            age, count = self._policy(status)
            if age is not None and budget:
                old = [t for t in self._oldest_first(status) if (t.finished_at or 0) <= self.now - age * S][:budget]
                for t in old:
                    self._drop(t)
                budget -= len(old)
            if count is not None and budget:
                rows = self._oldest_first(status)
                extra = rows[: min(max(len(rows) - count, 0), budget)]
                for t in extra:
                    self._drop(t)
                budget -= len(extra)
        if budget == 0:
            self.prune_due = self.now + S
            return
        due = []
        for status in ("completed", "dead"):
            age, count = self._policy(status)
            rows = self._oldest_first(status)
            if not rows:
                continue
            if age is not None:
                due.append((rows[0].finished_at or self.now) + age * S)
            if count is not None:
                due.append(self.now + 60 * S)
        self.prune_due = None if not due else max(min(due), self.now + S)

    def _drop(self, t: MTask) -> None:
        del self.tasks[t.id]
        self.history = [h for h in self.history if h[1] != t.id]

    # --- admin reducers --------------------------------------------------------------------------

    def requeue(self, who: Identity, task_id: int) -> MTask:
        self._admin(who)
        t = self._task(task_id)
        if t.status != "dead":
            raise Refused(InvalidTransition)
        self._requeue(t, bulk=False)
        return t

    def _requeue(self, t: MTask, bulk: bool) -> None:
        t.status, t.dead_reason, t.attempts, t.run_after, t.finished_at = "queued", None, 0, self.now, None
        t.snoozes, t.hold, t.lease_holder = 0, False, None
        if not bulk:  # a bulk requeue keeps the fingerprint: dying again alike holds the task
            t.fingerprint = None
        t.in_module = self._handled(t.job_type)
        if t.in_module:
            self._arm(t)

    def bulk(self, who: Identity, action: str, fingerprint: str | None, job_type: str | None, include_held: bool) -> int:
        """A bulk requeue or delete of the dead tasks the filter takes (few enough for one batch)."""
        self._admin(who)
        taken = [
            t
            for _, t in sorted(self.tasks.items())
            if t.status == "dead" and (include_held or not t.hold) and fingerprint in (None, t.fingerprint) and job_type in (None, t.job_type)
        ]
        for t in taken:
            if action == "requeue":
                self._requeue(t, bulk=True)
            else:
                del self.tasks[t.id]
                self._disarm(t.id)
        return len(taken)

    def run_now(self, who: Identity, task_id: int) -> MTask:
        self._admin(who)
        t = self._task(task_id)
        if t.status != "queued":
            raise Refused(InvalidTransition)
        if t.run_after > self.now:
            t.run_after = self.now
            if t.in_module:
                self._arm(t)
        return t

    def cancel(self, who: Identity, task_id: int, reason: str | None) -> MTask:
        self._admin(who)
        t = self._task(task_id)
        if t.status not in ("queued", "running"):
            raise Refused(InvalidTransition)
        if t.status == "running":  # the attempt ends; its holder stays named, to be told
            self._record(t, "cancelled", t.claimed_by or "?")
            t.lease_expires = None
        if reason is not None:
            t.last_error = reason
        self._die(t, "cancelled")
        self._disarm(t.id)
        return t

    def delete(self, who: Identity, task_id: int) -> None:
        self._admin(who)
        if self._task(task_id).status != "dead":
            raise Refused(InvalidTransition)
        del self.tasks[task_id]
        self._disarm(task_id)

    def add_admin(self, who: Identity, target: Identity) -> None:
        self._admin(who)
        self.admins.add(target)

    def remove_admin(self, who: Identity, target: Identity) -> None:
        self._admin(who)
        if target not in self.admins:
            raise Refused(InvalidArgument)
        if len(self.admins) == 1:
            raise Refused(InvalidTransition)
        self.admins.remove(target)

    def grant_worker(self, who: Identity, target: Identity) -> None:
        self._admin(who)
        self.workers.add(target)

    def revoke_worker(self, who: Identity, target: Identity) -> None:
        self._admin(who)
        if target not in self.workers:
            raise Refused(InvalidArgument)
        self.workers.remove(target)

    def set_history_cap(self, who: Identity, cap: int) -> None:
        self._admin(who)
        if cap < 0:
            raise Refused(InvalidArgument)
        self.cap = cap
        del self.history[: max(len(self.history) - cap, 0)]

    def set_default_lease(self, who: Identity, seconds: int) -> None:
        self._admin(who)
        if seconds < 1:
            raise Refused(InvalidArgument)
        self.default_lease = seconds

    # --- the scheduler ---------------------------------------------------------------------------

    def run_due(self, plan_of: Any) -> None:
        """Fire due timers as the runtime does: a round takes every row due now, ordered by (due,
        table, id); rows those firings schedule for now wait for the next round."""
        while True:
            due = sorted(
                [(d, "attempt_timer", sid, tid) for tid, (d, sid) in self.attempt_timers.items() if d <= self.now]
                + ([(self.sweep, "lease_sweep", 0, 0)] if self.sweep is not None and self.sweep <= self.now else [])
                + [(d, "recurring_timer", sid, rid) for rid, (d, sid) in self.recurring_timers.items() if d <= self.now]
                + ([(self.prune_due, "retention_sweep", 0, 0)] if self.prune_due is not None and self.prune_due <= self.now else [])
            )
            if not due:
                return
            for d, table, sid, tid in due:
                self.begin()
                if table == "attempt_timer" and self.attempt_timers.get(tid) == (d, sid):
                    del self.attempt_timers[tid]
                    self._run_attempt(tid, plan_of)
                elif table == "lease_sweep" and self.sweep == d:
                    self._sweep()
                elif table == "recurring_timer" and self.recurring_timers.get(tid) == (d, sid):
                    del self.recurring_timers[tid]
                    self._fire(tid)
                elif table == "retention_sweep" and self.prune_due == d:
                    self._prune()

    def _sweep(self) -> None:
        """Reap the ended leases, earliest (then lowest id) first; re-arm at the next lease end,
        or let the one-shot row go."""
        leased = sorted((t.lease_expires, t.id) for t in self.tasks.values() if t.lease_expires is not None)
        for expires, tid in leased:
            if expires <= self.now:
                t = self.tasks[tid]
                deadline = t.deadline()
                if deadline is not None and expires >= deadline:
                    error = f"timeout: the attempt ran past its timeout_seconds ({t.timeout} s); worker {t.claimed_by}"
                    self._fail(t, error, "timeout", t.claimed_by or "?")
                    continue
                error = f"lease expired at {Timestamp(expires).isoformat()}: worker {t.claimed_by} neither completed nor failed the task"
                self._fail(t, error, "lease_expired", t.claimed_by or "?")
        upcoming = next((e for e, _ in leased if e > self.now), None)
        self.sweep = None if upcoming is None else max(upcoming, self.now + S)  # SWEEP_SPACING

    def _run_attempt(self, tid: int, plan_of: Any) -> None:
        t = self.tasks.get(tid)
        if t is None or t.status != "queued" or not t.in_module:
            return
        if t.queue in self.queues and self.queues[t.queue].paused:
            return  # waits, without a timer, for resume
        if not self.handler_on:
            t.in_module = False
            return
        t.status, t.attempts = "running", t.attempts + 1
        plan = plan_of(t.payload)
        run = t.attempts + t.snoozes  # the plan counts runs: a snoozed run gives its attempt back
        outcome = plan[run - 1] if run <= len(plan) else "ok"
        if outcome in ("ok", "give_up"):
            self.notes.append((t.id, t.attempts))
        if outcome == "ok":
            self._record(t, "completed", "handler")
            t.status, t.result, t.finished_at = "completed", {"attempt": t.attempts}, self.now
            self._finished("completed")
        elif outcome == "give_up":
            self._fail(t, "bad input", "gave_up", "handler")
        elif outcome == "snooze":
            self._snooze(t, 5, "handler")
        elif outcome == "retry_in":
            self._fail(t, "later", "failed", "handler", 7)
        else:
            self._fail(t, "try later" if outcome == "retry" else CRASH, "failed", "handler")


    # --- recurring jobs (recurring.py) -----------------------------------------------------------

    def _instants(self, m: MRecurring, after: int, upto: int) -> list[int]:
        """The entry's instants in (after, upto], micros (cron.py's walk, itself tested against cronsim)."""
        out = []
        for t in instants_after(m.cron, time_zone(m.tz), Timestamp(after)):
            if t.micros > upto:
                break
            out.append(t.micros)
        return out

    def _arm_recurring(self, m: MRecurring) -> None:
        self.recurring_timers.pop(m.id, None)
        m.next_fire = None
        if m.enabled:
            nxt = next_after(m.cron, time_zone(m.tz), Timestamp(max(self.now, m.last_fired)))
            if nxt is not None:
                m.next_fire = nxt.micros
                self.recurring_timers[m.id] = (nxt.micros, self._next("recurring_timer"))

    def add_recurring(self, who: Identity, name: str, cron: str, tz: str, job_type: str, catch_up: str, limit: int) -> MRecurring:
        self._admin(who)
        if any(r.name == name for r in self.recurring.values()) or not 1 <= limit <= 1000:
            raise Refused(InvalidArgument)
        m = MRecurring(self._next("recurring"), name, expression(cron), tz, job_type, "cron", True, catch_up, limit, self.now)
        self.recurring[m.id] = m
        self._arm_recurring(m)
        return m

    def _entry(self, rid: int) -> MRecurring:
        if rid not in self.recurring:
            raise Refused(RecurringNotFound)
        return self.recurring[rid]

    def set_recurring_enabled(self, who: Identity, rid: int, enabled: bool) -> MRecurring:
        self._admin(who)
        m = self._entry(rid)
        if m.enabled != enabled:
            m.enabled = enabled
            if enabled:
                m.last_fired = max(self.now, m.last_fired)
            self._arm_recurring(m)
        return m

    def change_recurring(self, who: Identity, rid: int, cron: str | None, tz: str | None, catch_up: str | None) -> MRecurring:
        """A new expression or zone counts from now; the timer row is written again either way."""
        self._admin(who)
        m = self._entry(rid)
        new_cron = m.cron if cron is None else expression(cron)
        new_tz = m.tz if tz is None else tz
        if (new_cron, new_tz) != (m.cron, m.tz):
            m.last_fired = max(self.now, m.last_fired)
        m.cron, m.tz, m.catch_up = new_cron, new_tz, m.catch_up if catch_up is None else catch_up
        self._arm_recurring(m)
        return m

    def delete_recurring(self, who: Identity, rid: int) -> None:
        self._admin(who)
        self._entry(rid)
        del self.recurring[rid]
        self.recurring_timers.pop(rid, None)

    def _enqueue_recurring(self, m: MRecurring, instant: int | None) -> MTask:
        key = None if instant is None else f"recurring:{m.id}:{Timestamp(instant).isoformat()}"
        t = self.create(None, "none", m.job_type, m.queue, None, 5, 30, 0, 0, key)
        t.recurring_id = m.id
        return t

    def run_recurring_now(self, who: Identity, rid: int) -> MTask:
        self._admin(who)
        return self._enqueue_recurring(self._entry(rid), None)

    def _fire(self, rid: int) -> None:
        m = self.recurring.get(rid)
        if m is None or not m.enabled:
            return
        instants = self._instants(m, m.last_fired, self.now)
        on_time = [t for t in instants if t > self.now - 60 * S]
        missed = [t for t in instants if t <= self.now - 60 * S]
        kept = [] if m.catch_up == "skip" else missed[-1:] if m.catch_up == "one" else missed[-m.limit :]
        for t in kept + on_time:
            self._enqueue_recurring(m, t)
        m.last_fired = max(self.now, m.last_fired)
        self._arm_recurring(m)
