"""Every option of the job routes, batches included, for its effect (not only its acceptance):
under a manual clock, a lease of N seconds ends N seconds after the claim and is reaped then and
not before, a limit takes that many, a queue only its own jobs, and so on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stdbmod import TimeDuration
from stdbmod.retry import create_retry_module

from .clocked import Clocked, clocked_server
from .jobs import Jobs


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Clocked]:
    with clocked_server(tmp_path / "db", create_retry_module().module) as s:
        yield s


@pytest.fixture
def worker(server: Clocked) -> Iterator[Jobs]:
    with server.jobs("worker") as jobs:
        yield jobs


@pytest.fixture
def admin(server: Clocked) -> Iterator[Jobs]:
    with server.jobs("owner") as jobs:
        yield jobs


def _ms(server: Clocked, seconds: float = 0) -> int:
    """Now + `seconds`, in epoch ms."""
    return (server.clock.now() + TimeDuration.from_seconds(seconds)).micros // 1000


def _advance(server: Clocked, seconds: float) -> None:
    server.clock.advance(seconds)
    server.db.run_due()  # the lease sweep, when due


def _status(admin: Jobs, job_id: int) -> tuple[str, int]:
    job = admin.ok("GET", f"/jobs/{job_id}")
    return job["status"], job["attempts"]


def _enqueue_many(worker: Jobs, *jobs: dict[str, Any]) -> list[dict[str, Any]]:
    made: list[dict[str, Any]] = worker.ok("POST", "/jobs/enqueue_many", {"jobs": list(jobs)})["jobs"]
    return made


def _claim_many(worker: Jobs, limit: int, **options: Any) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = worker.ok("POST", "/jobs/claim_many", {"limit": limit, **options})["jobs"]
    return got


@pytest.mark.parametrize("route", ["claim", "claim_many"])
def test_a_claims_lease_seconds_is_when_its_lease_ends_and_is_reaped(server: Clocked, worker: Jobs, admin: Jobs, route: str) -> None:
    job = worker.enqueue("j", queue="lease", backoff_seconds=0)
    body = {"queue": "lease", "lease_seconds": 45} | ({"limit": 1} if route == "claim_many" else {})
    r = worker.ok("POST", f"/jobs/{route}", body)
    claimed = r["job"] if route == "claim" else r["jobs"][0]
    assert claimed["lease_expires_at"] == _ms(server, 45)
    _advance(server, 44.999)
    assert _status(admin, job["id"]) == ("running", 1)
    _advance(server, 0.001)
    assert _status(admin, job["id"]) == ("queued", 1)  # reaped at its end, not at the default's
    assert [h["outcome"] for h in admin.ok("GET", "/history")["items"]] == ["lease_expired"]


@pytest.mark.parametrize("route", ["claim", "claim_many"])
def test_a_claim_without_lease_seconds_takes_the_default_lease(server: Clocked, worker: Jobs, admin: Jobs, route: str) -> None:
    server.db.call("set_default_lease", 20, sender=server.identities["owner"])
    job = worker.enqueue("j", queue="default-lease")
    body = {"queue": "default-lease"} | ({"limit": 1} if route == "claim_many" else {})
    r = worker.ok("POST", f"/jobs/{route}", body)
    claimed = r["job"] if route == "claim" else r["jobs"][0]
    assert claimed["lease_expires_at"] == _ms(server, 20)
    _advance(server, 20)
    assert _status(admin, job["id"]) == ("queued", 1)


def test_heartbeat_lease_seconds_moves_the_end_either_way(server: Clocked, worker: Jobs, admin: Jobs) -> None:
    job = worker.enqueue("j", queue="beat")
    worker.claim("beat", lease_seconds=100)
    _advance(server, 10)
    assert worker.ok("POST", f"/jobs/{job['id']}/heartbeat", {"lease_seconds": 5})["lease_expires_at"] == _ms(server, 5)
    _advance(server, 5)  # a shorter lease ends sooner: the sweep moved earlier with it
    assert _status(admin, job["id"]) == ("queued", 1)


def test_claim_many_limit_queue_and_worker_id(server: Clocked, worker: Jobs, admin: Jobs) -> None:
    mine = _enqueue_many(worker, *({"job_type": "m", "queue": "mine"} for _ in range(5)))
    other = _enqueue_many(worker, {"job_type": "o", "queue": "other"})
    got = _claim_many(worker, 3, queue="mine", worker_id="w-7")
    assert [j["id"] for j in got] == [j["id"] for j in mine[:3]]  # exactly the limit, oldest first
    assert {(j["claimed_by"], j["queue"]) for j in got} == {("w-7", "mine")}
    assert [j["id"] for j in _claim_many(worker, 10, queue="mine")] == [j["id"] for j in mine[3:]]  # fewer when fewer are ready
    assert _status(admin, other[0]["id"]) == ("queued", 0)  # another queue's job was not taken
    anyq = _claim_many(worker, 10)  # no queue: any queue
    assert [j["id"] for j in anyq] == [other[0]["id"]] and anyq[0]["claimed_by"] == server.identities["worker"].to_hex()
    worker.ok("POST", f"/jobs/{got[0]['id']}/fail", {"error": "x"})
    assert admin.ok("GET", "/history")["items"][0]["worker"] == "w-7"  # the worker_id names the attempt


def test_enqueue_many_options_take_effect(server: Clocked, worker: Jobs, admin: Jobs) -> None:
    a, b, later, elsewhere = _enqueue_many(
        worker,
        {"job_type": "a", "queue": "opts", "payload": {"n": "a"}, "max_attempts": 1},
        {"job_type": "b", "queue": "opts", "payload": {"n": "b"}, "priority": 5, "backoff_seconds": 7, "idempotency_key": "b-key"},
        {"job_type": "c", "queue": "opts", "priority": 9, "run_after": _ms(server, 30)},
        {"job_type": "d", "queue": "elsewhere"},
    )
    # priority first; a job due later is not claimable yet, however high its priority; another queue's never
    got = _claim_many(worker, 10, queue="opts")
    assert [(j["id"], j["payload"]) for j in got] == [(b["id"], {"n": "b"}), (a["id"], {"n": "a"})]
    # backoff_seconds: b is due again 7 s after its failure; max_attempts 1: a dies at its first
    failed_b = worker.ok("POST", f"/jobs/{b['id']}/fail", {"error": "retry me"})
    assert failed_b["run_after"] == _ms(server, 7)
    assert worker.ok("POST", f"/jobs/{a['id']}/fail", {"error": "once"})["status"] == "dead"
    _advance(server, 6.999)
    assert _claim_many(worker, 10, queue="opts") == []
    _advance(server, 0.001)
    assert [j["id"] for j in _claim_many(worker, 10, queue="opts")] == [b["id"]]
    _advance(server, 30)
    assert [j["id"] for j in _claim_many(worker, 10, queue="opts")] == [later["id"]]
    assert _status(admin, elsewhere["id"]) == ("queued", 0)
    # idempotency_key: a later batch (and an earlier item of the same batch) names the first task
    again = _enqueue_many(worker, {"job_type": "b2", "queue": "opts", "idempotency_key": "b-key"},
                          {"job_type": "n", "queue": "opts", "idempotency_key": "new"},
                          {"job_type": "n2", "queue": "opts", "idempotency_key": "new"})
    assert [j["id"] for j in again[:1]] == [b["id"]] and again[1]["id"] == again[2]["id"] != b["id"]
    assert admin.ok("GET", "/jobs", queue="opts")["total"] == 4


def test_complete_many_result_and_attempt_take_effect(server: Clocked, worker: Jobs, admin: Jobs) -> None:
    _enqueue_many(worker, *({"job_type": "c", "queue": "done", "backoff_seconds": 0} for _ in range(2)))
    first, second = _claim_many(worker, 2, queue="done")
    # an attempt that is not the current claim's is refused and changes nothing
    r = worker.request("POST", "/jobs/complete_many", {"jobs": [{"id": first["id"], "attempt": first["attempts"] + 1}]})
    assert r.status_code == 409 and str(first["id"]) in r.json()["error"]
    assert _status(admin, first["id"]) == ("running", 1)
    done = worker.ok("POST", "/jobs/complete_many", {"jobs": [
        {"id": first["id"], "result": {"rows": 3}, "attempt": first["attempts"]},
        {"id": second["id"], "result": [1, "two"]},
    ]})["jobs"]
    assert [(j["status"], j["result"]) for j in done] == [("completed", {"rows": 3}), ("completed", [1, "two"])]
    assert [admin.ok("GET", f"/jobs/{j['id']}")["result"] for j in (first, second)] == [{"rows": 3}, [1, "two"]]


@pytest.mark.parametrize("route", ["complete", "fail", "heartbeat"])
def test_a_reports_attempt_fences_an_earlier_claim(server: Clocked, worker: Jobs, admin: Jobs, route: str) -> None:
    """The same identity claimed twice (a paused process, then a fresh one): the report naming the
    earlier claim's attempt is refused, the one naming the current claim is taken."""
    job = worker.enqueue("j", queue=f"fence-{route}", backoff_seconds=0)
    first = worker.claim(f"fence-{route}", lease_seconds=10)["job"]
    _advance(server, 10)  # reaped
    second = worker.claim(f"fence-{route}")["job"]
    bodies: dict[str, dict[str, Any]] = {"complete": {"result": 1}, "fail": {"error": "e"}, "heartbeat": {"lease_seconds": 60}}
    body = bodies[route]
    stale = worker.request("POST", f"/jobs/{job['id']}/{route}", {**body, "attempt": first["attempts"]})
    assert stale.status_code == 409 and "lease" in stale.json()["error"]
    assert _status(admin, job["id"]) == ("running", 2)
    worker.ok("POST", f"/jobs/{job['id']}/{route}", {**body, "attempt": second["attempts"]})
    assert _status(admin, job["id"]) == {"complete": ("completed", 2), "fail": ("queued", 2), "heartbeat": ("running", 2)}[route]


def test_every_query_option_of_the_lists_takes_effect(server: Clocked, worker: Jobs, admin: Jobs) -> None:
    """Each page is exactly the jobs that option picks, newest first."""
    a = [j["id"] for j in _enqueue_many(worker, *({"job_type": f"a{i % 2}", "queue": "la"} for i in range(5)))]
    b = [j["id"] for j in _enqueue_many(worker, *({"job_type": "b", "queue": "lb"} for _ in range(3)))]
    for job_id in a[:4] + b[:2]:
        admin.ok("POST", f"/jobs/{job_id}/cancel", {})  # dead: a[0..3], b[0..1]; queued: a[4], b[2]
    worker.claim("lb", "w")  # running: b[2]

    def ids(path: str, **params: Any) -> tuple[list[int], int]:
        page = admin.ok("GET", path, **params)
        return [j["id"] for j in page["items"]], page["total"]

    new_a, new_b = a[::-1], b[::-1]
    assert ids("/dlq", queue="la", per_page=3) == (new_a[1:4], 4)
    assert ids("/dlq", queue="la", per_page=3, page=2) == (new_a[4:], 4)
    assert ids("/dlq", per_page=2, page=2) == ([a[3], a[2]], 6)  # every queue: b[1], b[0], then these
    assert ids("/dlq", queue="lb") == (new_b[1:], 2)
    assert ids("/jobs", queue="la", per_page=2, page=3) == ([a[0]], 5)
    assert ids("/jobs", status="queued") == ([a[4]], 1)
    assert ids("/jobs", status="running") == ([b[2]], 1)
    assert ids("/jobs", job_type="a0", queue="la") == ([a[4], a[2], a[0]], 3)
    assert ids("/jobs", status="dead", job_type="a1") == ([a[3], a[1]], 2)


def test_cancel_reason_and_list_filters(server: Clocked, worker: Jobs, admin: Jobs) -> None:
    a, b = _enqueue_many(worker, {"job_type": "x", "queue": "f1"}, {"job_type": "y", "queue": "f2"})
    assert admin.ok("POST", f"/jobs/{a['id']}/cancel", {"reason": "dup"})["last_error"] == "dup"
    assert admin.ok("POST", f"/jobs/{b['id']}/cancel", {})["last_error"] is None
    assert [j["id"] for j in admin.ok("GET", "/dlq", queue="f1")["items"]] == [a["id"]]
    assert [j["id"] for j in admin.ok("GET", "/jobs", job_type="y")["items"]] == [b["id"]]
    assert [j["id"] for j in admin.ok("GET", "/jobs", status="dead", per_page=1, page=2)["items"]] == [a["id"]]  # newest first
    assert admin.ok("GET", "/history", limit=1)["items"] == []


def test_a_recurring_entrys_job_takes_integral_floats_as_integers(server: Clocked, admin: Jobs) -> None:
    """JSON Schema counts 5.0 as an integer (the single and batch bodies take it so): the job
    inside a recurring entry too, when added and when changed, and the values take effect."""
    job = {"job_type": "report", "queue": "rq", "priority": 7.0, "max_attempts": 2.0, "backoff_seconds": 5.0}
    entry = admin.ok("POST", "/recurring", {"name": "floats", "cron": "0 3 * * *", "catch_up_limit": 3.0, "job": job})
    changed = admin.ok("PATCH", f"/recurring/{entry['id']}", {"job": {**job, "priority": 9.0}, "catch_up_limit": 4.0})
    assert changed["catch_up_limit"] == 4
    ran = admin.ok("POST", f"/recurring/{entry['id']}/run_now")
    assert (ran["priority"], ran["max_attempts"], ran["backoff_seconds"], ran["queue"]) == (9, 2, 5, "rq")
    r = admin.request("PATCH", f"/recurring/{entry['id']}", {"job": {**job, "priority": 9.5}})
    assert r.status_code == 400 and "priority" in r.json()["error"]
