"""Worker processes (`stdbmod worker`) against real servers on loopback:

- 4 processes x 8 slots on 2,000 jobs (sync and async handlers): every job completed, none twice,
  and the commit log agrees;
- the server SIGKILLed and restarted mid-run: the workers reconnect by themselves, nothing is lost
  (the at-least-once reruns are counted and shown);
- SIGTERM mid-job: the job finishes within the grace, or is left to its lease;
- a stale worker (SIGSTOP past its lease, SIGCONT) is refused and does not complete twice.

The first two use a `stdbmod serve` subprocess (the real clock); the others the in-process server
whose clock the test moves. Nothing sleeps for time to pass: each wait is on a condition.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from stdbmod import Database
from stdbmod.client import Client, ClientError, NewJob
from stdbmod.retry import default_module
from tests.http.servers import Server, start_server
from tests.reliability.invariants import TransitionChecker, retry_invariants

from .conftest import World
from .procs import Files, WorkerProc, wait_for


@pytest.fixture
def files(tmp_path: Path) -> Files:
    return Files(tmp_path / "runs.txt", tmp_path / "gate")


def _worker_token(server: Server) -> str:
    with Client(server.base, server.owner_token()) as owner:
        fresh = owner.new_identity()
        owner.grant_worker(fresh.identity)
    return fresh.token


def _check_log(data: Path, jobs: int) -> TransitionChecker:
    """The commit log of the stopped server: every change a legal transition, `jobs` completions."""
    with Database.open(data, default_module) as db:
        checker = TransitionChecker()
        assert checker.feed(db) == []
        assert retry_invariants(db) == [] and db.check_integrity() == []
        with db.read() as v:
            statuses = Counter(t.status.value for t in v.db.task.iter())
    assert statuses == {"completed": jobs}, statuses
    assert checker.completions == jobs  # each task completed exactly once, in commit order
    return checker


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = start_server(tmp_path / "data")
    yield s
    s.stop()


def _enqueue(server: Server, token: str, n: int) -> set[int]:
    ids: set[int] = set()
    with Client(server.base, token) as c:
        for start in range(0, n, 1000):
            batch = [NewJob("sync_job" if i % 2 else "async_job", {"n": i}) for i in range(start, min(n, start + 1000))]
            ids |= {j.id for j in c.enqueue_many(batch)}
    return ids


def test_four_workers_by_eight_slots_complete_2000_jobs_once_each(server: Server, files: Files, tmp_path: Path) -> None:
    token = _worker_token(server)
    ids = _enqueue(server, token, 2000)
    workers = [WorkerProc(server.base, token, files, tmp_path / f"w{i}.log", "--concurrency", "8", "--burst", "--worker-id", f"w{i}")
               for i in range(4)]
    try:
        assert [w.wait(600) for w in workers] == [0, 0, 0, 0], [w.log.read_text()[-2000:] for w in workers]
    finally:
        for w in workers:
            w.kill()
    outcomes = sum((w.outcomes() for w in workers), Counter())
    assert outcomes == {"completed": 2000}, outcomes
    runs = files.runs_seen()
    assert sorted(job for job, _, _ in runs) == sorted(ids)  # every job ran, none twice
    assert {attempt for _, attempt, _ in runs} == {1}
    assert len({by for _, _, by in runs}) == 4  # all four took part
    server.stop()
    checker = _check_log(server.data, 2000)
    assert checker.reruns == 0


def test_the_server_killed_and_restarted_mid_run_loses_nothing(server: Server, files: Files, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    token = _worker_token(server)
    jobs = 600
    ids = _enqueue(server, token, jobs)
    # Short leases, so that claims whose answers died with the server come back soon.
    workers = [WorkerProc(server.base, token, files, tmp_path / f"w{i}.log", "--concurrency", "8", "--lease", "5", "--worker-id", f"w{i}")
               for i in range(2)]
    restarted = server
    try:
        wait_for(lambda: len(files.runs_seen()) >= jobs // 4, "a quarter of the jobs to run")
        server.stop(signal.SIGKILL)
        done_before = len(files.runs_seen())
        restarted = start_server(server.data, port=server.port)
        wait_for(lambda: all(w.said("the server answers again") for w in workers), "both workers to reconnect")

        def all_completed() -> bool:
            try:
                with Client(restarted.base, restarted.owner_token()) as c:
                    return c.list_jobs("completed", per_page=1).total == jobs
            except ClientError:
                return False

        wait_for(all_completed, "every job to complete", deadline=300)
        for w in workers:
            w.signal(signal.SIGTERM)
        assert [w.wait() for w in workers] == [0, 0]
    finally:
        for w in workers:
            w.kill()
        restarted.stop()
    assert all(w.said("the server did not answer") for w in workers)
    runs = files.runs_seen()
    assert {job for job, _, _ in runs} == ids  # nothing lost
    checker = _check_log(server.data, jobs)
    # At least once: a handler runs again only after a later claim of its job (its report died
    # with the server), so handler reruns never exceed the later attempts the log shows; a
    # claim whose answer died with the server is a later attempt with no second run.
    reruns = len(runs) - jobs
    assert 0 <= reruns <= checker.reruns
    with capsys.disabled():
        print(f"\n  kill -9 mid-run: {jobs} jobs, {done_before} runs before the kill, {len(runs)} runs in all: "
              f"{reruns} reruns ({checker.reruns} later attempts in the commit log), every job completed once")


# --- the in-process server, its clock in the test's hand --------------------------------------------


@pytest.mark.parametrize("job_type", ["gate", "gate_async"])
def test_sigterm_mid_job_finishes_within_the_grace(world: World, files: Files, tmp_path: Path, job_type: str) -> None:
    with world.client("worker") as c:
        job = c.enqueue(job_type)
        waiting = c.enqueue(job_type)
    w = WorkerProc(world.base, world.tokens["worker"], files, tmp_path / "w.log", "--concurrency", "1", "--grace", "60")
    try:
        wait_for(lambda: len(files.runs_seen()) == 1, "the job to start")
        w.signal(signal.SIGTERM)
        wait_for(lambda: w.said("SIGTERM: stopping"), "the worker to see the signal")
        files.open_gate()
        assert w.wait() == 0
    finally:
        w.kill()
    assert world.task(job.id).status.value == "completed"
    assert world.task(waiting.id).status.value == "queued"  # no claim after the signal
    assert w.outcomes() == {"completed": 1}


@pytest.mark.parametrize("job_type", ["gate", "gate_async"])
def test_sigterm_past_the_grace_leaves_the_job_to_its_lease(world: World, files: Files, tmp_path: Path, job_type: str) -> None:
    with world.client("worker") as c:
        job = c.enqueue(job_type, max_attempts=2)
    w = WorkerProc(world.base, world.tokens["worker"], files, tmp_path / "w.log", "--grace", "0.5", "--lease", "30")
    try:
        wait_for(lambda: len(files.runs_seen()) == 1, "the job to start")
        w.signal(signal.SIGTERM)
        assert w.wait() == 0  # the gate never opens: the grace ends it
    finally:
        w.kill()
    assert w.outcomes() == {"unfinished": 1}
    assert world.task(job.id).status.value == "running"  # nothing reported
    world.expire(31)
    t = world.task(job.id)
    assert t.status.value == "queued" and t.attempts == 1 and "lease expired" in t.last_error


@pytest.mark.parametrize("job_type", ["gate", "gate_async"])
def test_a_stale_worker_is_refused_and_does_not_complete_twice(world: World, files: Files, tmp_path: Path, job_type: str) -> None:
    """Both processes share one identity: only the attempt each sends fences the stale one."""
    with world.client("worker") as c:
        job = c.enqueue(job_type, backoff_seconds=0)
    token = world.tokens["worker"]
    # 60 s leases: the first heartbeat (at 20 s) comes long after the test has frozen the process,
    # so none can land between the clock's move and the sweep.
    stale = WorkerProc(world.base, token, files, tmp_path / "stale.log", "--lease", "60", "--worker-id", "stale")
    fresh: WorkerProc | None = None
    try:
        wait_for(lambda: len(files.runs_seen()) == 1, "the first attempt to start")
        stale.signal(signal.SIGSTOP)  # a long GC pause, a frozen VM...
        world.expire(61)  # ...past its lease: the sweep requeues the job
        assert world.task(job.id).status.value == "queued"
        fresh = WorkerProc(world.base, token, files, tmp_path / "fresh.log", "--lease", "60", "--worker-id", "fresh")
        wait_for(lambda: len(files.runs_seen()) == 2, "the second attempt to start")
        stale.signal(signal.SIGCONT)
        files.open_gate()  # both handlers return now
        wait_for(lambda: world.task(job.id).status.value == "completed", "the completion")
        wait_for(lambda: stale.outcomes() == {"abandoned": 1}, "the stale worker to give the job up")
        for w in (stale, fresh):
            w.signal(signal.SIGTERM)
            assert w.wait() == 0
    finally:
        stale.kill()
        if fresh is not None:
            fresh.kill()
    assert fresh.outcomes() == {"completed": 1}
    assert files.runs_seen() == [(job.id, 1, "stale"), (job.id, 2, "fresh")]
    t = world.task(job.id)
    assert t.result == {"by": "fresh"} and t.attempts == 2
    checker = TransitionChecker()
    assert checker.feed(world.db) == [] and checker.completions == 1
    with world.db.read() as v:
        outcomes = sorted((a.attempt, a.outcome.value) for a in v.db.attempt.iter())
    assert outcomes == [(1, "lease_expired"), (2, "completed")]
