"""What a job and a history entry say over HTTP, field by field, in every state a job can be in.

A story under a manual clock: each step happens at its own instant and every option has its own
value, so a field showing another field's value (one time copied into another, a lease holder
left out, a start that is its finish) differs from what the stored row says and from what the
story says. Every job a route answers with, and the same job read back (GET /jobs/{id}, the list,
the dead-letter tier), is compared with the stored row; the times also with the story's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stdbmod import Module, Timestamp
from stdbmod.retry import Attempt, HandlerContext, RetryableError, Task, create_retry_module

from .clocked import Clocked, clocked_server
from .jobs import EXTRA_FIELDS, SEED_FIELDS

TIMES = ("created_at", "updated_at", "run_after", "claimed_at", "last_attempted_at", "completed_at", "lease_expires_at", "finished_at")


def _module() -> Module:
    rm = create_retry_module()

    @rm.handler("flaky")
    def flaky(ctx: HandlerContext, payload: Any) -> None:
        raise RetryableError(f"not yet ({payload['n']})")

    mod = Module("render")
    mod.include(rm.module)
    return mod


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Clocked]:
    with clocked_server(tmp_path / "db", _module()) as s:
        yield s


def _ms(t: Timestamp | None) -> int | None:
    return None if t is None else t.micros // 1000


def _shown(task: Task) -> dict[str, Any]:
    """What seed 000's job object says about a stored task: every column, times in epoch ms."""
    return {
        "id": task.id,
        "created_at": _ms(task.created_at),
        "updated_at": _ms(task.updated_at),
        "queue": task.queue,
        "job_type": task.job_type,
        "payload": task.payload,
        "status": task.status.value,
        "attempts": task.attempts,
        "max_attempts": task.max_attempts,
        "backoff_seconds": task.backoff_seconds,
        "run_after": _ms(task.run_after),
        "claimed_at": _ms(task.claimed_at),
        "claimed_by": task.claimed_by,
        "last_attempted_at": _ms(task.last_attempted_at),
        "last_error": task.last_error,
        "completed_at": _ms(task.completed_at),
        "result": task.result,
        "dead_reason": None if task.dead_reason is None else task.dead_reason.value,
        "priority": task.priority,
        "lease_expires_at": _ms(task.lease_expires_at),
        "lease_holder": None if task.lease_holder is None else task.lease_holder.to_hex(),
        "idempotency_key": task.idempotency_key,
        "finished_at": _ms(task.finished_at),
        "snoozes": task.snoozes,
        "max_backoff_seconds": task.max_backoff_seconds,
        "backoff_jitter": task.backoff_jitter,
        "error_fingerprint": task.error_fingerprint,
        "triage_hold": task.triage_hold,
        "recurring_id": task.recurring_id,
    }


def _shown_attempt(row: Attempt) -> dict[str, Any]:
    return {
        "id": row.id,
        "task_id": row.task_id,
        "job_type": row.job_type,
        "attempt": row.attempt,
        "outcome": row.outcome.value,
        "error": row.error,
        "worker": row.worker,
        "started_at": _ms(row.started_at),
        "finished_at": _ms(row.finished_at),
    }


class Story:
    def __init__(self, s: Clocked) -> None:
        self.s = s
        self.t0 = s.clock.now().micros // 1000
        self.admin, self.worker, self.worker2 = s.jobs("owner"), s.jobs("worker"), s.jobs("worker2")

    def close(self) -> None:
        for j in (self.admin, self.worker, self.worker2):
            j.close()

    def at(self, seconds: float) -> int:
        """The story's instant `seconds` after its start, in epoch ms (as the API shows times)."""
        return self.t0 + int(seconds * 1000)

    def go(self, seconds: float) -> None:
        """Move the clock to `seconds` after the start."""
        self.s.clock.set(Timestamp((self.t0 + int(seconds * 1000)) * 1000))

    def stored(self, job_id: int) -> dict[str, Any]:
        with self.s.db.read() as v:
            return _shown(v.db.task.id.find(job_id))

    def check(self, job: dict[str, Any], **story: Any) -> dict[str, Any]:
        """`job` (a route's answer) shows the stored row in every field, reads back the same
        wherever it is listed, and says what the story says (`story`: field -> value; the time
        fields not named must be None)."""
        stored = self.stored(job["id"])
        assert set(job) == SEED_FIELDS | EXTRA_FIELDS == set(stored), "a field of the job object that _shown does not check"
        assert job == stored
        assert self.admin.ok("GET", f"/jobs/{job['id']}") == job
        assert self.worker.ok("GET", f"/jobs/{job['id']}") == job
        listed = self.admin.ok("GET", "/jobs", queue=job["queue"], per_page=200)["items"]
        assert [j for j in listed if j["id"] == job["id"]] == [job]
        dead = self.admin.ok("GET", "/dlq", queue=job["queue"], per_page=200)["items"]
        assert [j for j in dead if j["id"] == job["id"]] == ([job] if job["status"] == "dead" else [])
        expected_times = {t: story.pop(t, None) for t in TIMES}
        assert {t: job[t] for t in TIMES} == expected_times
        assert {k: job[k] for k in story} == story
        return job

    def history(self) -> list[dict[str, Any]]:
        """The history as the route shows it, each entry checked against its stored row."""
        items: list[dict[str, Any]] = self.admin.ok("GET", "/history")["items"]
        with self.s.db.read() as v:
            stored = [_shown_attempt(a) for a in v.db.attempt.iter()]
        assert items == list(reversed(stored))  # newest first
        return items


@pytest.fixture
def story(server: Clocked) -> Iterator[Story]:
    st = Story(server)
    yield st
    st.close()


def test_a_worker_job_in_every_state(story: Story, server: Clocked) -> None:
    worker_hex, worker2_hex = server.identities["worker"].to_hex(), server.identities["worker2"].to_hex()
    fixed = {"queue": "mail", "job_type": "email", "payload": {"to": 1}, "max_attempts": 2, "backoff_seconds": 11, "priority": 7,
             "idempotency_key": "order-1", "result": None, "max_backoff_seconds": 50, "backoff_jitter": 0.0, "snoozes": 0,
             "recurring_id": None}

    # queued, due in 5 s
    job = story.worker.enqueue("email", queue="mail", payload={"to": 1}, max_attempts=2, backoff_seconds=11, priority=7,
                               idempotency_key="order-1", run_after=story.at(5), max_backoff_seconds=50)
    jid = job["id"]
    story.check(job, created_at=story.at(0), updated_at=story.at(0), run_after=story.at(5), status="queued", attempts=0,
                claimed_by=None, lease_holder=None, last_error=None, dead_reason=None, **fixed)

    # running with a lease
    story.go(7)
    claimed = story.worker.claim("mail", "w-1", lease_seconds=60)
    assert claimed["claimed"] is True
    story.check(claimed["job"], created_at=story.at(0), updated_at=story.at(7), run_after=story.at(5), claimed_at=story.at(7),
                last_attempted_at=story.at(7), lease_expires_at=story.at(67), status="running", attempts=1, claimed_by="w-1",
                lease_holder=worker_hex, last_error=None, **fixed)

    # the lease extended
    story.go(10)
    beat = story.worker.ok("POST", f"/jobs/{jid}/heartbeat", {"lease_seconds": 100})
    story.check(beat, created_at=story.at(0), updated_at=story.at(10), run_after=story.at(5), claimed_at=story.at(7),
                last_attempted_at=story.at(7), lease_expires_at=story.at(110), status="running", lease_holder=worker_hex, **fixed)

    # failed: queued again after the backoff, the lease gone, the claim kept for audit
    story.go(14)
    failed = story.worker.ok("POST", f"/jobs/{jid}/fail", {"error": "boom-1"})
    story.check(failed, created_at=story.at(0), updated_at=story.at(14), run_after=story.at(25), claimed_at=story.at(7),
                last_attempted_at=story.at(7), status="queued", attempts=1, claimed_by="w-1", lease_holder=None, last_error="boom-1",
                **fixed)

    # claimed again by another worker, then out of attempts: dead
    story.go(26)
    again = story.worker2.claim("mail", "w-2", lease_seconds=30)["job"]
    story.check(again, created_at=story.at(0), updated_at=story.at(26), run_after=story.at(25), claimed_at=story.at(26),
                last_attempted_at=story.at(26), lease_expires_at=story.at(56), status="running", attempts=2, claimed_by="w-2",
                lease_holder=worker2_hex, last_error="boom-1", **fixed)
    story.go(29)
    dead = story.worker2.ok("POST", f"/jobs/{jid}/fail", {"error": "boom-2"})
    story.check(dead, created_at=story.at(0), updated_at=story.at(29), run_after=story.at(25), claimed_at=story.at(26),
                last_attempted_at=story.at(26), finished_at=story.at(29), status="dead", dead_reason="exhausted", attempts=2,
                claimed_by="w-2", lease_holder=None, last_error="boom-2", **fixed)

    # requeued: a fresh start, due now
    story.go(31)
    requeued = story.admin.ok("POST", f"/dlq/{jid}/requeue")
    story.check(requeued, created_at=story.at(0), updated_at=story.at(31), run_after=story.at(31), claimed_at=story.at(26),
                last_attempted_at=story.at(26), status="queued", dead_reason=None, attempts=0, last_error="boom-2", **fixed)

    # completed, with the default lease (300 s) while it ran
    story.go(32)
    third = story.worker.claim("mail", "w-3")["job"]
    assert (third["claimed_at"], third["lease_expires_at"]) == (story.at(32), story.at(332))
    story.go(40)
    done = story.worker.ok("POST", f"/jobs/{jid}/complete", {"result": {"sent": True}})
    story.check(done, created_at=story.at(0), updated_at=story.at(40), run_after=story.at(31), claimed_at=story.at(32),
                last_attempted_at=story.at(32), completed_at=story.at(40), finished_at=story.at(40), status="completed",
                attempts=1, claimed_by="w-3", lease_holder=None, **{**fixed, "result": {"sent": True}})

    # the history: each attempt from its start to its finish
    assert [(h["task_id"], h["job_type"], h["attempt"], h["outcome"], h["error"], h["worker"], h["started_at"], h["finished_at"])
            for h in story.history()] == [
        (jid, "email", 1, "completed", None, "w-3", story.at(32), story.at(40)),
        (jid, "email", 2, "failed", "boom-2", "w-2", story.at(26), story.at(29)),
        (jid, "email", 1, "failed", "boom-1", "w-1", story.at(7), story.at(14)),
    ]


def test_a_cancelled_job(story: Story) -> None:
    job = story.worker.enqueue("report", queue="reports", payload=[1, 2], max_attempts=4, backoff_seconds=3, priority=-2)
    story.go(3)
    cancelled = story.admin.ok("POST", f"/jobs/{job['id']}/cancel", {"reason": "not needed"})
    story.check(cancelled, created_at=story.at(0), updated_at=story.at(3), run_after=story.at(0), finished_at=story.at(3),
                status="dead", dead_reason="cancelled", last_error="not needed", attempts=0, claimed_by=None, lease_holder=None,
                payload=[1, 2], max_attempts=4, backoff_seconds=3, priority=-2)
    assert story.history() == []  # it never ran


def test_a_handlers_job_shows_its_attempts_without_a_claim(story: Story, server: Clocked) -> None:
    """An in-module attempt sets last_attempted_at, never claimed_at or a lease."""
    job = story.worker.enqueue("flaky", queue="inside", payload={"n": 1}, max_attempts=2, backoff_seconds=20)
    story.check(job, created_at=story.at(0), updated_at=story.at(0), run_after=story.at(0), status="queued", attempts=0)
    story.go(2)
    assert server.db.run_due() == 1  # the first attempt (due since 0) runs at 2
    retried = story.admin.ok("GET", f"/jobs/{job['id']}")
    story.check(retried, created_at=story.at(0), updated_at=story.at(2), run_after=story.at(22), last_attempted_at=story.at(2),
                status="queued", attempts=1, claimed_by=None, lease_holder=None, last_error="not yet (1)")
    story.go(25)
    assert server.db.run_due() == 1
    dead = story.admin.ok("GET", f"/jobs/{job['id']}")
    story.check(dead, created_at=story.at(0), updated_at=story.at(25), run_after=story.at(22), last_attempted_at=story.at(25),
                finished_at=story.at(25), status="dead", dead_reason="exhausted", attempts=2, claimed_by=None)
    assert [(h["attempt"], h["worker"], h["started_at"], h["finished_at"]) for h in story.history()] == [
        (2, "handler", story.at(25), story.at(25)),
        (1, "handler", story.at(2), story.at(2)),
    ]


def test_batch_routes_render_each_job_as_stored(story: Story, server: Clocked) -> None:
    made = story.worker.ok("POST", "/jobs/enqueue_many", {"jobs": [
        {"job_type": "a", "queue": "batch", "payload": 1, "priority": 1, "run_after": story.at(1)},
        {"job_type": "b", "queue": "batch", "payload": 2, "max_attempts": 9, "backoff_seconds": 4, "idempotency_key": "b-1",
         "max_backoff_seconds": 6, "backoff_jitter": 0.25},
    ]})["jobs"]
    story.check(made[0], created_at=story.at(0), updated_at=story.at(0), run_after=story.at(1), job_type="a", payload=1, priority=1)
    story.check(made[1], created_at=story.at(0), updated_at=story.at(0), run_after=story.at(0), job_type="b", max_attempts=9,
                backoff_seconds=4, idempotency_key="b-1", max_backoff_seconds=6, backoff_jitter=0.25)
    story.go(2)
    got = story.worker.ok("POST", "/jobs/claim_many", {"limit": 5, "queue": "batch", "worker_id": "wb", "lease_seconds": 45})["jobs"]
    assert [j["job_type"] for j in got] == ["a", "b"]
    for j, run_after in zip(got, (story.at(1), story.at(0)), strict=True):
        story.check(j, created_at=story.at(0), updated_at=story.at(2), run_after=run_after, claimed_at=story.at(2),
                    last_attempted_at=story.at(2), lease_expires_at=story.at(47), status="running", claimed_by="wb",
                    lease_holder=server.identities["worker"].to_hex())
    story.go(6)
    done = story.worker.ok("POST", "/jobs/complete_many", {"jobs": [{"id": got[0]["id"], "result": "r-a"}, {"id": got[1]["id"]}]})["jobs"]
    for j, run_after, result in zip(done, (story.at(1), story.at(0)), ("r-a", None), strict=True):
        story.check(j, created_at=story.at(0), updated_at=story.at(6), run_after=run_after, claimed_at=story.at(2),
                    last_attempted_at=story.at(2), completed_at=story.at(6), finished_at=story.at(6), status="completed",
                    result=result, lease_holder=None)
