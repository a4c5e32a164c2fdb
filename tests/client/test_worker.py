"""The worker in this process against a real server whose clock the test moves: the seed's story,
handler failures, concurrency and claim batches, heartbeats, lost leases, stopping, retries
through outages and idle backoff. Both handler kinds: sync (threads) and async (the loop)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from stdbmod.client import GiveUp, Job, Outcome, RetryIn, Snooze, Worker, WorkerStats, current_job
from stdbmod.client import runner as runner_module
from stdbmod.client.failures import MAX_HEAD, MAX_TRACEBACK, describe
from stdbmod.client.retrying import IdleBackoff
from stdbmod.client.waker import inserts_tasks, socket_url, wake_query

from .conftest import World

DEADLINE = 60.0
KINDS = ["sync", "async"]


def wait_for(cond: Callable[[], bool], what: str = "the condition") -> None:
    deadline = time.monotonic() + DEADLINE
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def handler(kind: str, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`fn` as a sync handler, or wrapped in an `async def`."""
    if kind == "sync":
        return fn

    async def run(payload: Any) -> Any:
        return fn(payload)

    return run


def gated(kind: str, gate: threading.Event, result: Any) -> Callable[[Any], Any]:
    """A handler that waits for `gate`, then returns `result`: blocking its thread, or awaiting."""

    def wait(_: Any) -> Any:
        return result if gate.wait(DEADLINE) else None

    async def wait_async(_: Any) -> Any:
        return result if await asyncio.to_thread(gate.wait, DEADLINE) else None

    return wait if kind == "sync" else wait_async


def in_background(worker: Worker, burst: bool = False) -> tuple[threading.Thread, list[WorkerStats]]:
    out: list[WorkerStats] = []
    t = threading.Thread(target=lambda: out.append(worker.run(burst=burst, handle_signals=False)), daemon=True)
    t.start()
    return t, out


@pytest.mark.parametrize("kind", KINDS)
def test_the_seed_story_through_the_sdk(world: World, kind: str) -> None:
    """30 s, 1 min, 2 min, 4 min, then dead: each retry runs when the server's clock says so."""
    with world.client("worker") as c:
        job = c.enqueue("send_welcome_email", {"user_id": 42}, max_attempts=5, backoff_seconds=30)
    worker = world.worker()
    seen: list[Any] = []

    def provider_down(payload: Any) -> Any:
        seen.append((payload, current_job().attempt))
        raise RuntimeError("provider 5xx")

    worker.register("send_welcome_email", handler(kind, provider_down))
    for attempt, delay in enumerate([30, 60, 120, 240], start=1):
        stats = worker.run(burst=True, handle_signals=False)
        assert (stats.claimed, stats.failed) == (1, 1)
        t = world.task(job.id)
        assert t.status.value == "queued" and t.attempts == attempt
        assert (t.run_after.micros - t.last_attempted_at.micros) // 1_000_000 == delay
        assert t.last_error.startswith("RuntimeError: provider 5xx\n\nTraceback")
        world.expire(delay - 1)
        assert worker.run(burst=True, handle_signals=False).claimed == 0  # not due yet
        world.expire(1)
    stats = worker.run(burst=True, handle_signals=False)
    assert stats.failed == 1
    t = world.task(job.id)
    assert t.status.value == "dead" and t.dead_reason.value == "exhausted" and t.attempts == 5
    assert seen == [({"user_id": 42}, n) for n in range(1, 6)]


@pytest.mark.parametrize("kind", KINDS)
def test_results_unknown_types_and_results_that_are_not_json(world: World, kind: str) -> None:
    with world.client("worker") as c:
        ok = c.enqueue("double", 21)
        nobody = c.enqueue("nobody_handles_this", max_attempts=1)
        bad = c.enqueue("not_json", max_attempts=1)
        huge = c.enqueue("huge", max_attempts=1)
    worker = world.worker()
    worker.register("double", handler(kind, lambda n: n * 2))
    worker.register("not_json", handler(kind, lambda _: object()))
    worker.register("huge", handler(kind, lambda _: 2**70))  # JSON, but past what the server stores
    stats = worker.run(burst=True, handle_signals=False)
    assert (stats.claimed, stats.completed, stats.failed) == (4, 1, 3)
    assert world.task(ok.id).result == 42
    assert "no handler for job type 'nobody_handles_this'" in world.task(nobody.id).last_error
    assert world.task(bad.id).last_error.startswith("TypeError: the handler's result is not JSON")
    assert world.task(huge.id).last_error.startswith("the server refused the result: 400")


def test_a_failure_reports_type_message_and_a_bounded_traceback() -> None:
    def deep(n: int) -> None:  # deep and other alternate, so Python does not fold the frames
        if n == 0:
            raise ValueError("x" * 50_000)
        other(n - 1)

    def other(n: int) -> None:
        deep(n)

    try:
        deep(200)
    except ValueError as e:
        text = describe(e)
    head, _, tb = text.partition("\n\n")
    assert head.startswith("ValueError: xxx") and len(head) == MAX_HEAD
    assert len(tb) <= MAX_TRACEBACK and tb.startswith("...\n  ") and tb.endswith("xxx...")
    assert tb.split("\n")[-1].startswith("ValueError: xxx")
    assert len(text) <= 10_000  # the server's limit on `error`
    assert "in deep" in tb  # the innermost frames are kept


@pytest.mark.parametrize("kind", KINDS)
def test_concurrency_slots_are_filled_with_claim_many_and_never_exceeded(world: World, kind: str) -> None:
    with world.client("worker") as c:
        c.enqueue_many([__import__("stdbmod.client", fromlist=["NewJob"]).NewJob("hold", i) for i in range(12)])
    gate = threading.Event()
    running: set[int] = set()
    peak = [0]
    lock = threading.Lock()

    def hold(i: int) -> int:
        with lock:
            running.add(i)
            peak[0] = max(peak[0], len(running))
        assert gate.wait(DEADLINE)
        with lock:
            running.discard(i)
        return i

    if kind == "async":
        async def hold_async(i: int) -> int:
            with lock:
                running.add(i)
                peak[0] = max(peak[0], len(running))
            while not gate.is_set():
                await asyncio.sleep(0.01)
            with lock:
                running.discard(i)
            return i

        fn: Callable[[Any], Any] = hold_async
    else:
        fn = hold
    worker = world.worker(concurrency=5)
    worker.register("hold", fn)
    requests: list[str] = []
    worker.transport = Spy(requests)
    t, out = in_background(worker, burst=True)
    wait_for(lambda: len(running) == 5, "five jobs running")
    with world.db.read() as v:
        assert sum(1 for x in v.db.task.iter() if x.status.value == "running") == 5  # the slots, no more claimed
    gate.set()
    t.join(DEADLINE)
    assert out[0].completed == 12 and peak[0] == 5
    assert requests[0] == "/api:job-retry/jobs/claim_many"


class Spy(httpx.AsyncHTTPTransport):
    """A real transport that writes down each request's path."""

    def __init__(self, paths: list[str], **kw: Any) -> None:
        super().__init__(**kw)
        self.paths = paths

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        return await super().handle_async_request(request)


@pytest.mark.parametrize("kind", KINDS)
def test_heartbeats_keep_the_lease_while_a_long_job_runs(world: World, kind: str) -> None:
    with world.client("worker") as c:
        job = c.enqueue("long")
    gate = threading.Event()
    worker = world.worker(lease_seconds=3)  # a heartbeat every second
    worker.register("long", gated(kind, gate, "done"))
    t, out = in_background(worker)
    wait_for(lambda: world.task(job.id).status.value == "running", "the claim")
    for _ in range(3):  # past the first lease's end, three times over
        world.clock.advance(2)
        now = world.clock.now().micros
        wait_for(lambda: world.task(job.id).lease_expires_at.micros == now + 3_000_000, "a heartbeat")  # noqa: B023 (waited for here)
        world.db.run_due()
        assert world.task(job.id).status.value == "running"
    gate.set()
    wait_for(lambda: world.task(job.id).status.value == "completed", "the completion")
    worker.stop()
    t.join(DEADLINE)
    t_ = world.task(job.id)
    assert t_.attempts == 1 and t_.result == "done" and out[0].completed == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_job_whose_lease_was_lost_is_abandoned_without_a_report(world: World, kind: str) -> None:
    with world.client("worker") as c:
        job = c.enqueue("stuck", max_attempts=3)
    noticed: list[bool] = []
    started: list[int] = []

    def stuck(_: Any) -> str:
        started.append(current_job().job.attempts)
        noticed.append(current_job().lease_lost.wait(DEADLINE))  # a sync handler may check
        return "too late"

    async def stuck_async(_: Any) -> str:
        started.append(current_job().job.attempts)
        try:
            await asyncio.sleep(DEADLINE)
        except asyncio.CancelledError:
            noticed.append(True)  # an async one is cancelled
            raise
        return "too late"

    worker = world.worker(lease_seconds=3)
    worker.register("stuck", stuck if kind == "sync" else stuck_async)
    worker.transport = held = HeldHeartbeats()
    t, out = in_background(worker)
    wait_for(lambda: world.task(job.id).status.value == "running", "the claim")
    held.hold()  # no heartbeat may land between the clock's move and the sweep
    world.expire(4)  # the lease ends on the server's clock: the sweep requeues the job
    held.release()
    assert world.task(job.id).status.value == "queued"
    wait_for(lambda: noticed == [True], "the worker to notice")
    world.expire(30)  # the retry's backoff
    wait_for(lambda: world.task(job.id).status.value == "running", "the claim again")
    assert world.task(job.id).attempts == 2
    # the claim is committed before its answer reaches the worker: a forced stop in between
    # cancels the claim's request, and the worker never holds that attempt
    wait_for(lambda: len(started) == 2, "the worker to start the second attempt")
    assert started == [1, 2]
    worker.stop()
    worker.stop()  # now: do not wait for the second attempt
    t.join(DEADLINE)
    assert out[0].abandoned == 1 and out[0].completed == 0 and out[0].unfinished == 1
    [lost] = [a for a in _history(world) if a.attempt == 1]
    assert lost.outcome.value == "lease_expired"  # the reaper's, not a report from the worker


class HeldHeartbeats(httpx.AsyncHTTPTransport):
    """A real transport whose heartbeats can be held: `hold()` returns once none is in flight and
    none can start until `release()`."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()
        self.lock = threading.Lock()
        self.inflight = 0

    def hold(self) -> None:
        with self.lock:
            self.gate.clear()
        wait_for(lambda: self.inflight == 0, "heartbeats in flight")

    def release(self) -> None:
        self.gate.set()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/heartbeat"):
            return await super().handle_async_request(request)
        while True:
            with self.lock:
                if self.gate.is_set():
                    self.inflight += 1
                    break
            await asyncio.to_thread(self.gate.wait, DEADLINE)
        try:
            return await super().handle_async_request(request)
        finally:
            with self.lock:
                self.inflight -= 1


def _history(world: World) -> list[Any]:
    with world.db.read() as v:
        return list(v.db.attempt.iter())


@pytest.mark.parametrize("kind", KINDS)
def test_stop_lets_running_jobs_finish_within_the_grace(world: World, kind: str) -> None:
    with world.client("worker") as c:
        first = c.enqueue("slow")
        second = c.enqueue("slow")
    gate = threading.Event()
    worker = world.worker(concurrency=1, grace_seconds=DEADLINE)
    worker.register("slow", gated(kind, gate, "finished"))
    t, out = in_background(worker)
    wait_for(lambda: world.task(first.id).status.value == "running", "the claim")
    worker.stop()
    gate.set()
    t.join(DEADLINE)
    assert not t.is_alive()
    assert world.task(first.id).status.value == "completed" and world.task(second.id).status.value == "queued"  # no more claims
    assert out[0].completed == 1 and out[0].claimed == 1


@pytest.mark.parametrize("kind", KINDS)
def test_past_the_grace_a_job_is_left_to_its_lease(world: World, kind: str) -> None:
    with world.client("worker") as c:
        job = c.enqueue("forever", max_attempts=2)
    gate = threading.Event()
    worker = world.worker(grace_seconds=0.2)
    worker.register("forever", gated(kind, gate, None))
    t, out = in_background(worker)
    wait_for(lambda: world.task(job.id).status.value == "running", "the claim")
    worker.stop()
    t.join(DEADLINE)
    gate.set()
    assert out[0].unfinished == 1 and world.task(job.id).status.value == "running"  # nothing reported
    world.expire(31)
    t_ = world.task(job.id)
    assert t_.status.value == "queued" and "lease expired" in t_.last_error  # retried after its lease


class Flaky(httpx.AsyncHTTPTransport):
    """No answer (or a 503) for the first requests; then the real server. Writes down when each
    request came."""

    def __init__(self, failures: int, mode: str = "connect") -> None:
        super().__init__()
        self.failures, self.mode = failures, mode
        self.times: list[float] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.times.append(time.monotonic())
        if len(self.times) <= self.failures:
            if self.mode == "503":
                return httpx.Response(503, json={"error": "storage failed"})
            raise httpx.ConnectError("connection refused", request=request)
        return await super().handle_async_request(request)


@pytest.mark.parametrize("mode", ["connect", "503"])
def test_while_the_server_is_away_requests_back_off_with_jitter_never_a_hot_loop(world: World, mode: str) -> None:
    with world.client("worker") as c:
        job = c.enqueue("x")
    worker = world.worker(retry_max_wait=0.4)
    worker.register("x", lambda _: "ok")
    worker.transport = flaky = Flaky(6, mode)
    stats = worker.run(burst=True, handle_signals=False)
    assert stats.completed == 1 and world.task(job.id).status.value == "completed"
    gaps = [b - a for a, b in zip(flaky.times, flaky.times[1:7])]
    # stamina: 0.1 s, 0.2 s, 0.4 s, then capped at 0.4 s, each plus up to 0.4 s of jitter
    for gap, least in zip(gaps, [0.1, 0.2, 0.4, 0.4, 0.4, 0.4]):
        assert gap >= least * 0.9, gaps


def test_a_report_whose_answer_was_lost_is_recognised_when_it_landed(world: World) -> None:
    """The complete reached the server, its answer did not: the retry is refused (409, the job is
    completed) and the worker checks the job to know the completion was its own."""

    class LoseAnswer(httpx.AsyncHTTPTransport):
        lost = 0

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            r = await super().handle_async_request(request)
            if request.url.path.endswith("/complete") and not self.lost:
                self.lost += 1
                await r.aread()
                raise httpx.ReadError("connection reset", request=request)
            return r

    with world.client("worker") as c:
        job = c.enqueue("x")
    worker = world.worker()
    worker.register("x", lambda _: "ok")
    worker.transport = LoseAnswer()
    stats = worker.run(burst=True, handle_signals=False)
    assert (stats.completed, stats.abandoned) == (1, 0)
    assert world.task(job.id).status.value == "completed"


def test_idle_polling_backs_off_up_to_its_cap(world: World) -> None:
    worker = world.worker(poll_max_seconds=0.4)
    worker.register("x", lambda _: None)
    paths: list[str] = []
    times: list[float] = []

    class Clocked(Spy):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            times.append(time.monotonic())
            return await super().handle_async_request(request)

    worker.transport = Clocked(paths)
    t, _ = in_background(worker)
    wait_for(lambda: len(times) >= 8, "eight polls")
    worker.stop()
    t.join(DEADLINE)
    gaps = [b - a for a, b in zip(times, times[1:8])]
    # each delay is drawn from the upper half of 0.1, 0.2, 0.4, 0.4 ... s
    for gap, upper in zip(gaps, [0.1, 0.2, 0.4, 0.4, 0.4, 0.4, 0.4]):
        assert gap >= upper / 2 * 0.9, gaps
    assert sum(gaps) >= 0.9


def test_queues_are_claimed_in_turn_and_other_queues_are_left_alone(world: World) -> None:
    with world.client("worker") as c:
        a = c.enqueue("x", queue="a")
        b = c.enqueue("x", queue="b")
        other = c.enqueue("x", queue="c")
    worker = world.worker(queues=["a", "b"])
    worker.register("x", lambda _: current_job().job.queue)
    assert worker.run(burst=True, handle_signals=False).completed == 2
    assert (world.task(a.id).result, world.task(b.id).result) == ("a", "b")
    assert world.task(other.id).status.value == "queued"
    everywhere = world.worker(queues=None)
    everywhere.register("x", lambda _: "any")
    assert everywhere.run(burst=True, handle_signals=False).completed == 1


def test_a_worker_without_the_role_stops_with_the_servers_message(world: World, caplog: pytest.LogCaptureFixture) -> None:
    worker = world.worker("plain")
    worker.register("x", lambda _: None)
    stats = worker.run(handle_signals=False)  # not burst: it stops by itself
    assert stats.claimed == 0
    assert any("claim refused: 403" in r.getMessage() and "worker role" in r.getMessage() for r in caplog.records)


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        Worker(concurrency=0)
    with pytest.raises(ValueError, match="queues"):
        Worker(queues="default")
    with pytest.raises(TypeError):
        Worker(concurency=3)  # a misspelt option is an error, not ignored
    w = Worker()
    w.register("x", lambda _: None)
    with pytest.raises(ValueError, match="already has a handler"):
        w.register("x", lambda _: None)
    with pytest.raises(ValueError, match="no handlers"):
        Worker().run(handle_signals=False)


def test_outcomes_are_named(world: World) -> None:
    assert [o.value for o in Outcome] == ["completed", "failed", "abandoned", "unfinished", "snoozed"]
    assert isinstance(Job, type)


class Patient(IdleBackoff):
    """Idle polls that wait the whole `poll_max_seconds` from the first: only a wake-up from the
    server can start a job soon."""

    def __init__(self, max_wait: float, first: float = 0.1) -> None:
        super().__init__(max_wait, first=max_wait)


@pytest.mark.parametrize("queues", [["default"], None])
def test_an_idle_worker_is_woken_by_the_servers_subscription_stream(world: World, monkeypatch: pytest.MonkeyPatch, queues: Any) -> None:
    monkeypatch.setattr(runner_module, "IdleBackoff", Patient)
    worker = world.worker(poll_max_seconds=600, queues=queues)  # a poll would come 300 to 600 s later
    ran = threading.Event()
    worker.register("ping", lambda _: ran.set())
    t, stats = in_background(worker)
    try:
        wait_for(lambda: worker.woken_by_server, "the worker's subscription")
        with world.client("owner") as c:
            c.enqueue("ping", {"n": 1}, queue="other")  # not its queue (with a list): no wake-up claims it
            job = c.enqueue("ping", {"n": 2})
            assert ran.wait(DEADLINE / 2), "the enqueue did not wake the idle worker"
            wait_for(lambda: world.task(job.id).status == "completed", "the completion")
            if queues is not None:
                assert c.get(job.id - 1).status == "queued"
    finally:
        worker.stop()
        t.join(DEADLINE)
    assert stats[0].completed == (1 if queues is not None else 2)


def test_the_wake_query_and_messages() -> None:
    assert wake_query(41, ["a", "o'b"]) == (
        "SELECT * FROM task WHERE id > 41 AND status = 'queued' AND in_module = false AND (queue = 'a' OR queue = 'o''b')"
    )
    assert socket_url("https://h:1/", "retry") == "wss://h:1/v1/database/retry/subscribe"
    assert socket_url("http://h", "db") == "ws://h/v1/database/db/subscribe"
    inserted = {"TransactionUpdate": {"status": {"Committed": {"tables": [{"table_name": "task", "updates": [{"inserts": ["[1]"], "deletes": []}]}]}}}}
    claimed = {"TransactionUpdate": {"status": {"Committed": {"tables": [{"table_name": "task", "updates": [{"inserts": [], "deletes": ["[1]"]}]}]}}}}
    failed = {"TransactionUpdate": {"status": {"Failed": "no"}}}
    assert inserts_tasks(inserted) and not inserts_tasks(claimed) and not inserts_tasks(failed) and not inserts_tasks({"IdentityToken": {}})
    applied: dict[str, Any] = {"SubscribeApplied": {"rows": {"table_name": "task", "table_rows": {"inserts": [], "deletes": []}}}}
    assert not inserts_tasks(applied)  # nothing came in between: no claim for nothing
    applied["SubscribeApplied"]["rows"]["table_rows"]["inserts"] = ["[42]"]
    assert inserts_tasks(applied)


@pytest.mark.parametrize("kind", KINDS)
def test_the_failure_policy_from_a_handlers_exception(world: World, kind: str) -> None:
    def policy(payload: Any) -> Any:
        raise {"give_up": GiveUp("the payload names no user"), "retry_in": RetryIn(120, "rate limited"), "snooze": Snooze(45)}[payload["do"]]

    with world.client("worker") as c:
        jobs = {do: c.enqueue("policy", {"do": do}, max_attempts=5, backoff_seconds=30) for do in ("give_up", "retry_in", "snooze")}
    start = world.db.clock.now()
    worker = world.worker()
    worker.register("policy", handler(kind, policy))
    stats = worker.run(burst=True, handle_signals=False)
    assert (stats.failed, stats.snoozed, stats.completed) == (2, 1, 0)
    gave_up, retried, snoozed = (world.task(jobs[k].id) for k in ("give_up", "retry_in", "snooze"))
    assert (gave_up.status.value, gave_up.dead_reason.value, gave_up.attempts) == ("dead", "discarded", 1)
    assert "GiveUp: the payload names no user" in gave_up.last_error
    assert (retried.status.value, retried.attempts) == ("queued", 1)
    assert retried.run_after.micros - start.micros == 120_000_000  # not the job's 30 s backoff
    assert (snoozed.status.value, snoozed.attempts, snoozed.snoozes) == ("queued", 0, 1)  # no attempt spent
    assert snoozed.run_after.micros - start.micros == 45_000_000


def test_the_policy_exceptions_check_their_seconds() -> None:
    with pytest.raises(ValueError, match="RetryIn takes seconds >= 0"):
        RetryIn(-1)
    with pytest.raises(ValueError, match="Snooze takes seconds >= 1"):
        Snooze(0)

