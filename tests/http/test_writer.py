"""The write path seen through HTTP (a server in a thread of the test, on a loopback port, so the
test can hold the writer and drive the clock): concurrent requests share one commit, a failing
call aborts only itself, reads never wait for the writer, and an expired lease makes its worker
stale."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from stdbmod import Database, ManualClock, Module, ReducerContext, SenderError
from stdbmod.http import SigningKey, create_app
from stdbmod.retry import create_retry_module, enqueue_in

from .servers import ThreadServer, bearer

GATE = threading.Event()
ENTERED = threading.Event()


def _module() -> Module:
    mod = Module("slow")
    mod.include(create_retry_module().module)

    @mod.reducer
    def block(ctx: ReducerContext) -> None:
        """Holds the writer until the test opens the gate."""
        ENTERED.set()
        GATE.wait(30)

    @mod.reducer
    def enqueue_then_refuse(ctx: ReducerContext, job_type: str) -> None:
        enqueue_in(ctx, job_type)
        raise SenderError("changed my mind")

    return mod


@dataclass
class Env:
    db: Database
    clock: ManualClock
    base: str
    tokens: dict[str, str]
    batches: list[int]

    def h(self, who: str) -> dict[str, str]:
        return bearer(self.tokens[who])

    def writer_queue(self) -> int:
        return self.db._writer._queue.qsize()


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    key = SigningKey.generate()
    claims = {who: key.claims(who) for who in ("owner", "worker", "worker2", "plain")}
    clock = ManualClock()
    db = Database.create(tmp_path / "db", _module(), owner=claims["owner"].identity, clock=clock)
    for who in ("worker", "worker2"):
        db.call("grant_worker", claims[who].identity, sender=claims["owner"].identity)
    batches: list[int] = []
    run_batch = db._core.run_batch

    def spy(batch: list[tuple[Any, Future[Any]]], more: Callable[[], bool] | None) -> None:
        batches.append(len(batch))
        run_batch(batch, more)

    db._writer._run_batch = spy
    GATE.clear()
    ENTERED.clear()
    try:
        with ThreadServer(create_app(db, key=key, run_scheduler=False)) as server:
            yield Env(db, clock, server.base, {who: key.issue_token(c) for who, c in claims.items()}, batches)
    finally:
        GATE.set()
        db.close()


def _hold_writer(env: Env) -> threading.Thread:
    """Call `block` over HTTP from a thread; returns once the writer is inside it."""
    t = threading.Thread(target=lambda: httpx.post(f"{env.base}/v1/database/slow/call/block", json=[], headers=env.h("owner"), timeout=60))
    t.start()
    assert ENTERED.wait(30)
    return t


def _wait_for(cond: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


async def _post_all(base: str, requests: list[tuple[str, Any, dict[str, str]]]) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=httpx.Limits(max_connections=100)) as client:
        return await asyncio.gather(*(client.post(path, json=body, headers=h) for path, body, h in requests))


def test_concurrent_requests_share_one_commit_and_a_failure_aborts_only_itself(env: Env) -> None:
    blocker = _hold_writer(env)
    good = [("/api:job-retry/jobs", {"job_type": f"g{i}"}, env.h("worker")) for i in range(20)]
    refused = [("/api:job-retry/jobs", {"job_type": "p"}, env.h("plain")) for _ in range(3)]  # no role: NotAuthorized
    undone = [("/v1/database/slow/call/enqueue_then_refuse", ["u"], env.h("worker"))]  # writes, then refuses
    requests = good + refused + undone
    result: list[list[httpx.Response]] = []
    sender = threading.Thread(target=lambda: result.append(asyncio.run(_post_all(env.base, requests))))
    sender.start()
    _wait_for(lambda: env.writer_queue() >= len(requests))  # all of them wait behind `block`
    GATE.set()
    sender.join(60)
    blocker.join(60)
    responses = result[0]
    assert [r.status_code for r in responses] == [200] * 20 + [403] * 3 + [530]
    assert len(requests) in env.batches  # one batch, one commit, for all of them
    with env.db.read() as view:
        assert sorted(t.job_type for t in view.db.task.iter()) == sorted(f"g{i}" for i in range(20))


def test_reads_do_not_wait_behind_writes(env: Env) -> None:
    job = httpx.post(f"{env.base}/api:job-retry/jobs", json={"job_type": "r"}, headers=env.h("worker")).json()
    blocker = _hold_writer(env)
    try:
        with httpx.Client(base_url=env.base, timeout=10) as client:
            reads = [
                client.get("/api:job-retry/jobs", headers=env.h("owner")),
                client.get(f"/api:job-retry/jobs/{job['id']}", headers=env.h("worker")),
                client.get("/api:job-retry/dlq", headers=env.h("owner")),
                client.get("/api:job-retry/history", headers=env.h("owner")),
                client.get("/v1/database/slow/schema", headers=env.h("plain")),
                client.get("/v1/database/slow/logs", headers=env.h("owner")),
            ]
        assert [r.status_code for r in reads] == [200] * len(reads)
        assert reads[0].json()["total"] == 1
        assert blocker.is_alive() and not GATE.is_set()  # the writer was busy all along
    finally:
        GATE.set()
        blocker.join(30)


def test_an_expired_lease_makes_its_worker_stale(env: Env) -> None:
    jobs = f"{env.base}/api:job-retry/jobs"
    job = httpx.post(jobs, json={"job_type": "slow", "backoff_seconds": 0}, headers=env.h("worker")).json()
    first = httpx.post(f"{jobs}/claim", json={"worker_id": "a", "lease_seconds": 60}, headers=env.h("worker")).json()
    assert first["job"]["id"] == job["id"]
    # while the lease holds, nobody else gets the job
    assert httpx.post(f"{jobs}/claim", json={"worker_id": "b"}, headers=env.h("worker2")).json() == {"claimed": False}
    env.clock.advance(59)
    env.db.run_due()
    assert httpx.post(f"{jobs}/claim", json={"worker_id": "b"}, headers=env.h("worker2")).json() == {"claimed": False}
    env.clock.advance(2)
    env.db.run_due()  # the reaper returns the job to the queue, due at once (backoff 0)
    second = httpx.post(f"{jobs}/claim", json={"worker_id": "b"}, headers=env.h("worker2")).json()
    assert second["claimed"] and second["job"]["attempts"] == 2
    for path, body in (("complete", {"result": 1}), ("fail", {"error": "late"}), ("heartbeat", {})):
        r = httpx.post(f"{jobs}/{job['id']}/{path}", json=body, headers=env.h("worker"))
        assert r.status_code == 409 and "lease" in r.json()["error"]
    done = httpx.post(f"{jobs}/{job['id']}/complete", json={"result": 2}, headers=env.h("worker2"))
    assert done.status_code == 200 and done.json()["result"] == 2
