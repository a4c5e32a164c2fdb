"""`Client` and `AsyncClient` against a real server: every route, typed answers, and errors that
carry the server's status and message. Contract checks: the client covers every route of
/openapi.json and decodes every field of its answers; the client package never imports the
server side."""

from __future__ import annotations

import ast
import asyncio
import datetime as dt
import inspect
import re
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from stdbmod.client import (
    AsyncClient,
    BadRequest,
    BulkOperation,
    BulkResult,
    Client,
    ClientError,
    Completion,
    Conflict,
    DatabaseInfo,
    DeadLetterGroup,
    Forbidden,
    HistoryEntry,
    IdentityToken,
    Job,
    JobPage,
    LogLine,
    NewJob,
    NotFound,
    QueueInfo,
    Recurring,
    ReducerError,
    RetentionPolicy,
    ServerError,
    TransportError,
    Unauthorized,
    Unique,
    calls,
)
from stdbmod.errors import StdbError
from tests.http.servers import refused_port

from .conftest import World

CLIENT_DIR = Path(__file__).resolve().parents[2] / "stdbmod" / "client"
SERVER_SIDE = ("stdbmod.runtime", "stdbmod.retry", "stdbmod.http", "stdbmod.storage", "stdbmod.scenarios", "stdbmod.local", "stdbmod.cli")


def test_the_seed_routes_round_trip_through_the_client(world: World) -> None:
    with world.client("owner") as admin, world.client("worker") as w:
        job = w.enqueue("send_welcome_email", {"user_id": 42}, max_attempts=5, backoff_seconds=30, priority=3, idempotency_key="k1")
        assert isinstance(job, Job) and job.status == "queued" and job.payload == {"user_id": 42} and job.priority == 3
        assert w.enqueue("send_welcome_email", {"other": 1}, idempotency_key="k1").id == job.id  # the same key: the first job
        assert w.get(job.id) == job
        claimed = w.claim("default", worker_id="w-1", lease_seconds=60)
        assert claimed is not None and claimed.id == job.id and claimed.status == "running" and claimed.attempts == 1
        assert claimed.claimed_by == "w-1" and claimed.lease_holder == world.identities["worker"]
        assert w.claim("default") is None  # nothing else is ready
        beat = w.heartbeat(claimed, lease_seconds=120)
        assert beat.lease_expires_at == world.clock.now().micros // 1000 + 120_000
        done = w.complete(claimed, {"ok": True})
        assert done.status == "completed" and done.result == {"ok": True} and done.completed_at is not None

        page = admin.list_jobs("completed", queue="default", job_type="send_welcome_email", per_page=10)
        assert isinstance(page, JobPage) and page.total == 1 and [j.id for j in page.items] == [job.id] and page.per_page == 10
        [entry] = admin.history(limit=5)
        assert isinstance(entry, HistoryEntry) and entry.task_id == job.id and entry.outcome == "completed" and entry.worker == "w-1"


def test_failures_the_dead_letter_tier_requeue_cancel_and_delete(world: World) -> None:
    with world.client("owner") as admin, world.client("worker") as w:
        job = w.enqueue("flaky", max_attempts=1)
        claimed = w.claim()
        assert claimed is not None
        dead = w.fail(claimed, "provider 5xx")
        assert dead.status == "dead" and dead.dead_reason == "exhausted" and dead.last_error == "provider 5xx"
        assert [j.id for j in admin.dead_letter().items] == [job.id]
        again = admin.requeue(job.id)
        assert again.status == "queued" and again.attempts == 0
        cancelled = admin.cancel(job.id, "duplicate")
        assert cancelled.status == "dead" and cancelled.dead_reason == "cancelled" and cancelled.last_error == "duplicate"
        admin.delete(job.id)
        with pytest.raises(NotFound) as e:
            admin.get(job.id)
        assert e.value.status_code == 404 and "no task" in e.value.message


def test_batches(world: World) -> None:
    with world.client("worker") as w:
        when = dt.datetime.fromtimestamp(world.clock.now().micros / 1e6 + 60, dt.UTC)
        jobs = w.enqueue_many([NewJob("a", {"n": 1}), NewJob("b", queue="other", max_attempts=2), NewJob("c", run_after=when)])
        assert [j.job_type for j in jobs] == ["a", "b", "c"] and jobs[1].queue == "other" and jobs[1].max_attempts == 2
        assert jobs[2].run_after == int(when.timestamp() * 1000)
        claimed = w.claim_many(10, worker_id="batcher")  # any queue; "c" is not due yet
        assert sorted(j.job_type for j in claimed) == ["a", "b"]
        done = w.complete_many([Completion(j.id, {"n": j.id}, j.attempts) for j in claimed])
        assert all(j.status == "completed" for j in done)
        with pytest.raises(Conflict):  # all or nothing: completed jobs are not running
            w.complete_many([Completion(j.id) for j in claimed])
        with pytest.raises(ValueError, match="aware datetime"):
            w.enqueue("x", run_after=dt.datetime(2030, 1, 1))


def test_errors_carry_the_servers_status_and_message_under_one_root(world: World) -> None:
    with world.client("worker") as w, world.client("plain") as plain, Client(world.base, "not-a-token") as forged, Client(world.base) as anonymous:
        with pytest.raises(Unauthorized) as e401:
            forged.claim()
        assert e401.value.status_code == 401 and isinstance(e401.value, PermissionError)
        with pytest.raises(Unauthorized):
            anonymous.get(1)
        with pytest.raises(Forbidden) as e403:
            plain.enqueue("x")
        assert e403.value.status_code == 403 and "worker role" in e403.value.message
        with pytest.raises(Forbidden):
            w.list_jobs()  # admin only
        with pytest.raises(BadRequest) as e400:
            w.enqueue("x", max_attempts=0)
        assert e400.value.status_code == 400 and isinstance(e400.value, ValueError) and "max_attempts" in e400.value.message
        job = w.enqueue("x")
        with pytest.raises(Conflict) as e409:
            w.complete(job.id)  # queued, not running
        assert e409.value.status_code == 409 and "not running" in e409.value.message
        with pytest.raises(NotFound) as e404:
            w.get(10**6)
        assert isinstance(e404.value, LookupError)
        with pytest.raises(ReducerError) as e530:
            w.grant_worker(world.identities["plain"])  # a worker is not an admin
        assert e530.value.status_code == 530 and "only an admin" in e530.value.message
        for err in (e401, e403, e400, e409, e404, e530):
            assert isinstance(err.value, ClientError) and isinstance(err.value, StdbError)
            assert str(err.value).startswith(f"{err.value.status_code}: ")


def test_no_server_is_a_transport_error() -> None:
    with refused_port() as port, Client(f"http://127.0.0.1:{port}", "t", timeout=5) as c:
        with pytest.raises(TransportError) as e:
            c.ping()
    assert e.value.status_code is None and isinstance(e.value, ConnectionError) and isinstance(e.value.__cause__, httpx.ConnectError)


def test_a_5xx_is_a_server_error_and_an_answer_that_does_not_decode_is_a_client_error() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/1"):
            return httpx.Response(503, json={"error": "storage failed"})
        if request.url.path.endswith("/2"):
            return httpx.Response(502, text="<html>bad gateway</html>")
        return httpx.Response(200, json={"not": "a job"})

    with Client("http://stdbmod", transport=httpx.MockTransport(answer)) as c:
        with pytest.raises(ServerError) as e:
            c.get(1)
        assert e.value.status_code == 503 and e.value.message == "storage failed"
        with pytest.raises(ServerError) as e:
            c.get(2)
        assert e.value.status_code == 502 and e.value.message == "<html>bad gateway</html>"  # a proxy's page, not JSON
        with pytest.raises(ClientError, match="does not decode"):
            c.get(3)


def test_roles_identities_and_the_v1_routes(world: World) -> None:
    with world.client("owner") as owner, Client(world.base) as anonymous:
        anonymous.ping()
        fresh = anonymous.new_identity()
        assert isinstance(fresh, IdentityToken) and fresh.identity.startswith("c200")
        with Client(world.base, fresh.token) as newcomer:
            assert newcomer.verify(fresh.identity) is True
            assert newcomer.verify(world.identities["owner"]) is False
            with pytest.raises(Forbidden):
                newcomer.claim()
            owner.grant_worker(fresh.identity)
            assert newcomer.claim() is None  # a worker now
            owner.revoke_worker(fresh.identity)
            with pytest.raises(Forbidden):
                newcomer.claim()
            owner.add_admin(fresh.identity)
            assert newcomer.list_jobs().total == 0
            newcomer.remove_admin(fresh.identity)
            with pytest.raises(Forbidden):
                newcomer.list_jobs()
        owner.set_history_cap(10)
        owner.set_default_lease(90)
        with world.client("worker") as w:
            w.enqueue("x")
            claimed = w.claim()
            assert claimed is not None and claimed.lease_expires_at == world.clock.now().micros // 1000 + 90_000
        info = owner.database_info()
        assert isinstance(info, DatabaseInfo) and info.name == "retry" and info.owner_identity == world.identities["owner"]
        assert "task" in str(owner.schema()["tables"])
        assert owner.database_identity() == info.database_identity
        assert owner.sql("SELECT COUNT(*) AS n FROM retry_admin")[0]["rows"] == [[1]]  # the owner, the first admin
        assert all(isinstance(line, LogLine) for line in owner.logs(10))
        assert owner.call("set_history_cap", 20) is None


def test_the_async_client_has_every_method_of_the_client_and_works(world: World) -> None:
    def public(cls: type) -> dict[str, inspect.Signature]:
        return {n: inspect.signature(f) for n, f in vars(cls).items() if callable(f) and not n.startswith("_")}

    sync, async_ = public(Client), public(AsyncClient)
    assert set(sync) - {"close"} == set(async_) - {"aclose"}
    for name in set(sync) - {"close", "send"}:
        assert inspect.iscoroutinefunction(getattr(AsyncClient, name)), name
        assert sync[name].parameters.keys() == async_[name].parameters.keys(), name

    async def story() -> None:
        async with AsyncClient(world.base, world.tokens["worker"]) as w, AsyncClient(world.base, world.tokens["owner"]) as admin:
            job = await w.enqueue("async", [1, 2])
            claimed = await w.claim()
            assert claimed is not None and claimed.id == job.id
            await w.heartbeat(claimed)
            failed = await w.fail(claimed, "nope")
            assert failed.status == "queued" and failed.attempts == 1
            assert (await admin.list_jobs("queued")).total == 1
            with pytest.raises(Conflict):
                await w.complete(claimed)
            assert (await admin.history())[0].outcome == "failed"

    asyncio.run(story())


# --- contracts --------------------------------------------------------------------------------------


def _openapi(world: World) -> dict[str, Any]:
    with Client(world.base) as c:
        return c.openapi()


def test_the_client_covers_every_route_of_the_openapi_document(world: World) -> None:
    """A route added to the server without a client method fails here (and a client call to a
    route the server does not have)."""
    every: list[calls.Call[Any]] = [
        calls.enqueue(NewJob("x")), calls.enqueue_unique(NewJob("x", unique=Unique())),
        calls.enqueue_many([NewJob("x")]), calls.get(1), calls.list_jobs(None, None, None, 1, 50),
        calls.claim(None, None, None), calls.claim_many(2, None, None, None), calls.complete(1, None, None),
        calls.complete_many([Completion(1)]), calls.fail(1, "e", None), calls.heartbeat(1, None, None), calls.cancel(1, None),
        calls.snooze(1, 5, None), calls.run_now(1),
        calls.list_recurring(), calls.add_recurring("n", "@daily", {"job_type": "x"}, None, None, None, None), calls.change_recurring(1),
        calls.enable_recurring(1), calls.disable_recurring(1), calls.run_recurring_now(1), calls.delete_recurring(1),
        calls.list_queues(), calls.pause_queue("q"), calls.resume_queue("q"), calls.set_queue_limits("q", concurrency=1),
        calls.retention(), calls.set_retention("completed", 86_400, None),
        calls.dlq_groups(None, None, 50), calls.bulk_requeue(True), calls.bulk_delete(True), calls.bulk_operation(1),
        calls.dead_letter(None, 1, 50), calls.requeue(1), calls.delete(1), calls.history(10), calls.ping(), calls.new_identity(),
        calls.verify("c200"), calls.database_info("retry"), calls.call_reducer("retry", "r", []), calls.schema("retry"), calls.logs("retry", None),
        calls.openapi(), calls.metrics(), calls.database_identity("retry"), calls.sql("retry", "SELECT 1"),
    ]
    names = {n for n, v in vars(calls).items() if inspect.isfunction(v) and v.__module__ == calls.__name__ and not n.startswith("_")}
    assert len(every) == len(names), "a call function is missing from this list"

    def template(path: str) -> str:
        path = re.sub(r"/(jobs|dlq)/1(?=/|$)", r"/\1/{job_id}", path)
        path = re.sub(r"/recurring/1(?=/|$)", "/recurring/{recurring_id}", path)
        path = re.sub(r"/operations/1$", "/operations/{op_id}", path)
        path = re.sub(r"/queues/q/", "/queues/{queue}/", path)
        path = re.sub(r"/retention/completed$", "/retention/{status}", path)
        path = re.sub(r"^/v1/database/retry", "/v1/database/{db}", path)
        return path.replace("/identity/c200/", "/identity/{identity}/").replace("/call/r", "/call/{reducer}")

    ours = {(c.method.lower(), template(c.path)) for c in every}
    theirs = {(method, path) for path, item in _openapi(world)["paths"].items() for method in item}
    assert ours == theirs


@pytest.mark.parametrize(("ours", "theirs"), [(Job, "Job"), (JobPage, "JobPage"), (HistoryEntry, "AttemptOut"), (IdentityToken, "IdentityToken"),
                                              (DatabaseInfo, "DatabaseInfo"), (LogLine, "LogLineOut"), (Recurring, "RecurringOut"),
                                              (DeadLetterGroup, "GroupOut"), (BulkOperation, "BulkOp"), (BulkResult, "BulkOut"),
                                              (QueueInfo, "QueueOut"), (RetentionPolicy, "RetentionOut"), (NewJob, "EnqueueBody"),
                                              (Unique, "UniqueBody")])
def test_the_client_types_have_the_fields_of_the_servers_answers(world: World, ours: type[msgspec.Struct], theirs: str) -> None:
    schema = _openapi(world)["components"]["schemas"][theirs]
    assert set(ours.__struct_fields__) == set(schema["properties"])


def _imports(path: Path) -> set[str]:
    """Every module a file of stdbmod.client imports (relative imports resolved)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ["stdbmod", "client"][: 3 - node.level] if node.level <= 2 else []
                module = ".".join([*base, *([node.module] if node.module else [])])
                found |= {module} | {f"{module}.{a.name}" for a in node.names}
            else:
                found.add(node.module or "")
    return found


def test_the_client_never_imports_the_server_side() -> None:
    files = sorted(CLIENT_DIR.glob("*.py"))
    assert len(files) >= 5
    for path in files:
        bad = sorted(m for m in _imports(path) if any(m == s or m.startswith(s + ".") for s in SERVER_SIDE))
        assert bad == [], f"{path.name} imports the server side: {bad}"
    assert "stdbmod.errors" in _imports(CLIENT_DIR / "errors.py")  # the check does see relative imports


def test_retention_through_the_client(world: World) -> None:
    with world.client("owner") as c:
        kept = c.set_retention("completed", max_age_seconds=3_600, max_count=None)
        assert kept == RetentionPolicy("completed", 3_600, None)
        assert {p.status: p for p in c.retention()}["completed"] == kept
        with pytest.raises(NotFound):
            c.set_retention("queued", max_age_seconds=1)
    with world.client("worker") as w, pytest.raises(Forbidden):
        w.set_retention("dead", max_count=10)


def test_every_enqueue_option_reaches_the_server(world: World) -> None:
    with world.client("worker") as c:
        job = c.enqueue("charge", {"order": 1}, queue="pay", max_attempts=3, backoff_seconds=5, priority=2, idempotency_key="o-1",
                        max_backoff_seconds=60, backoff_jitter=0.25, partition_key="customer-9", timeout_seconds=30)
        stored = world.task(job.id)
        assert (stored.queue, stored.max_attempts, stored.backoff_seconds, stored.priority, stored.idempotency_key) == ("pay", 3, 5, 2, "o-1")
        assert (stored.max_backoff_seconds, stored.backoff_jitter, stored.partition_key, stored.timeout_seconds) == (60, 0.25, "customer-9", 30)
        spec = Unique(fields=("job_type", "payload.user"), period_seconds=3_600)
        first, was_there = c.enqueue_unique("welcome", {"user": 7, "n": 1}, spec)
        again, again_there = c.enqueue_unique("welcome", {"user": 7, "n": 2}, spec)
        assert (was_there, again_there, again.id) == (False, True, first.id)
        assert c.get(first.id) == first
        with pytest.raises(TypeError, match="the options are NewJob's fields"):
            c.enqueue("x", colour="red")

