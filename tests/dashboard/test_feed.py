"""The commit feed: task events derived from commit records (in-module handlers included, whose
attempts start and end inside one transaction), the writer's hooks, and the metrics' bounds."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from stdbmod import Database, Identity, ManualClock
from stdbmod.errors import ReducerFailed, SenderError
from stdbmod.http.metrics import MAX_PAIRS, Metrics
from stdbmod.http.metrics_feed import Feed, TaskEvent
from stdbmod.http.metrics_tasks import Counts
from stdbmod.retry import GiveUp, HandlerContext, RetryableError, create_retry_module
from stdbmod.runtime.jobs import CallJob

ADMIN = Identity.from_claims("test", "admin")


@pytest.fixture
def handled(tmp_path: Path) -> Iterator[tuple[Database, list[str], Feed, list[TaskEvent]]]:
    """A retry module with one in-module handler following a script, and a feed on it."""
    rm = create_retry_module()
    script: list[str] = []

    @rm.handler("scripted")
    def scripted(ctx: HandlerContext, payload: Any) -> Any:
        step = script.pop(0)
        if step == "retry":
            raise RetryableError("later")
        if step == "give_up":
            raise GiveUp("no such address")
        return "ok"

    db = Database.create(tmp_path / "db", rm.module, owner=ADMIN, clock=ManualClock(), durable=False)
    feed = Feed()
    events: list[TaskEvent] = []
    feed.task_listeners.append(events.extend)
    feed.attach(db)
    try:
        yield db, script, feed, events
    finally:
        feed.detach()
        db.close()


def _kinds(events: list[TaskEvent]) -> list[str]:
    return [e.kind for e in events]


def test_in_module_attempts_are_seen_from_their_net_changes(handled: Any) -> None:
    db, script, feed, events = handled
    script += ["retry", "ok"]
    db.call("submit", "scripted", "jobs", {"n": 1}, sender=ADMIN)
    assert db.run_due() == 1  # the first attempt, at once: retried
    db.clock.advance(60)
    assert db.run_due() == 1  # the second: completed
    feed.drain()
    assert _kinds(events) == ["enqueued", "started", "failed", "started", "completed"]
    assert {(e.queue, e.job_type) for e in events} == {("jobs", "scripted")}
    assert events[-1].seconds == 0.0  # started and ended inside one transaction, at one timestamp


def test_giving_up_is_a_failed_attempt_and_a_death(handled: Any) -> None:
    db, script, feed, events = handled
    script.append("give_up")
    db.call("submit", "scripted", None, None, sender=ADMIN)
    db.run_due()
    feed.drain()
    assert _kinds(events) == ["enqueued", "started", "failed", "dead"]
    assert events[-1].reason == "gave_up"


def test_requeue_and_delete_are_neither_attempts_nor_deaths(handled: Any) -> None:
    db, script, feed, events = handled
    script.append("give_up")
    t = db.call("submit", "scripted", None, None, sender=ADMIN)
    db.run_due()
    feed.drain()
    events.clear()
    db.call("requeue", t.id, sender=ADMIN)
    feed.drain()
    assert events == []  # back to queued, attempts reset: no event
    script.append("give_up")
    db.run_due()
    db.call("delete_task", t.id, sender=ADMIN)
    feed.drain()
    assert _kinds(events) == ["started", "failed", "dead"]


def test_the_hooks_only_hand_work_on(handled: Any) -> None:
    """The writer's hooks append to the feed's queues; nothing is decoded until a drain."""
    db, script, feed, events = handled
    db.call("submit", "other", None, None, sender=ADMIN)
    assert events == [] and len(feed._records) == 1  # still queued for the drain
    feed.drain()
    assert _kinds(events) == ["enqueued"] and not feed._records


def test_detach_restores_the_writer(handled: Any) -> None:
    db, _, feed, _ = handled
    feed.detach()
    assert db.hooks.on_commit is None and db.hooks.on_batch is None


def _metrics(tmp_path: Path) -> tuple[Metrics, Database]:
    db = Database.create(tmp_path / "m", create_retry_module().module, owner=ADMIN, durable=False)
    return Metrics(Feed(), Counts(), lambda: db, {}), db


def test_call_outcomes_ok_error_and_panic(tmp_path: Path) -> None:
    m, db = _metrics(tmp_path)
    try:
        jobs = [CallJob(kind="call", reducer=name, sender=ADMIN) for name in ("a", "a", "b", "")]
        batch: list[tuple[Any, Future[Any]]] = [(j, Future()) for j in jobs]
        outcomes = [(True, None), (False, SenderError("no")), (False, ReducerFailed("b")), (True, None)]
        m.on_batch((batch, outcomes, [1000, 2000, 3000, 4000], 5_000_000))
        hist = {(s.labels["reducer"], s.labels["outcome"]): s.value for s in next(iter(m.calls.collect())).samples if s.name.endswith("_count")}
        assert hist == {("a", "ok"): 1, ("a", "error"): 1, ("b", "panic"): 1}  # a gone schedule row ("") is not a call
        batch_size = {s.name: s.value for s in next(iter(m.batch_size.collect())).samples}
        assert batch_size["stdbmod_commit_batch_size_sum"] == 4
        fsync = {s.name: s.value for s in next(iter(m.fsync.collect())).samples}
        assert fsync["stdbmod_commit_fsync_duration_seconds_sum"] == pytest.approx(0.005)
    finally:
        db.close()


def test_label_pairs_are_bounded(tmp_path: Path) -> None:
    m, db = _metrics(tmp_path)
    try:
        m.on_tasks([TaskEvent("enqueued", f"q{i}", "t", 0) for i in range(MAX_PAIRS + 50)])
        samples = [s for s in next(iter(m.tasks["enqueued"].collect())).samples if s.name.endswith("_total")]
        assert len(samples) == MAX_PAIRS + 1
        other = [s.value for s in samples if s.labels == {"queue": "_other", "job_type": "_other"}]
        assert other == [50]
    finally:
        db.close()
