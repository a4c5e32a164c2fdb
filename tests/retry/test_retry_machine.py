"""The whole task lifecycle as a Hypothesis state machine, against the plain-Python model in
retry_model.py: submit and enqueue (also transactionally from another module's reducer), claim,
complete, fail, heartbeat, handler outcomes, the clock and the scheduler, lease expiry, requeue,
delete, cancel, admin and worker changes, calls by identities without the role, settings,
handler (un)registration, reads, and closing and reopening the database; the failure policy
(fail with retry false or retry_in_seconds, snooze, handlers' RetryIn and Snooze, run now, the
backoff cap and jitter), the dead-letter triage's bulk requeue and delete (fingerprints, held
tasks), and recurring entries (their timers firing with the others, each instant once, the
catch-up policies when the clock jumps past instants).

After every step the real database must agree with the model row for row, and the commit-log
replay of everything so far must hash to the live state.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import msgspec
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from stdbmod import Database, Identity, ManualClock, Module, PrimaryKey, Range, ReducerContext, SenderError, TimeDuration, Timestamp
from stdbmod.retry import (
    Completion,
    GiveUp,
    HandlerContext,
    NewTask,
    NotAuthorized,
    RetryableError,
    RetryIn,
    Snooze,
    Task,
    TaskStatus,
    UniqueSpec,
    create_retry_module,
    queries,
)
from stdbmod.retry.claim import next_claimable
from stdbmod.retry.queues import next_allowed
from stdbmod.retry.recurring import CatchUp, Recurring, RecurringSpec
from stdbmod.retry.triage import BulkAction, TriageFilter
from tests.replica import feed_replica
from tests.retry.retry_model import CRASH, HANDLED, Model, MRecurring, MTask, Refused, S

# --- the module under test: the retry module inside an app that handlers write to -----------------


class Note(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    task_id: int
    attempt: int


RM = create_retry_module()
APP = Module("app")
APP.include(RM.module)
APP.table(Note)


def plan_of(payload: Any) -> list[str]:
    return list(payload["plan"]) if isinstance(payload, dict) else []


def handler(ctx: HandlerContext, payload: Any) -> Any:
    ctx.db.note.insert(Note(0, ctx.task_id, ctx.attempt))
    plan = plan_of(payload)
    run = ctx.attempt + ctx.task.snoozes  # runs, not attempts: a snooze gives its attempt back
    outcome = plan[run - 1] if run <= len(plan) else "ok"
    if outcome == "retry":
        raise RetryableError("try later")
    if outcome == "retry_in":
        raise RetryIn(7, "later")
    if outcome == "snooze":
        raise Snooze(5)
    if outcome == "crash":
        raise RuntimeError("crash")
    if outcome == "give_up":
        raise GiveUp("bad input")
    return {"attempt": ctx.attempt}


@APP.reducer
def user_enqueue(ctx: ReducerContext, job_type: str, queue: str, payload: Any, max_attempts: int, backoff: int,
                 priority: int, delay: int, idem: str | None, partition: str | None, timeout: int | None, fail: bool) -> Task:  # fmt: skip
    """Another module's reducer: enqueues in its own transaction, with no role check."""
    task = RM.enqueue_in(ctx, job_type, payload, queue=queue, max_attempts=max_attempts, backoff_seconds=backoff,
                         priority=priority, run_after=ctx.timestamp + TimeDuration(delay * S), idempotency_key=idem,
                         partition_key=partition, timeout_seconds=timeout)  # fmt: skip
    if fail:
        raise SenderError("the caller's own check failed after enqueueing")
    return task


IDS = [Identity.from_claims("machine", name) for name in ("admin", "alice", "bob", "carol")]
who_st = st.sampled_from([0, 0, 0, 1, 1, 2, 2, 3])  # mostly the admin and the workers (alice, bob)
holder_st = st.sampled_from([None, None, None, 0, 1, 2, 3])  # None: the task's lease holder
mostly = st.sampled_from([True, True, True, False])
fence_st = st.sampled_from(["none", "none", "current", "stale"])  # the attempt a report names
task_args: dict[str, Any] = {  # strategies, spread into rules (Any: mypy cannot match **kwargs of one type)
    "job_type": st.sampled_from([HANDLED, "ext", "ext", "ext2"]),
    "queue": st.sampled_from(["default", "q2"]),
    "plan": st.lists(st.sampled_from(["ok", "retry", "crash", "give_up", "retry_in", "snooze"]), max_size=4),
    "max_attempts": st.sampled_from([1, 1, 2, 2, 3, 3, 4, 4, 0]),  # 0 is refused
    "backoff": st.sampled_from([0, 1, 10, 60]),
    "priority": st.integers(-2, 2),
    "delay": st.sampled_from([0, 0, 5, 100]),
    "idem": st.none() | st.sampled_from(["k1", "k2", "k3"]),
    "partition": st.sampled_from([None, None, "p1", "p2"]),
    "timeout": st.sampled_from([None, None, None, 5, 30, 0]),  # 0 is refused
    # unique specs as (fields, period, states); the last two are refused
    "unique": st.sampled_from([None, None, None, (["job_type", "queue", "payload"], None, None), (["job_type"], 30, None),
                               (["job_type", "queue"], None, ["queued"]), (["payload.plan", "partition_key"], 100, ["queued", "running"]),
                               ([], None, None), (["job_type"], None, [])]),
}
backoff_options: dict[str, Any] = {  # the backoff options: a cap, jitter drawn from ctx.rng
    "max_backoff": st.sampled_from([None, None, 0, 15, 100, -1]),  # -1 is refused
    "jitter": st.sampled_from([0.0, 0.0, 0.5, 1.0]),
}


def same_task(real: Task, m: MTask) -> None:
    assert (real.id, real.job_type, real.queue, real.payload, real.idempotency_key) == (m.id, m.job_type, m.queue, m.payload, m.idem)
    assert real.status.value == m.status and (real.dead_reason and real.dead_reason.value) == m.dead_reason, (real, m)
    assert (real.attempts, real.max_attempts, real.backoff_seconds) == (m.attempts, m.max_attempts, m.backoff), (real, m)
    assert (real.priority, real.neg_priority, real.run_after.micros, real.in_module) == (m.priority, -m.priority, m.run_after, m.in_module), (real, m)
    expires = real.lease_expires_at.micros if real.lease_expires_at else None
    assert (real.lease_holder, expires, real.claimed_by, real.result) == (m.lease_holder, m.lease_expires, m.claimed_by, m.result), (real, m)
    finished = real.finished_at.micros if real.finished_at else None
    assert finished == m.finished_at, (real, m)
    assert (real.max_backoff_seconds, real.backoff_jitter, real.snoozes) == (m.max_backoff, m.jitter, m.snoozes), (real, m)
    assert (real.error_fingerprint, real.triage_hold) == (m.fingerprint, m.hold), (real, m)
    assert real.recurring_id == m.recurring_id, (real, m)
    assert (real.partition_key, real.timeout_seconds) == (m.partition, m.timeout), (real, m)
    assert (real.unique_key is None) == (m.ukey is None) and real.created_at.micros == m.created, (real, m)
    if m.last_error == CRASH:
        assert real.last_error is not None and real.last_error.startswith("Traceback") and "RuntimeError: crash" in real.last_error
    else:
        assert real.last_error == m.last_error, (real, m)


def refused_alike(r: Refused, call: Any, what: str) -> None:
    """The model refused: the real call must raise the same error."""
    event(f"{what}: {r.error.__name__}")
    try:
        call()
    except Exception as e:
        assert type(e) is r.error, f"expected {r.error.__name__}, got {type(e).__name__}: {e}"
    else:
        raise AssertionError(f"expected {r.error.__name__}, the call succeeded")


class RetryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        RM.handlers.clear()
        RM.handlers[HANDLED] = handler
        self.dir = Path(tempfile.mkdtemp(prefix="retry-machine-"))
        self.clock = ManualClock()
        self.db = Database.create(self.where("live"), APP, owner=IDS[0], clock=self.clock, durable=False)
        self.copy = Database.create(self.where("copy"), APP, owner=IDS[0], identity=self.db.identity, run_init=False, durable=False)
        self.replayed = 0
        self.model = Model(now=self.clock.now().micros, admins={IDS[0]})
        for worker in IDS[1:3]:
            self.both(lambda: self.model.grant_worker(IDS[0], worker), lambda: self.db.call("grant_worker", worker, sender=IDS[0]))  # noqa: B023

    def where(self, name: str) -> Any:
        """Where the database `name` lives (tests/postgres runs this machine on PostgreSQL)."""
        return self.dir / name

    def teardown(self) -> None:
        self.db.close()
        self.copy.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- helpers ---------------------------------------------------------------------------------

    def both(self, expect: Any, call: Any) -> Any:
        """Run the model, then the real call; both must succeed alike or refuse alike."""
        self.model.begin()
        try:
            expected = expect()
        except Refused as r:
            refused_alike(r, call, "refused")
            return None
        got = call()
        event(f"done: {type(expected).__name__}")
        if isinstance(expected, MTask):
            same_task(got, expected)
        else:
            assert got is None and expected is None, (got, expected)
        return got

    def both_many(self, expect: Any, call: Any) -> None:
        """`both` for the batch reducers: lists of tasks, and all or nothing. The model runs the
        items one by one on a copy, kept only if every item succeeded."""
        self.model.begin()
        trial = copy.deepcopy(self.model)
        try:
            expected = expect(trial)
        except Refused as r:
            refused_alike(r, call, "batch refused")
            return
        got = call()
        event(f"batch of {len(expected)}")
        assert len(got) == len(expected), (got, expected)
        for real, m in zip(got, expected):
            same_task(real, m)
        self.model = trial

    def pick(self, ref: int, fit: str | None = None) -> int:
        """A task id: one in status `fit` if there is one, else any id ever given out, or the next."""
        fitting = sorted(t.id for t in self.model.tasks.values() if t.status == fit)
        candidates = fitting or list(range(1, self.model.seq["task"] + 2))
        return candidates[ref % len(candidates)]

    def anything_running(self) -> bool:
        return any(t.status == "running" for t in self.model.tasks.values())

    def caller_for(self, task_id: int, who: int | None) -> Identity:
        t = self.model.tasks.get(task_id)
        if who is None and t is not None and t.lease_holder is not None:
            return t.lease_holder
        return IDS[0 if who is None else who]

    # --- creating tasks --------------------------------------------------------------------------

    @initialize(tasks=st.lists(st.tuples(task_args["job_type"], task_args["queue"], task_args["priority"], task_args["plan"]), max_size=4))
    def some_tasks(self, tasks: list[tuple[str, str, int, list[str]]]) -> None:
        for job_type, queue, priority, plan in tasks:
            self.submit_or_enqueue(0, True, job_type, queue, plan, 3, 10, priority, 0, None, None, None, None)

    @rule(who=who_st, as_admin=st.booleans(), **task_args, **backoff_options)
    def submit_or_enqueue(self, who: int, as_admin: bool, job_type: str, queue: str, plan: list[str], max_attempts: int,
                          backoff: int, priority: int, delay: int, idem: str | None, partition: str | None, timeout: int | None,
                          unique: Any, max_backoff: int | None = None, jitter: float = 0.0) -> None:  # fmt: skip
        payload = {"plan": plan}
        run_after = self.clock.now() + TimeDuration(delay * S)
        role, reducer = ("admin", "submit") if as_admin else ("worker", "enqueue")
        spec = None if unique is None else UniqueSpec(unique[0], unique[1], None if unique[2] is None else [TaskStatus(s) for s in unique[2]])
        if unique is not None and not as_admin:  # the reducer that says whether the task existed
            self.model.begin()
            try:
                expected = self.model.create(IDS[who], role, job_type, queue, payload, max_attempts, backoff, priority, delay, idem,
                                             max_backoff, jitter, partition, timeout, unique)  # fmt: skip
            except Refused as r:
                refused_alike(r, lambda: self.db.call("enqueue_unique", job_type, queue, payload, max_attempts, backoff, run_after, priority,
                                                      idem, max_backoff, jitter, partition, timeout, spec, sender=IDS[who]), "refused")  # fmt: skip
                return
            got = self.db.call("enqueue_unique", job_type, queue, payload, max_attempts, backoff, run_after, priority, idem, max_backoff, jitter,
                               partition, timeout, spec, sender=IDS[who])  # fmt: skip
            event(f"enqueue_unique: duplicate {got.duplicate}")
            same_task(got.task, expected)
            assert got.duplicate == self.model.duplicate
            return
        self.both(
            lambda: self.model.create(IDS[who], role, job_type, queue, payload, max_attempts, backoff, priority, delay, idem, max_backoff, jitter,
                                      partition, timeout, unique),
            lambda: self.db.call(reducer, job_type, queue, payload, max_attempts, backoff, run_after, priority, idem, max_backoff, jitter,
                                 partition, timeout, spec, sender=IDS[who]),
        )

    @rule(who=who_st, fail=st.booleans(), **task_args)
    def enqueue_from_another_module(self, who: int, fail: bool, job_type: str, queue: str, plan: list[str], max_attempts: int,
                                    backoff: int, priority: int, delay: int, idem: str | None, partition: str | None,
                                    timeout: int | None, unique: Any) -> None:  # fmt: skip
        args = (job_type, queue, {"plan": plan}, max(max_attempts, 1), backoff, priority, delay, idem, partition, timeout or None)
        if fail:
            before = self.db.state_hash()
            try:
                self.db.call("user_enqueue", *args, True, sender=IDS[who])
            except SenderError as e:
                assert "own check failed" in str(e)
            else:
                raise AssertionError("user_enqueue should have failed")
            assert self.db.state_hash() == before
        else:
            self.both(
                lambda: self.model.create(None, "none", *args[:-2], partition=partition, timeout=timeout or None),
                lambda: self.db.call("user_enqueue", *args, False, sender=IDS[who]),
            )

    # --- workers ---------------------------------------------------------------------------------

    @rule(who=who_st, queue=st.sampled_from([None, "default", "q2"]), worker_id=st.sampled_from([None, "w1"]),
          lease=st.sampled_from([None, 5, 60]))  # fmt: skip
    def claim(self, who: int, queue: str | None, worker_id: str | None, lease: int | None) -> None:
        self.both(lambda: self.model.claim(IDS[who], queue, worker_id, lease), lambda: self.db.call("claim", queue, worker_id, lease, sender=IDS[who]))

    def attempt_for(self, task_id: int, fence: str) -> int | None:
        """The attempt a worker names: none, the current claim's, or a stale one."""
        t = self.model.tasks.get(task_id)
        current = t.attempts if t is not None else 1
        return None if fence == "none" else current if fence == "current" else max(current - 1, 1) if current > 1 else current + 1

    @precondition(lambda self: self.anything_running())
    @rule(ref=st.integers(0, 100), who=holder_st, running=mostly, result=st.sampled_from([None, {"ok": 1}]), fence=fence_st)
    def complete(self, ref: int, who: int | None, running: bool, result: Any, fence: str) -> None:
        tid = self.pick(ref, "running" if running else None)
        me, attempt = self.caller_for(tid, who), self.attempt_for(tid, fence)
        self.both(lambda: self.model.complete(me, tid, result, attempt), lambda: self.db.call("complete", tid, result, attempt, sender=me))

    @rule(who=who_st, limit=st.integers(1, 4), queue=st.sampled_from([None, "default", "q2"]), worker_id=st.sampled_from([None, "w1"]),
          lease=st.sampled_from([None, 5, 60]))  # fmt: skip
    def claim_many(self, who: int, limit: int, queue: str | None, worker_id: str | None, lease: int | None) -> None:
        def expect(model: Model) -> list[MTask]:
            out: list[MTask] = []
            while len(out) < limit and (t := model.claim(IDS[who], queue, worker_id, lease)) is not None:
                out.append(t)
            return out

        self.both_many(expect, lambda: self.db.call("claim_many", limit, queue, worker_id, lease, sender=IDS[who]))

    @precondition(lambda self: self.anything_running())
    @rule(refs=st.lists(st.integers(0, 100), min_size=1, max_size=3), who=holder_st, running=mostly, result=st.sampled_from([None, {"ok": 1}]))
    def complete_many(self, refs: list[int], who: int | None, running: bool, result: Any) -> None:
        ids = [self.pick(ref, "running" if running else None) for ref in refs]  # repeats and strangers refuse the batch
        me = self.caller_for(ids[0], who)
        self.both_many(
            lambda model: [model.complete(me, tid, result) for tid in ids],
            lambda: self.db.call("complete_many", [Completion(tid, result) for tid in ids], sender=me),
        )

    @precondition(lambda self: self.anything_running())
    @rule(ref=st.integers(0, 100), who=holder_st, running=mostly, fence=fence_st, retry=mostly,
          retry_in=st.sampled_from([None, None, 0, 7, -1]),
          error=st.sampled_from(["worker error", "timeout after 3012 ms", "timeout after 2999 ms"]))  # fmt: skip
    def fail(self, ref: int, who: int | None, running: bool, fence: str, retry: bool, retry_in: int | None, error: str) -> None:
        """A worker's fail, with the failure policy: retry false (discarded, even on a fresh
        attempt), retry_in_seconds overriding the backoff."""
        tid = self.pick(ref, "running" if running else None)
        me, attempt = self.caller_for(tid, who), self.attempt_for(tid, fence)
        self.both(
            lambda: self.model.fail(me, tid, error, attempt, retry, retry_in),
            lambda: self.db.call("fail", tid, error, attempt, retry, retry_in, sender=me),
        )

    @precondition(lambda self: self.anything_running())
    @rule(ref=st.integers(0, 100), who=holder_st, running=mostly, fence=fence_st, seconds=st.sampled_from([0, 5, 100, -1]))
    def snooze(self, ref: int, who: int | None, running: bool, fence: str, seconds: int) -> None:
        """Snooze never spends an attempt (the model checks attempts went down by one)."""
        tid = self.pick(ref, "running" if running else None)
        me, attempt = self.caller_for(tid, who), self.attempt_for(tid, fence)
        before = self.model.tasks[tid].attempts if tid in self.model.tasks else None
        got = self.both(lambda: self.model.snooze(me, tid, seconds, attempt), lambda: self.db.call("snooze", tid, seconds, attempt, sender=me))
        if got is not None:
            assert got.attempts == before - 1 and got.status is TaskStatus.QUEUED  # type: ignore[operator]

    @precondition(lambda self: self.anything_running())
    @rule(ref=st.integers(0, 100), who=holder_st, lease=st.sampled_from([None, 5, 60]))
    def heartbeat(self, ref: int, who: int | None, lease: int | None) -> None:
        tid = self.pick(ref, "running")
        me = self.caller_for(tid, who)
        self.both(lambda: self.model.heartbeat(me, tid, lease), lambda: self.db.call("heartbeat", tid, lease, sender=me))

    # --- queue control ---------------------------------------------------------------------------

    def queue_call(self, expect: Any, call: Any) -> None:
        self.model.begin()
        try:
            m = expect()
        except Refused as r:
            refused_alike(r, call, "queue control refused")
            return
        got = call()
        event("queue control")
        assert (got.paused, got.concurrency, got.rate_limit, got.rate_period_seconds, got.partition_limit) == (
            m.paused, m.concurrency, m.rate, m.period, m.partition_limit)  # fmt: skip

    @rule(who=who_st, queue=st.sampled_from(["default", "q2"]), paused=st.booleans())
    def pause_or_resume(self, who: int, queue: str, paused: bool) -> None:
        reducer = "pause_queue" if paused else "resume_queue"
        self.queue_call(lambda: self.model.pause(IDS[who], queue, paused), lambda: self.db.call(reducer, queue, sender=IDS[who]))

    @rule(who=who_st, queue=st.sampled_from(["default", "q2"]), concurrency=st.sampled_from([None, None, 1, 2, 0]),
          rate=st.sampled_from([None, None, 1, 2, 3]), period=st.sampled_from([None, 5, 60, 300]),
          partition_limit=st.sampled_from([None, None, 1, 2]))  # fmt: skip
    def set_queue_limits(self, who: int, queue: str, concurrency: int | None, rate: int | None, period: int | None, partition_limit: int | None) -> None:
        self.queue_call(
            lambda: self.model.set_limits(IDS[who], queue, concurrency, rate, period, partition_limit),
            lambda: self.db.call("set_queue_limits", queue, concurrency, rate, period, partition_limit, sender=IDS[who]),
        )

    # --- time ------------------------------------------------------------------------------------

    @rule(seconds=st.sampled_from([1, 5, 30, 60, 300, 1000]), run=st.booleans())
    def advance(self, seconds: int, run: bool) -> None:
        self.clock.advance(seconds)
        self.model.now = self.clock.now().micros
        if run:
            self.run_due()

    def run_due(self) -> None:
        self.model.run_due(plan_of)
        self.db.run_due()

    @precondition(lambda self: bool(self.model.attempt_timers or self.model.sweep is not None or self.model.prune_due is not None))
    @rule()
    def to_next_due(self) -> None:
        due = self.db.next_due()
        assert due is not None
        self.clock.set(max(due, self.clock.now()))
        self.model.now = self.clock.now().micros
        self.run_due()

    # --- admins ----------------------------------------------------------------------------------

    @rule(action=st.sampled_from(["requeue", "cancel", "delete_task", "run_now"]), who=who_st, ref=st.integers(0, 100), fit=mostly,
          reason=st.sampled_from([None, "no longer needed"]))  # fmt: skip
    def dead_letter_action(self, action: str, who: int, ref: int, fit: bool, reason: str | None) -> None:
        """requeue or delete a (dead) task, cancel a (queued) one or make it run now; `fit`
        picks a task in that state."""
        me = IDS[who]
        if action == "run_now":
            tid = self.pick(ref, "queued" if fit else None)
            self.both(lambda: self.model.run_now(me, tid), lambda: self.db.call("run_now", tid, sender=me))
            return
        if action == "cancel":  # a queued or a running one
            tid = self.pick(ref, ("queued", "running")[ref % 2] if fit else None)
            self.both(lambda: self.model.cancel(me, tid, reason), lambda: self.db.call("cancel", tid, reason, sender=me))
            return
        tid = self.pick(ref, "dead" if fit else None)
        expect = self.model.requeue if action == "requeue" else self.model.delete
        self.both(lambda: expect(me, tid), lambda: self.db.call(action, tid, sender=me))

    @rule(who=who_st, action=st.sampled_from(["requeue", "requeue", "delete"]), job_type=st.sampled_from([None, None, HANDLED, "ext"]),
          by_group=st.booleans(), ref=st.integers(0, 100), include_held=st.sampled_from([False, False, True]))  # fmt: skip
    def bulk_dlq(self, who: int, action: str, job_type: str | None, by_group: bool, ref: int, include_held: bool) -> None:
        """The dead-letter triage's bulk requeue and delete (one batch: few tasks). A task that a
        bulk requeue sent back and that dies again alike is held, and passed by after."""
        dead = sorted((t.id, t.fingerprint) for t in self.model.tasks.values() if t.status == "dead")
        fp = dead[ref % len(dead)][1] if by_group and dead else None
        where = TriageFilter(fingerprint=fp, job_type=job_type, include_held=include_held)
        me = IDS[who]
        self.model.begin()
        try:
            expected = self.model.bulk(me, action, fp, job_type, include_held)
        except Refused as r:
            refused_alike(r, lambda: self.db.call("bulk_dlq", BulkAction(action), where, sender=me), "bulk refused")
            return
        op = self.db.call("bulk_dlq", BulkAction(action), where, sender=me)
        event(f"bulk {action}: {expected}")
        assert (op.processed, op.done) == (expected, True)

    # --- recurring jobs ----------------------------------------------------------------------------

    def same_entry(self, real: Recurring, m: MRecurring) -> None:
        assert (real.id, real.name, real.cron, real.timezone, real.job.job_type, real.enabled) == (m.id, m.name, m.cron, m.tz, m.job_type, m.enabled)
        assert (real.catch_up.value, real.catch_up_limit, real.last_fired.micros) == (m.catch_up, m.limit, m.last_fired), (real, m)
        assert (real.next_fire and real.next_fire.micros) == m.next_fire, (real, m)

    @rule(who=who_st, name=st.sampled_from(["a", "a", "b", "c"]), cron=st.sampled_from(["*/5 * * * *", "@hourly", "30 * * * *", "*/2 * * * *"]),
          tz=st.sampled_from(["UTC", "Asia/Kolkata"]), job_type=st.sampled_from([HANDLED, "ext"]),
          catch_up=st.sampled_from(["skip", "one", "each"]), limit=st.sampled_from([1, 3, 0]))  # fmt: skip
    def add_recurring(self, who: int, name: str, cron: str, tz: str, job_type: str, catch_up: str, limit: int) -> None:
        """A recurring entry; its timer then fires with the others in run_due (each instant once,
        missed ones by the policy when the clock jumped past them)."""
        me = IDS[who]
        spec = RecurringSpec(name, cron, NewTask(job_type, queue="cron"), tz, True, CatchUp(catch_up), limit)
        self.model.begin()
        try:
            m = self.model.add_recurring(me, name, cron, tz, job_type, catch_up, limit)
        except Refused as r:
            refused_alike(r, lambda: self.db.call("add_recurring", spec, sender=me), "recurring refused")
            return
        self.same_entry(self.db.call("add_recurring", spec, sender=me), m)

    @rule(who=who_st, ref=st.integers(0, 5), cron=st.sampled_from([None, "*/5 * * * *", "@hourly", "*/2 * * * *"]),
          tz=st.sampled_from([None, "UTC", "Asia/Kolkata"]), catch_up=st.sampled_from([None, "skip", "each"]))  # fmt: skip
    def change_recurring(self, who: int, ref: int, cron: str | None, tz: str | None, catch_up: str | None) -> None:
        me = IDS[who]
        rid = ref % (self.model.seq["recurring"] + 1) + 1 if ref else 1
        mode = None if catch_up is None else CatchUp(catch_up)
        self.model.begin()
        try:
            m = self.model.change_recurring(me, rid, cron, tz, catch_up)
        except Refused as r:
            refused_alike(r, lambda: self.db.call("change_recurring", rid, None, cron, tz, None, mode, None, sender=me), "recurring refused")
            return
        self.same_entry(self.db.call("change_recurring", rid, None, cron, tz, None, mode, None, sender=me), m)

    @rule(who=who_st, action=st.sampled_from(["enable_recurring", "disable_recurring", "delete_recurring", "run_recurring_now"]),
          ref=st.integers(0, 5))  # fmt: skip
    def recurring_action(self, who: int, action: str, ref: int) -> None:
        me = IDS[who]
        rid = ref % (self.model.seq["recurring"] + 1) + 1 if ref else 1
        self.model.begin()
        expect: Callable[[], Any] = {
            "enable_recurring": lambda: self.model.set_recurring_enabled(me, rid, True),
            "disable_recurring": lambda: self.model.set_recurring_enabled(me, rid, False),
            "delete_recurring": lambda: self.model.delete_recurring(me, rid),
            "run_recurring_now": lambda: self.model.run_recurring_now(me, rid),
        }[action]
        try:
            expected = expect()
        except Refused as r:
            refused_alike(r, lambda: self.db.call(action, rid, sender=me), "recurring refused")
            return
        got = self.db.call(action, rid, sender=me)
        event(action)
        if isinstance(expected, MTask):
            same_task(got, expected)
        elif isinstance(expected, MRecurring):
            self.same_entry(got, expected)

    @precondition(lambda self: self.anything_running())
    @rule(ref=st.integers(0, 100), who=who_st, reason=st.sampled_from([None, "stop it"]))
    def cancel_running(self, ref: int, who: int, reason: str | None) -> None:
        """An admin cancels a running task: its holder's next report is refused (TaskCancelled)."""
        tid = self.pick(ref, "running")
        holder = self.model.tasks[tid].lease_holder
        assert holder is not None
        self.both(lambda: self.model.cancel(IDS[who], tid, reason), lambda: self.db.call("cancel", tid, reason, sender=IDS[who]))
        self.both(lambda: self.model.heartbeat(holder, tid, None), lambda: self.db.call("heartbeat", tid, sender=holder))

    @precondition(lambda self: any(t.status == "running" and t.timeout for t in self.model.tasks.values()))
    @rule(ref=st.integers(0, 100), report=st.sampled_from(["heartbeat", "complete", "fail"]))
    def report_at_the_deadline(self, ref: int, report: str) -> None:
        """The clock reaches a running attempt's deadline before the sweep fires: its holder's
        report is refused (AttemptTimedOut), and the sweep then ends the attempt as a timeout."""
        timed = sorted(t.id for t in self.model.tasks.values() if t.status == "running" and t.timeout)
        t = self.model.tasks[timed[ref % len(timed)]]
        deadline, holder = t.deadline(), t.lease_holder
        assert deadline is not None and holder is not None
        self.clock.set(max(Timestamp(deadline), self.clock.now()))
        self.model.now = self.clock.now().micros
        if report == "heartbeat":
            self.both(lambda: self.model.heartbeat(holder, t.id, None), lambda: self.db.call("heartbeat", t.id, sender=holder))
        elif report == "complete":
            self.both(lambda: self.model.complete(holder, t.id, None), lambda: self.db.call("complete", t.id, sender=holder))
        else:
            self.both(lambda: self.model.fail(holder, t.id, "late"), lambda: self.db.call("fail", t.id, "late", sender=holder))

    @rule(who=who_st, status=st.sampled_from(["completed", "completed", "dead", "dead", "queued"]),
          age=st.sampled_from([None, 0, 30, 300, 300, 3000, -1]), count=st.sampled_from([None, None, 0, 1, 3, -1]))  # fmt: skip
    def set_retention(self, who: int, status: str, age: int | None, count: int | None) -> None:
        """Retention at run time; the sweep then prunes finished tasks and their history."""
        self.model.begin()
        try:
            expected = self.model.set_retention(IDS[who], status, age, count)
        except Refused as r:
            refused_alike(r, lambda: self.db.call("set_retention", status, age, count, sender=IDS[who]), "retention refused")
            return
        got = self.db.call("set_retention", status, age, count, sender=IDS[who])
        assert (got.max_age_seconds, got.max_count) == expected

    @rule(who=who_st, other=who_st, action=st.sampled_from(["add_admin", "remove_admin", "grant_worker", "revoke_worker"]))
    def roles(self, who: int, other: int, action: str) -> None:
        self.both(lambda: getattr(self.model, action)(IDS[who], IDS[other]), lambda: self.db.call(action, IDS[other], sender=IDS[who]))

    @rule(who=who_st, setting=st.sampled_from(["set_history_cap", "set_default_lease", "toggle_handler"]),
          value=st.sampled_from([-1, 0, 1, 2, 3, 5, 10, 300, 1000]))  # fmt: skip
    def settings(self, who: int, setting: str, value: int) -> None:
        if setting == "toggle_handler":  # registering and unregistering the handler at run time
            self.model.handler_on = not self.model.handler_on
            if self.model.handler_on:
                RM.handlers[HANDLED] = handler
            else:
                del RM.handlers[HANDLED]
            return
        self.both(lambda: getattr(self.model, setting)(IDS[who], value), lambda: self.db.call(setting, value, sender=IDS[who]))

    @rule()
    def reopen(self) -> None:
        self.db.close()
        self.db = Database.open(self.where("live"), APP, clock=self.clock, durable=False)

    @rule(who=who_st, status=st.sampled_from([None, "queued", "running", "completed", "dead"]),
          queue=st.sampled_from([None, "q2"]), per_page=st.integers(1, 4), page=st.integers(1, 3))  # fmt: skip
    def read(self, who: int, status: str | None, queue: str | None, per_page: int, page: int) -> None:
        me = IDS[who]
        if me not in self.model.admins:
            for read in (queries.list_tasks, queries.dead_letter, queries.history):
                try:
                    read(self.db, me)
                except NotAuthorized:
                    continue
                raise AssertionError(f"{read.__name__} by a non-admin succeeded")
            return
        got = queries.list_tasks(self.db, me, status=status, queue=queue, page=page, per_page=per_page)
        ids = sorted((t.id for t in self.model.tasks.values() if status in (None, t.status) and queue in (None, t.queue)), reverse=True)
        assert (got.total, [t.id for t in got.items]) == (len(ids), ids[(page - 1) * per_page : page * per_page])
        dead = queries.dead_letter(self.db, me, per_page=50)
        assert [t.id for t in dead.items] == sorted((t.id for t in self.model.tasks.values() if t.status == "dead"), reverse=True)
        assert [a.id for a in queries.history(self.db, me, limit=3)] == [h[0] for h in reversed(self.model.history)][:3]
        listed = {q.queue: q for q in queries.queue_list(self.db, me)}
        assert set(listed) == {t.queue for t in self.model.tasks.values()} | set(self.model.queues)
        for name, info in listed.items():
            mine = [t for t in self.model.tasks.values() if t.queue == name]
            assert info.counts == {s.value: sum(1 for t in mine if t.status == s.value) for s in TaskStatus}
            assert info.paused == (name in self.model.queues and self.model.queues[name].paused)
            ready = [t.run_after for t in mine if t.status == "queued" and t.run_after <= self.model.now]
            assert info.oldest_ready_age_seconds == (None if not ready else (self.model.now - min(ready)) / 1e6)

    # --- invariants ------------------------------------------------------------------------------

    @invariant()
    def agrees_with_the_model(self) -> None:
        m = self.model
        with self.db.read() as view:
            db = view.db
            tasks = {t.id: t for t in db.task.iter()}
            assert sorted(tasks) == sorted(m.tasks)
            for tid, t in tasks.items():
                same_task(t, m.tasks[tid])
                assert 0 <= t.attempts <= t.max_attempts
            # exactly one status each: the status index partitions the tasks
            listed = [t.id for s in TaskStatus for t in db.task.status.filter(s)]
            assert sorted(listed) == sorted(tasks)
            # nothing claimable is dead, completed, running, in-module or in the future
            for t in db.task.by_claim.filter((TaskStatus.QUEUED, False)):
                assert t.status is TaskStatus.QUEUED and not t.in_module
            first = next_claimable(db, None, self.clock.now())
            ready = [t for t in m.tasks.values() if t.status == "queued" and not t.in_module and t.run_after <= m.now]
            expected = min(ready, key=lambda t: (-t.priority, t.run_after, t.id)).id if ready else None
            assert (first and first.id) == expected
            # queue control: the rows, the rate windows and what a claim under them would take
            controls = {r.queue: (r.paused, r.concurrency, r.rate_limit, r.rate_period_seconds, r.partition_limit) for r in db.retry_queue.iter()}
            assert controls == {k: (q.paused, q.concurrency, q.rate, q.period, q.partition_limit) for k, q in m.queues.items()}
            marks = [(c.id, c.queue, c.partition_key, c.at.micros) for c in db.claim_mark.iter()]
            assert marks == m.marks
            for queue in (None, "default", "q2"):
                allowed, model_pick = next_allowed(db, queue, self.clock.now()), m.next_allowed(queue)
                assert (allowed and allowed.id) == (model_pick and model_pick.id), queue
            # the history: capped, newest first, exactly the model's
            rows = [(a.id, a.task_id, a.attempt, a.outcome.value, a.worker) for a in db.attempt.id.filter(Range(), reverse=True)]
            assert rows == list(reversed(m.history))
            s = db.retry_settings.id.find(0)
            assert len(rows) <= s.history_cap == m.cap and s.default_lease_seconds == m.default_lease
            # roles: never without an admin
            admins = {a.identity for a in db.retry_admin.iter()}
            assert admins == m.admins and admins
            assert {w.identity for w in db.retry_worker.iter()} == m.workers
            # timers and the handlers' committed writes
            assert {t.task_id: (t.scheduled_at.time.micros, t.scheduled_id) for t in db.attempt_timer.iter()} == m.attempt_timers
            assert [s.scheduled_at.time.micros for s in db.lease_sweep.iter()] == ([] if m.sweep is None else [m.sweep])
            assert [s.scheduled_at.time.micros for s in db.retention_sweep.iter()] == ([] if m.prune_due is None else [m.prune_due])
            assert {r.status.value: (r.max_age_seconds, r.max_count) for r in db.retry_retention.iter()} == m.retention
            assert db.lease_timer.count() == 0  # legacy: never written
            # recurring entries: their watermarks and timers, one row each while enabled
            assert {r.recurring_id: (r.scheduled_at.time.micros, r.scheduled_id) for r in db.recurring_timer.iter()} == m.recurring_timers
            for r in db.recurring.iter():
                self.same_entry(r, m.recurring[r.id])
            assert sorted(r.id for r in db.recurring.iter()) == sorted(m.recurring)
            assert [(n.task_id, n.attempt) for n in db.note.iter()] == m.notes

    @invariant()
    def replay_matches_live_state(self) -> None:
        self.replayed = feed_replica(self.copy, self.db, self.replayed)


RetryMachine.TestCase.settings = settings(
    max_examples=700,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
# 700 examples take about three minutes alone; a loaded machine (several suites on two cores)
# has taken past the default 300 s, so this test gets a deadline of its own.
TestRetryMachine = pytest.mark.timeout(900)(RetryMachine.TestCase)
