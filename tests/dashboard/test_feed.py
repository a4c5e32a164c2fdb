"""The commit feed: task events derived from commit records (in-module handlers included, whose
attempts start and end inside one transaction), the writer's hooks, and the metrics' bounds."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import msgspec
import pytest
from prometheus_client import CollectorRegistry

from stdbmod import Database, Identity, ManualClock
from stdbmod.errors import ReducerFailed, SenderError
from stdbmod.http import metrics_feed
from stdbmod.http.metrics import MAX_PAIRS, PENDING_MAX, Metrics, RequestHistogram, http_histogram
from stdbmod.http.metrics_feed import Feed, TaskEvent
from stdbmod.http.metrics_tasks import Counts
from stdbmod.retry import GiveUp, HandlerContext, RetryableError, create_retry_module
from stdbmod.rowformat import MAP, is_map
from stdbmod.runtime import CommitRecord
from stdbmod.runtime.jobs import CallJob
from stdbmod.runtime.records import TableChange

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


def _as_maps(db: Database, record: CommitRecord) -> CommitRecord:
    """`record` as a commit log written before rows were arrays holds it: task rows as maps."""
    form = db.module.tables["task"].row_format

    def maps(rows: list[bytes]) -> list[bytes]:
        return [form.hashed(raw, MAP) for raw in rows]

    changes = [TableChange(c.table, maps(c.deletes), maps(c.inserts)) if c.table == "task" else c for c in record.changes]
    return msgspec.structs.replace(record, changes=changes)


def test_worker_attempts_and_rows_of_either_form(handled: Any) -> None:
    """A worker's claim and completion: the attempt's duration is the time between them, and row
    images in the older map form (an upgraded database's rows) give the same events."""
    db, _, feed, events = handled
    start = db.commit_log_end()
    t = db.call("enqueue", "email", "mail", {"to": "a"}, sender=ADMIN)
    db.call("claim", "mail", "w1", sender=ADMIN)
    db.clock.advance(2.5)
    db.call("complete", t.id, {"ok": True}, sender=ADMIN)
    records = db.commit_log(start)
    feed.drain()
    assert [(e.kind, e.queue, e.job_type) for e in events] == [("enqueued", "mail", "email"), ("started", "mail", "email"), ("completed", "mail", "email")]
    assert events[-1].seconds == 2.5
    old = [_as_maps(db, r) for r in records]
    assert all(is_map(raw) for r in old for c in r.changes if c.table == "task" for raw in (*c.deletes, *c.inserts))
    assert [e for r in old for e in feed.task_events(r)] == events


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
    assert db.hooks.on_commit is None and db.hooks.on_batch is None and db.hooks.before_commit is None


def test_before_commit_runs_ahead_of_each_commit(tmp_path: Path) -> None:
    """The writer's `before_commit` hook: once a batch, before its commit (the log does not hold
    the batch's records yet), then `on_commit` after it."""
    db = Database.create(tmp_path / "h", create_retry_module().module, owner=ADMIN, durable=False)
    seen: list[tuple[str, int]] = []
    try:
        db.hooks.before_commit = lambda: seen.append(("before", db.commit_log_end()))
        db.hooks.on_commit = lambda records: seen.append(("commit", records[0].offset))
        db.call("submit", "other", None, None, sender=ADMIN)
        db.call_many([("submit", ("other", None, None), ADMIN), ("submit", ("other", None, None), ADMIN)])
    finally:
        db.close()
    first = seen[0][1]
    assert seen == [("before", first), ("commit", first), ("before", first + 1), ("commit", first + 1)]


def test_a_commit_after_enough_undrained_ones_wakes_the_drain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit with `DRAIN_EVERY` commits left undrained wakes the feed's thread to drain them
    (while its flush runs without the GIL), without waiting for the once-a-second drain (here an
    hour away); the commits before it, with fewer left, do not."""
    monkeypatch.setattr(metrics_feed, "DRAIN_SECONDS", 3600.0)
    db = Database.create(tmp_path / "w", create_retry_module().module, owner=ADMIN, durable=False)
    feed = Feed()
    drained = threading.Event()
    events: list[TaskEvent] = []

    def listen(es: list[TaskEvent]) -> None:
        events.extend(es)
        drained.set()

    feed.task_listeners.append(listen)
    feed.attach(db)
    try:
        for i in range(metrics_feed.DRAIN_EVERY):
            db.call("submit", f"job{i}", None, None, sender=ADMIN)
        assert not drained.is_set()  # at most DRAIN_EVERY - 1 were left when each committed: no wake-up
        db.call("submit", "last", None, None, sender=ADMIN)
        assert drained.wait(30), "the commit after DRAIN_EVERY undrained ones did not wake the drain"
        # the drain may run after the last commit too: then it hands on that one as well
        assert [(e.kind, e.job_type) for e in events][: metrics_feed.DRAIN_EVERY] == [("enqueued", f"job{i}") for i in range(metrics_feed.DRAIN_EVERY)]
    finally:
        feed.detach()
        db.close()


def _metrics(tmp_path: Path) -> tuple[Metrics, Database]:
    db = Database.create(tmp_path / "m", create_retry_module().module, owner=ADMIN, durable=False)
    return Metrics(Feed(), Counts(), lambda: db, {}), db


def _request_counts(m: Metrics) -> dict[tuple[str, str, str], float]:
    assert m.requests is not None
    return {
        (s.labels["route"], s.labels["method"], s.labels["status"]): s.value
        for s in next(iter(m.requests.histogram.collect())).samples
        if s.name.endswith("_count")
    }


def test_request_observations_wait_for_a_drain(tmp_path: Path) -> None:
    """With a feed, the event loop only queues a request's observation; the feed's drain (a
    commit's flush, or a scrape, which drains first) hands it to the histogram."""
    m, db = _metrics(tmp_path)
    try:
        assert m.requests is not None
        m.requests.observe("/jobs", "POST", 200, 0.002)
        m.requests.observe("/jobs", "POST", 200, 0.003)
        m.requests.observe("/jobs/{id}/complete", "POST", 409, 0.001)
        assert _request_counts(m) == {}  # queued, not observed yet
        m.feed.drain()
        assert _request_counts(m) == {("/jobs", "POST", "200"): 2, ("/jobs/{id}/complete", "POST", "409"): 1}
        m.requests.observe("/jobs", "POST", 200, 0.002)
        assert b'stdbmod_http_request_duration_seconds_count{method="POST",route="/jobs",status="200"} 3.0' in m.render()
    finally:
        db.close()


def test_queued_request_observations_stay_bounded_without_a_drain(tmp_path: Path) -> None:
    """A server whose feed never drains (no database open, nobody scraping) still keeps at most
    PENDING_MAX observations queued, and counts every request."""
    m, db = _metrics(tmp_path)
    try:
        assert m.requests is not None
        for _ in range(PENDING_MAX + 5):
            m.requests.observe("/jobs", "POST", 200, 0.001)
        assert len(m.requests._pending or ()) <= PENDING_MAX
        m.feed.drain()
        assert _request_counts(m) == {("/jobs", "POST", "200"): PENDING_MAX + 5}
    finally:
        db.close()


def test_a_front_observes_requests_at_once() -> None:
    """Without a feed to drain them (an HTTP front of `serve --workers N`), observations are
    not queued."""
    requests = RequestHistogram(http_histogram(CollectorRegistry()))
    requests.observe("/jobs", "POST", 200, 0.002)
    samples = next(iter(requests.histogram.collect())).samples
    assert [s.value for s in samples if s.name.endswith("_count")] == [1]


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


def test_task_events_count_per_series(tmp_path: Path) -> None:
    """Events are counted per series in one drain, deaths by reason, attempts observed each."""
    m, db = _metrics(tmp_path)
    try:
        m.on_tasks([TaskEvent("completed", "q", "t", 0, 0.5), TaskEvent("completed", "q", "t", 0, 2.0), TaskEvent("completed", "r", "t", 0, 1.0),
                    TaskEvent("dead", "q", "t", 0, reason="exhausted"), TaskEvent("dead", "q", "t", 0), TaskEvent("dead", "q", "t", 0)])
        m.on_tasks([TaskEvent("completed", "q", "t", 0, 4.0)])
        done = {s.labels["queue"]: s.value for s in next(iter(m.tasks["completed"].collect())).samples if s.name.endswith("_total")}
        assert done == {"q": 3, "r": 1}
        dead = {s.labels["reason"]: s.value for s in next(iter(m.dead.collect())).samples if s.name.endswith("_total")}
        assert dead == {"exhausted": 1, "unknown": 2}
        took = {(s.name, s.labels["queue"]): s.value for s in next(iter(m.attempts.collect())).samples if not s.name.endswith("_bucket")}
        assert took[("stdbmod_task_attempt_duration_seconds_count", "q")] == 3
        assert took[("stdbmod_task_attempt_duration_seconds_sum", "q")] == 6.5
    finally:
        db.close()
