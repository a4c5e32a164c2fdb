"""I/O handlers (`@rm.handler(job_type, io=True)`): claimed with a lease in one transaction, run
as a procedure outside the writer, the outcome committed in a second transaction fenced by the
attempt; a process killed mid-handler is reaped once by the lease sweep."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stdbmod import Database, Identity, ManualClock, SystemClock, TimeDuration, Timestamp
from stdbmod.retry import NewTask, Outcome, TaskStatus
from tests.retry.support import ADMIN

from . import io_module
from .io_module import app

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def db(tmp_path: Path, clock: ManualClock) -> Iterator[Database]:
    d = Database.create(tmp_path / "db", app, owner=ADMIN, clock=clock)
    yield d
    io_module.GATE.set()
    d.close()
    io_module.GATE.clear()
    io_module.ENTERED.clear()


def _enqueue(db: Database, job_type: str, payload: Any) -> int:
    return db.call("enqueue", NewTask(job_type, payload=payload), sender=ADMIN).id  # type: ignore[no-any-return]


def _task(db: Database, task_id: int) -> Any:
    with db.read() as view:
        return view.db.task.id.find(task_id)


def _history(db: Database, task_id: int) -> list[Outcome]:
    with db.read() as view:
        return [a.outcome for a in view.db.attempt.iter() if a.task_id == task_id]


def _receipts(db: Database) -> list[str]:
    with db.read() as view:
        return [r.text for r in view.db.receipt.iter()]


def test_claim_run_outside_then_the_outcome_with_its_writes(db: Database) -> None:
    task_id = _enqueue(db, "charge", {"amount": 5})
    start = len(db.commit_log())
    assert db.run_due() == 2  # the attempt timer (the claim), then the io_attempt row (the procedure)
    task = _task(db, task_id)
    assert (task.status, task.result, task.attempts, task.lease_expires_at) == (TaskStatus.COMPLETED, "paid", 1, None)
    assert _receipts(db) == ["paid 5"] and _history(db, task_id) == [Outcome.COMPLETED]
    records = db.commit_log()[start:]
    assert [(r.kind, r.reducer) for r in records] == [("scheduled", "run_attempt"), ("scheduled", "run_io_attempt"), ("procedure", "run_io_attempt")]
    claim = next(c for c in records[0].changes if c.table == "task")
    assert claim.inserts and Identity(records[2].sender) == db.identity
    assert [line.message for line in db.logs() if line.reducer == "run_io_attempt"] == ["charging 5"]


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server


def _logged(db: Database, text: str) -> bool:
    """Whether a recent database log line holds `text`, waiting (bounded) for it: the outcome's
    transaction runs on the procedure's thread, which joining the scheduler's does not wait for."""
    deadline = time.monotonic() + 30
    while not any(text in line.message for line in db.logs(last=5)):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _run_due_in_background(db: Database) -> threading.Thread:
    t = threading.Thread(target=db.run_due, daemon=True)
    t.start()
    return t


def test_a_handler_blocked_on_a_socket_while_other_calls_commit(db: Database, clock: ManualClock, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    task_id = _enqueue(db, "charge", {"amount": 7, "port": port})
    runner = _run_due_in_background(db)
    conn, _ = listener.accept()  # the handler is connected, blocked in recv(), outside the writer
    with conn:
        assert _task(db, task_id).status is TaskStatus.RUNNING
        for i in range(20):  # the writer is free: other calls commit meanwhile
            db.call("note", 1000 + i, f"n{i}", sender=ADMIN)
        assert runner.is_alive()
        conn.sendall(b"declined")  # a retryable failure: rolled into the outcome transaction
        runner.join(30)
    task = _task(db, task_id)
    assert (task.status, task.in_module, task.last_error) == (TaskStatus.QUEUED, True, "card declined")
    assert len(_receipts(db)) == 20 and _history(db, task_id) == [Outcome.FAILED]
    clock.advance(30)  # the backoff: the next attempt, given up this time
    runner = _run_due_in_background(db)
    conn, _ = listener.accept()
    with conn:
        conn.sendall(b"fraud")
        runner.join(30)
    task = _task(db, task_id)
    assert (task.status, task.dead_reason.value) == (TaskStatus.DEAD, "gave_up")
    assert _history(db, task_id) == [Outcome.FAILED, Outcome.GAVE_UP] and len(_receipts(db)) == 20


def test_an_outcome_after_the_lease_was_reaped_is_dropped(db: Database, clock: ManualClock) -> None:
    task_id = _enqueue(db, "gated", None)
    runner = _run_due_in_background(db)
    assert io_module.ENTERED.wait(30)  # the handler runs (not merely claimed): its outcome will come
    clock.advance(301)  # past the lease (the default, 300 s): the sweep reaps the attempt
    db.run_due()
    reaped = _task(db, task_id)
    assert (reaped.status, reaped.attempts) == (TaskStatus.QUEUED, 1) and _history(db, task_id) == [Outcome.LEASE_EXPIRED]
    io_module.GATE.set()  # the handler ends now: attempt 1 is no longer current
    runner.join(30)
    assert _logged(db, "attempt 1 ended after it was reaped, changed or timed out")
    assert _task(db, task_id).status is TaskStatus.QUEUED and _receipts(db) == []
    assert _history(db, task_id) == [Outcome.LEASE_EXPIRED]
    clock.advance(60)
    db.run_due()  # attempt 2 runs to the end
    assert _task(db, task_id).status is TaskStatus.COMPLETED and _receipts(db) == ["gated"]


def test_an_outcome_at_the_attempts_timeout_is_dropped_and_the_sweep_ends_it_as_a_timeout(db: Database, clock: ManualClock) -> None:
    """timeout_seconds bounds an I/O handler's attempt as a worker's: its lease stops at the
    deadline, and an outcome reaching the writer at the deadline, before the sweep, is dropped."""
    task_id = db.call("enqueue", NewTask("gated", timeout_seconds=10), sender=ADMIN).id
    runner = _run_due_in_background(db)
    assert io_module.ENTERED.wait(30)  # the handler runs (not merely claimed): its outcome will come
    running = _task(db, task_id)
    assert running.lease_expires_at == running.last_attempted_at + TimeDuration.from_seconds(10)  # not the 300 s lease
    clock.advance(10)  # the deadline (the scheduler's thread may fire the sweep there, or not yet)
    io_module.GATE.set()
    runner.join(30)
    assert _logged(db, "attempt 1 ended after it was reaped, changed or timed out")  # dropped either way
    db.run_due()  # the sweep, if it had not fired: the attempt ends as a timeout, retried after backoff
    assert (_task(db, task_id).status, _history(db, task_id), _receipts(db)) == (TaskStatus.QUEUED, [Outcome.TIMEOUT], [])


def test_a_process_killed_mid_handler_leaves_a_lease_the_sweep_reaps_once(tmp_path: Path) -> None:
    path, marker = tmp_path / "db", tmp_path / "attempts"
    Database.create(path, app, owner=ADMIN).close()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-m", "tests.retry.io_module", str(path), str(marker)], env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not (marker.exists() and marker.read_text()):
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    clock = ManualClock(Timestamp(SystemClock().now().micros + 31_000_000))  # past the 30 s lease
    with Database.open(path, app, clock=clock) as db:
        with db.read() as view:
            (task,) = list(view.db.task.iter())
        assert (task.status, task.claimed_by, task.attempts) == (TaskStatus.RUNNING, "handler", 1)
        db.run_due()  # the sweep reaps the dead attempt; its retry waits for the backoff
        assert _history(db, task.id) == [Outcome.LEASE_EXPIRED]
        db.run_due()
        assert _history(db, task.id) == [Outcome.LEASE_EXPIRED]  # once
        clock.advance(30)
        db.run_due()
        done = _task(db, task.id)
        assert (done.status, done.result, done.attempts) == (TaskStatus.COMPLETED, 2, 2)
        assert _history(db, task.id) == [Outcome.LEASE_EXPIRED, Outcome.COMPLETED]
    assert marker.read_text() == "attempt 1\nattempt 2\n"


def test_lease_seconds_is_for_io_handlers_and_bounded() -> None:
    from stdbmod.retry import InvalidArgument, create_retry_module

    rm = create_retry_module()
    with pytest.raises(InvalidArgument, match="lease_seconds is for io=True handlers"):
        rm.handler("x", lease_seconds=10)
    with pytest.raises(InvalidArgument):
        rm.handler("y", io=True, lease_seconds=0)


def _wait_for(cond: Any) -> None:
    deadline = time.monotonic() + 30
    while not cond():  # another thread's progress, not time passing
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_heartbeat_extends_the_lease_and_says_when_the_attempt_was_reaped(db: Database, clock: ManualClock) -> None:
    task_id = _enqueue(db, "beat", None)
    runner = _run_due_in_background(db)
    claimed_at = clock.now()
    _wait_for(lambda: _task(db, task_id).lease_expires_at == claimed_at + TimeDuration.from_seconds(120))
    clock.advance(121)
    db.run_due()  # the extended lease has ended: reaped
    assert _history(db, task_id) == [Outcome.LEASE_EXPIRED]
    io_module.GATE.set()
    runner.join(30)
    assert [line.message for line in db.logs() if line.message.startswith("heartbeats")] == ["heartbeats True False"]
    assert _history(db, task_id) == [Outcome.LEASE_EXPIRED]


def test_a_failing_on_success_write_fails_the_attempt_and_rolls_back_its_writes(db: Database) -> None:
    task_id = _enqueue(db, "bad_write", None)
    db.run_due()
    task = _task(db, task_id)
    assert task.status is TaskStatus.QUEUED and task.last_error.startswith("on_success failed:") and "the write breaks" in task.last_error
    assert _receipts(db) == ["before"]  # with_tx committed on its own; the outcome's write did not
    assert _history(db, task_id) == [Outcome.FAILED]
