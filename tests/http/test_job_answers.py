"""The class of answer on every job route: a caller's mistake is a 4xx that says what was wrong
(400 a bad request, 403 a missing role, 404 an unknown job, 409 a job in the wrong state or
leased to another claim), the module crashing is a 500 that says nothing of the crash; and
neither changes a row or writes a commit."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from stdbmod.http import routes_recurring
from stdbmod.http.routes_jobs import ENDPOINTS, PREFIX
from stdbmod.http.routing import JOB_ID
from stdbmod.retry import NewTask, create_retry_module, queries, recurring, reducers, roles, triage

from .clocked import Clocked, clocked_server
from .servers import bearer

UNKNOWN = 999_999


@dataclass
class World:
    s: Clocked
    queued: int
    running: int  # claimed by "worker"
    dead: int
    recurring: int  # a recurring entry named "nightly"

    def request(self, who: str, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> httpx.Response:
        url = self.s.base + PREFIX + path.format(queued=self.queued, running=self.running, dead=self.dead, recurring=self.recurring, unknown=UNKNOWN)
        return httpx.request(method, url, json=body, params=params, headers=bearer(self.s.tokens[who]), timeout=30)


@contextmanager
def _world(where: Path) -> Iterator[World]:
    with clocked_server(where, create_retry_module().module) as s:
        owner, worker = s.identities["owner"], s.identities["worker"]
        queued = s.db.call("enqueue", "q", "queued-jobs", sender=worker).id
        running = s.db.call("enqueue", "r", "running-jobs", sender=worker).id
        assert s.db.call("claim", "running-jobs", "w-1", 60, sender=worker).id == running
        dead = s.db.call("enqueue", "d", "dead-jobs", None, 1, sender=worker).id
        s.db.call("claim", "dead-jobs", sender=worker)
        s.db.call("fail", dead, "gone", sender=worker)
        assert queries.get_task(s.db, owner, dead).status.value == "dead"
        entry = s.db.call("add_recurring", "nightly", "0 3 * * *", NewTask("report"), sender=owner).id
        yield World(s, queued, running, dead, entry)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """Shared by the tests whose requests must change nothing (each checks that they did not)."""
    with _world(tmp_path_factory.mktemp("answers") / "db") as w:
        yield w


@pytest.fixture
def fresh_world(tmp_path: Path) -> Iterator[World]:
    with _world(tmp_path / "db") as w:
        yield w


# Every job route: who may use it, its path and a body (a query for GET) that reaches the module,
# then the mistakes a caller can make on it: (who, another path or None, body or query, status).
# {queued}, {running}, {dead} and {unknown} stand for jobs in those states (in paths and bodies);
# "worker" holds the running job's lease, "worker2" does not, "plain" has no role.
Case = tuple[str, str | None, Any, int]
ROUTES: dict[tuple[str, str], tuple[str, str, Any, list[Case]]] = {
    ("POST", "/jobs"): ("worker", "/jobs", {"job_type": "x"}, [
        ("worker", None, {"job_type": ""}, 400), ("worker", None, {"job_type": "x", "max_attempts": 0}, 400),
        ("plain", None, {"job_type": "x"}, 403),
    ]),
    ("GET", "/jobs"): ("owner", "/jobs", {}, [
        ("owner", None, {"per_page": 0}, 400), ("owner", None, {"status": "sleeping"}, 400), ("worker", None, {}, 403),
    ]),
    ("POST", "/jobs/claim"): ("worker", "/jobs/claim", {"queue": "queued-jobs"}, [
        ("worker", None, {"lease_seconds": 0}, 400), ("worker", None, {"queue": ""}, 400), ("plain", None, {}, 403),
    ]),
    ("POST", "/jobs/enqueue_many"): ("worker", "/jobs/enqueue_many", {"jobs": [{"job_type": "x"}]}, [
        ("worker", None, {"jobs": []}, 400), ("worker", None, {"jobs": [{"job_type": "x", "run_after": "soon"}]}, 400),
        ("plain", None, {"jobs": [{"job_type": "x"}]}, 403),
    ]),
    ("POST", "/jobs/claim_many"): ("worker", "/jobs/claim_many", {"limit": 2}, [
        ("worker", None, {"limit": 0}, 400), ("worker", None, {"limit": 1, "lease_seconds": -1}, 400), ("plain", None, {"limit": 1}, 403),
    ]),
    ("POST", "/jobs/complete_many"): ("worker", "/jobs/complete_many", {"jobs": [{"id": "{running}"}]}, [
        ("worker", None, {"jobs": [{"id": -1}]}, 400), ("worker", None, {"jobs": [{"id": "{unknown}"}]}, 404),
        ("worker", None, {"jobs": [{"id": "{running}"}, {"id": "{queued}"}]}, 409), ("worker2", None, {"jobs": [{"id": "{running}"}]}, 409),
        ("plain", None, {"jobs": [{"id": "{running}"}]}, 403),
    ]),
    ("GET", "/jobs/{job_id}"): ("worker", "/jobs/{queued}", {}, [
        ("worker", "/jobs/{unknown}", {}, 404), ("plain", None, {}, 403),
    ]),
    ("POST", "/jobs/{job_id}/complete"): ("worker", "/jobs/{running}/complete", {}, [
        ("worker", None, {"attempt": 0}, 400), ("worker", "/jobs/{unknown}/complete", {}, 404),
        ("worker", "/jobs/{queued}/complete", {}, 409), ("worker2", None, {}, 409), ("worker", None, {"attempt": 2}, 409),
        ("plain", None, {}, 403),
    ]),
    ("POST", "/jobs/{job_id}/fail"): ("worker", "/jobs/{running}/fail", {"error": "e"}, [
        ("worker", None, {}, 400), ("worker", None, {"error": 5}, 400), ("worker", "/jobs/{unknown}/fail", {"error": "e"}, 404),
        ("worker", "/jobs/{dead}/fail", {"error": "e"}, 409), ("worker2", None, {"error": "e"}, 409), ("plain", None, {"error": "e"}, 403),
    ]),
    ("POST", "/jobs/{job_id}/snooze"): ("worker", "/jobs/{running}/snooze", {"seconds": 5}, [
        ("worker", None, {"seconds": -1}, 400), ("worker", "/jobs/{unknown}/snooze", {"seconds": 5}, 404),
        ("worker", "/jobs/{queued}/snooze", {"seconds": 5}, 409), ("worker2", None, {"seconds": 5}, 409),
        ("plain", None, {"seconds": 5}, 403),
    ]),
    ("POST", "/jobs/{job_id}/run_now"): ("owner", "/jobs/{queued}/run_now", {}, [
        ("owner", "/jobs/{unknown}/run_now", {}, 404), ("owner", "/jobs/{running}/run_now", {}, 409), ("worker", None, {}, 403),
    ]),
    ("POST", "/jobs/{job_id}/heartbeat"): ("worker", "/jobs/{running}/heartbeat", {}, [
        ("worker", None, {"lease_seconds": 0}, 400), ("worker", "/jobs/{unknown}/heartbeat", {}, 404),
        ("worker", "/jobs/{queued}/heartbeat", {}, 409), ("worker2", None, {}, 409), ("plain", None, {}, 403),
    ]),
    ("POST", "/jobs/{job_id}/cancel"): ("owner", "/jobs/{queued}/cancel", {}, [
        ("owner", None, {"reason": 5}, 400), ("owner", "/jobs/{unknown}/cancel", {}, 404), ("owner", "/jobs/{dead}/cancel", {}, 409),
        ("worker", None, {}, 403),
    ]),
    ("GET", "/dlq"): ("owner", "/dlq", {}, [("owner", None, {"page": 0}, 400), ("worker", None, {}, 403)]),
    ("POST", "/dlq/{job_id}/requeue"): ("owner", "/dlq/{dead}/requeue", None, [
        ("owner", None, {"bogus": 1}, 400), ("owner", "/dlq/{unknown}/requeue", None, 404), ("owner", "/dlq/{queued}/requeue", None, 409),
        ("worker", None, None, 403),
    ]),
    ("DELETE", "/dlq/{job_id}"): ("owner", "/dlq/{dead}", None, [
        ("owner", "/dlq/{unknown}", None, 404), ("owner", "/dlq/{running}", None, 409), ("worker", None, None, 403),
    ]),
    ("GET", "/history"): ("owner", "/history", {}, [("owner", None, {"limit": 0}, 400), ("worker", None, {}, 403)]),
    ("GET", "/queues"): ("owner", "/queues", {}, [("worker", None, {}, 403)]),
    ("POST", "/queues/{queue}/pause"): ("owner", "/queues/queued-jobs/pause", None, [
        ("owner", None, {"bogus": 1}, 400), ("owner", "/queues/" + "q" * 201 + "/pause", None, 400), ("worker", None, None, 403),
    ]),
    ("POST", "/queues/{queue}/resume"): ("owner", "/queues/queued-jobs/resume", None, [
        ("owner", None, {"bogus": 1}, 400), ("worker", None, None, 403),
    ]),
    ("POST", "/queues/{queue}/limits"): ("owner", "/queues/queued-jobs/limits", {"concurrency": 3}, [
        ("owner", None, {"concurrency": 0}, 400), ("owner", None, {"rate_limit": "x"}, 400), ("worker", None, {"concurrency": 3}, 403),
    ]),
    ("GET", "/retention"): ("owner", "/retention", {}, [("worker", None, {}, 403)]),
    ("POST", "/retention/{status}"): ("owner", "/retention/dead", {"max_age_seconds": 2592000}, [
        ("owner", None, {"max_age_seconds": -1}, 400), ("owner", "/retention/queued", {}, 404), ("worker", None, {}, 403),
    ]),
    ("GET", "/recurring"): ("owner", "/recurring", {}, [("worker", None, {}, 403)]),
    ("POST", "/recurring"): ("owner", "/recurring", {"name": "weekly", "cron": "0 3 * * 1", "job": {"job_type": "report"}}, [
        ("owner", None, {"name": "x", "cron": "not cron", "job": {"job_type": "r"}}, 400),
        ("owner", None, {"name": "x", "cron": "0 3 * * *", "timezone": "Mars/Olympus", "job": {"job_type": "r"}}, 400),
        ("owner", None, {"name": "nightly", "cron": "0 3 * * *", "job": {"job_type": "r"}}, 400),  # the name is taken
        ("worker", None, {"name": "x", "cron": "0 3 * * *", "job": {"job_type": "r"}}, 403),
    ]),
    ("PATCH", "/recurring/{recurring_id}"): ("owner", "/recurring/{recurring}", {"cron": "0 4 * * *"}, [
        ("owner", None, {"cron": "nope"}, 400), ("owner", "/recurring/{unknown}", {"cron": "0 4 * * *"}, 404),
        ("worker", None, {"cron": "0 4 * * *"}, 403),
    ]),
    ("POST", "/recurring/{recurring_id}/enable"): ("owner", "/recurring/{recurring}/enable", None, [
        ("owner", None, {"bogus": 1}, 400), ("owner", "/recurring/{unknown}/enable", None, 404), ("worker", None, None, 403),
    ]),
    ("POST", "/recurring/{recurring_id}/disable"): ("owner", "/recurring/{recurring}/disable", None, [
        ("owner", "/recurring/{unknown}/disable", None, 404), ("worker", None, None, 403),
    ]),
    ("POST", "/recurring/{recurring_id}/run_now"): ("owner", "/recurring/{recurring}/run_now", None, [
        ("owner", "/recurring/{unknown}/run_now", None, 404), ("worker", None, None, 403),
    ]),
    ("DELETE", "/recurring/{recurring_id}"): ("owner", "/recurring/{recurring}", None, [
        ("owner", "/recurring/{unknown}", None, 404), ("worker", None, None, 403),
    ]),
}


def _route_key(path: str) -> str:
    """An endpoint's path as ROUTES spells it: without the prefix, `{job_id}` for the id."""
    return path.removeprefix(PREFIX).replace(JOB_ID, "{job_id}").replace("{recurring_id:id}", "{recurring_id}")


def _fill(w: World, value: Any) -> Any:
    """`value` with "{queued}" and the like replaced by those jobs' ids."""
    if isinstance(value, dict):
        return {k: _fill(w, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(w, v) for v in value]
    ids = {"{queued}": w.queued, "{running}": w.running, "{dead}": w.dead, "{recurring}": w.recurring, "{unknown}": UNKNOWN}
    if isinstance(value, str) and value in ids:
        return ids[value]
    return value


def _send(w: World, method: str, who: str, path: str, data: Any) -> httpx.Response:
    data = _fill(w, data)
    if method == "GET":
        return w.request(who, method, path, params=data or None)
    return w.request(who, method, path, data)


def _unchanged(w: World) -> tuple[str, int]:
    """The rows and the commit log's length: what a refused or crashed request must not change."""
    return w.s.db.state_hash(), len(w.s.db.commit_log())


def test_every_job_route_is_in_the_table() -> None:
    routes = {(e.method, _route_key(e.path)) for e in [*ENDPOINTS, *routes_recurring.ENDPOINTS] if e.path.startswith(PREFIX)}
    assert routes == set(ROUTES), "a job route without its answers here: add it to ROUTES"


@pytest.mark.parametrize("route", list(ROUTES), ids=" ".join)
def test_a_callers_mistakes_are_4xx_that_change_nothing(world: World, route: tuple[str, str]) -> None:
    method = route[0]
    _, path, _, cases = ROUTES[route]
    for who, other, data, status in cases:
        before = _unchanged(world)
        r = _send(world, method, who, other or path, data)
        assert r.status_code == status, (who, other or path, data, r.status_code, r.text)
        assert isinstance(r.json()["error"], str) and r.json()["error"]
        assert _unchanged(world) == before, (who, other or path, data)


@pytest.mark.parametrize("route", list(ROUTES), ids=" ".join)
def test_the_request_that_reaches_the_module_succeeds(fresh_world: World, route: tuple[str, str]) -> None:
    """The baseline of the crash test below: the same request, without the crash, is a 200."""
    who, path, data, _ = ROUTES[route]
    r = _send(fresh_world, route[0], who, path, data)
    assert r.status_code == 200, r.text


class Bug(Exception):
    """Not a StdbError: what a mistake in the module's own code raises."""


@pytest.mark.parametrize("crash", [Bug, ValueError, LookupError, PermissionError, KeyError], ids=lambda e: e.__name__)
def test_a_crash_in_the_module_is_a_500_that_says_nothing_of_it(world: World, monkeypatch: pytest.MonkeyPatch, crash: type[Exception]) -> None:
    """The crash is injected where every job route goes first: the role check (in a reducer's
    transaction or a read's snapshot). Its kinds include the builtins the retry module's own
    refusals derive from (InvalidArgument is a ValueError, TaskNotFound a LookupError,
    NotAuthorized a PermissionError): a crash must not pass for one of them."""

    def broken(*args: Any) -> bool:
        raise crash("secret detail of the crash")

    for where in (roles, queries, recurring, reducers, triage):  # each module's own binding of the role checks
        for check in ("is_admin", "is_worker", "require_admin", "require_worker"):
            if hasattr(where, check):
                monkeypatch.setattr(where, check, broken)
    for (method, _), (who, path, data, _) in ROUTES.items():
        before = _unchanged(world)
        r = _send(world, method, who, path, data)
        assert 500 <= r.status_code < 600, (method, path, r.status_code, r.text)
        assert "secret detail" not in r.text and isinstance(r.json()["error"], str)
        assert _unchanged(world) == before, (method, path)
        if method != "GET":  # a reducer crashed: the owner finds it in the database's log, traceback and all
            line = world.s.db.logs(last=1)[0]
            assert line.level == "panic" and "secret detail of the crash" in line.message, (method, path, line)
