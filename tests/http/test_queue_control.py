"""Queue control over real HTTP, with claimer processes: a queue's concurrency and rate limits
hold across every worker (checked from the commit log, the order the writer committed), and a
pause stops every claimer within one claim; a cancelled running job's worker is refused; eight
concurrent identical unique enqueues make one job."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from stdbmod import Database
from stdbmod.retry import Task, TaskStatus, create_retry_module

from .jobs import Jobs, fresh_queue
from .servers import Roles, Server, call, env, new_identity, start_server

WORKERS = 4
CLAIMER = Path(__file__).with_name("queue_claimer.py")
_task = create_retry_module().module.tables["task"].row_format  # a row image, either stored form


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = start_server(tmp_path / "data")
    yield s
    s.stop()


def _workers(server: Server, roles: Roles) -> list[str]:
    tokens = []
    for _ in range(WORKERS):
        ident, token = new_identity(server.base)
        assert call(server.base, roles.owner, "grant_worker", ident).status_code == 200
        tokens.append(token)
    return tokens


def _start(server: Server, roles: Roles, tokens: list[str], queue: str, hold: float, logs: Path) -> list[subprocess.Popen[str]]:
    logs.mkdir(exist_ok=True)
    return [
        subprocess.Popen(
            [sys.executable, str(CLAIMER), server.base, token, roles.admin, queue, f"w{i}", str(hold), str(logs / f"w{i}.jsonl")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
        )
        for i, token in enumerate(tokens)
    ]  # fmt: skip


def _finish(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err


def _lines(logs: Path) -> dict[str, list[dict[str, Any]]]:
    return {f.stem: [json.loads(line) for line in f.read_text().splitlines()] for f in sorted(logs.glob("*.jsonl"))}


def _claims_in_log(data: Path) -> list[tuple[int, int, str, str, dict[str, int]]]:
    """Each commit that moved a task to running or out of it: (offset, time in micros, reducer,
    queue, running tasks per queue after it), in commit order."""
    db = Database.open(data, create_retry_module().module)
    status: dict[int, Task] = {}
    out: list[tuple[int, int, str, str, dict[str, int]]] = []
    running: dict[str, int] = {}
    try:
        for record in db.iter_commit_log():
            for change in record.changes:
                if change.table != "task":
                    continue
                for raw in change.inserts:
                    task = _task.decode(raw)
                    before = status.get(task.id)
                    was = before is not None and before.status is TaskStatus.RUNNING
                    now = task.status is TaskStatus.RUNNING
                    status[task.id] = task
                    if was != now:
                        running[task.queue] = running.get(task.queue, 0) + (1 if now else -1)
                        out.append((record.offset, record.timestamp, record.reducer if now else "release", task.queue, dict(running)))
    finally:
        db.close()
    return out


def test_concurrency_and_rate_limits_hold_across_claimer_processes(server: Server, tmp_path: Path) -> None:
    roles = Roles.create(server.base, server.owner_token())
    tokens = _workers(server, roles)
    narrow, slow = fresh_queue(), fresh_queue()
    with Jobs(server.base, roles.admin) as admin:
        admin.ok("POST", f"/queues/{narrow}/limits", {"concurrency": 2})
        shown = admin.ok("POST", f"/queues/{slow}/limits", {"rate_limit": 4, "rate_period_seconds": 1})
        assert (shown["rate_limit"], shown["rate_period_seconds"], shown["concurrency"]) == (4, 1, None)
        for _ in range(24):
            admin.enqueue("work", queue=narrow)
        for _ in range(12):
            admin.enqueue("work", queue=slow)
    procs = _start(server, roles, tokens, narrow, 0.05, tmp_path / "narrow") + _start(server, roles, tokens, slow, 0.0, tmp_path / "slow")
    _finish(procs)
    assert server.stop() == 0

    events = _claims_in_log(server.data)
    # concurrency: never more than 2 of the narrow queue running after any commit, and 2 reached
    peak = max(e[4].get(narrow, 0) for e in events)
    assert peak == 2, peak
    # rate: at most 4 claims of the slow queue in any window (t - 1 s, t]
    times = [t for _, t, reducer, queue, _ in events if queue == slow and reducer == "claim"]
    assert len(times) == 12
    for i, t in enumerate(times):
        assert sum(1 for u in times[: i + 1] if u > t - 1_000_000) <= 4, (i, times)
    # and the limits really stopped claims: the workers were told "nothing" while jobs waited
    narrow_logs = _lines(tmp_path / "narrow")
    assert sum(1 for lines in narrow_logs.values() for e in lines if not e["claimed"]) > WORKERS
    assert len({w for w, lines in narrow_logs.items() if any(e["claimed"] for e in lines)}) > 1


def test_pause_stops_every_claimer_within_one_claim(server: Server, tmp_path: Path) -> None:
    roles = Roles.create(server.base, server.owner_token())
    tokens = _workers(server, roles)
    queue = fresh_queue()
    logs = tmp_path / "logs"
    with Jobs(server.base, roles.admin) as admin:
        admin.ok("POST", "/jobs/enqueue_many", {"jobs": [{"job_type": "work", "queue": queue} for _ in range(400)]})
        procs = _start(server, roles, tokens, queue, 0.005, logs)

        def claims() -> dict[str, list[dict[str, Any]]]:
            return _lines(logs) if logs.exists() else {}

        deadline = time.monotonic() + 60
        while sum(e["claimed"] for lines in claims().values() for e in lines) < 20:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        paused = admin.ok("POST", f"/queues/{queue}/pause")
        paused_at = time.time()
        assert paused["paused"] is True and paused["counts"]["queued"] > 0
        # every claimer asks again and gets nothing
        while not all(any(e["at"] > paused_at and not e["claimed"] for e in lines) for lines in claims().values()) or len(claims()) < WORKERS:
            assert time.monotonic() < deadline + 60
            time.sleep(0.02)
        for lines in claims().values():
            after = [e for e in lines if e["at"] > paused_at]
            first_empty = next(i for i, e in enumerate(after) if not e["claimed"])
            assert first_empty <= 1  # at most the claim already on its way when the pause committed
            assert not any(e["claimed"] for e in after[first_empty:])
        held = admin.ok("GET", "/queues")
        mine = next(q for q in held["items"] if q["queue"] == queue)
        assert mine["paused"] and mine["counts"]["queued"] > 0 and mine["oldest_ready_age_seconds"] > 0
        admin.ok("POST", f"/queues/{queue}/resume")
        _finish(procs)
        final = next(q for q in admin.ok("GET", "/queues")["items"] if q["queue"] == queue)
        assert final["counts"]["completed"] == 400 and not final["paused"]
    assert server.stop() == 0

    # from the commit log: no task of the queue became running between the pause and the resume
    db = Database.open(server.data, create_retry_module().module)
    try:
        offsets = {r.reducer: r.offset for r in db.iter_commit_log() if r.reducer in ("pause_queue", "resume_queue")}
    finally:
        db.close()
    claimed_while_paused = [e for e in _claims_in_log(server.data) if e[2] != "release" and offsets["pause_queue"] < e[0] < offsets["resume_queue"]]
    assert claimed_while_paused == []


def test_a_cancelled_running_jobs_worker_is_refused(server: Server) -> None:
    roles = Roles.create(server.base, server.owner_token())
    queue = fresh_queue()
    with Jobs(server.base, roles.worker) as worker, Jobs(server.base, roles.admin) as admin:
        job = worker.enqueue("render", queue=queue, timeout_seconds=600)
        claimed = worker.claim(queue, lease_seconds=3600)["job"]
        assert claimed["lease_expires_at"] == claimed["claimed_at"] + 600_000  # the lease stops at the timeout
        cancelled = admin.ok("POST", f"/jobs/{job['id']}/cancel", {"reason": "customer left"})
        assert (cancelled["status"], cancelled["dead_reason"]) == ("dead", "cancelled")
        for action, body in (("heartbeat", {}), ("complete", {"result": 1}), ("fail", {"error": "x"})):
            r = worker.request("POST", f"/jobs/{job['id']}/{action}", body)
            assert r.status_code == 409 and r.json()["code"] == "cancelled", (action, r.text)
        history = admin.ok("GET", "/history", limit=1)["items"]
        assert (history[0]["task_id"], history[0]["outcome"], history[0]["error"]) == (job["id"], "cancelled", "customer left")
        # another worker's stale report is the ordinary 409
        other = worker.enqueue("render", queue=queue)
        worker.claim(queue)
        r = admin.request("POST", f"/jobs/{other['id']}/complete", {})
        assert r.status_code == 409 and r.json()["code"] == "stale_lease"


def test_eight_concurrent_identical_unique_enqueues_make_one_job(server: Server) -> None:
    roles = Roles.create(server.base, server.owner_token())
    queue = fresh_queue()
    body = {"job_type": "sync_account", "queue": queue, "payload": {"account": 42, "full": True},
            "unique": {"fields": ["job_type", "queue", "payload"], "period_seconds": 3600}}  # fmt: skip
    start = threading.Barrier(8)

    def enqueue(_: int) -> dict[str, Any]:
        with Jobs(server.base, roles.worker) as jobs:
            start.wait(30)
            answer: dict[str, Any] = jobs.ok("POST", "/jobs", body)
            return answer

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(enqueue, range(8)))
    assert len({a["id"] for a in answers}) == 1
    assert sorted(a["duplicate"] for a in answers) == [False] + [True] * 7
    with Jobs(server.base, roles.admin) as admin:
        assert admin.ok("GET", "/jobs", queue=queue)["total"] == 1
        # the same payload with its keys in another order is the same job; another payload is not
        again = admin.ok("POST", "/jobs", {**body, "payload": {"full": True, "account": 42}})
        assert again["duplicate"] is True and again["id"] == answers[0]["id"]
        other = admin.ok("POST", "/jobs", {**body, "payload": {"account": 43, "full": True}})
        assert other["duplicate"] is False
        plain = admin.ok("POST", "/jobs", {"job_type": "sync_account", "queue": queue})
        assert "duplicate" not in plain  # seed 000's answer, unchanged without `unique`
        bad = admin.request("POST", "/jobs", {**body, "unique": {"fields": ["colour"]}})
        assert bad.status_code == 400 and "unique.fields" in bad.json()["error"]
