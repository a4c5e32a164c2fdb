"""Seed 000's routes, and the extensions, against a real server with the task-retry module."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from .jobs import EXTRA_FIELDS, SEED_FIELDS, Jobs, fresh_queue
from .servers import Roles, Server, bearer


@pytest.fixture(scope="module")
def admin(retry_server: Server, roles: Roles) -> Iterator[Jobs]:
    with Jobs(retry_server.base, roles.admin) as jobs:
        yield jobs


@pytest.fixture
def queue() -> str:
    return fresh_queue()


# --- enqueue --------------------------------------------------------------------------------------


def test_enqueue_the_seed_example(worker: Jobs, queue: str) -> None:
    now_ms = time.time() * 1000
    job = worker.enqueue("send_welcome_email", queue=queue, payload={"user_id": 42}, max_attempts=5, backoff_seconds=30)
    assert set(job) == SEED_FIELDS | EXTRA_FIELDS
    assert job["job_type"] == "send_welcome_email" and job["payload"] == {"user_id": 42} and job["queue"] == queue
    assert (job["status"], job["attempts"], job["max_attempts"], job["backoff_seconds"]) == ("queued", 0, 5, 30)
    assert abs(job["created_at"] - now_ms) < 60_000 and job["run_after"] == job["created_at"]
    assert job["claimed_at"] is job["claimed_by"] is job["completed_at"] is job["result"] is None


def test_enqueue_defaults(worker: Jobs) -> None:
    job = worker.enqueue("x")
    assert (job["queue"], job["max_attempts"], job["backoff_seconds"], job["priority"]) == ("default", 5, 30, 0)


def test_run_after_in_epoch_millis_or_rfc3339(worker: Jobs, queue: str) -> None:
    ms = 4_102_444_800_000  # 2100-01-01
    assert worker.enqueue(queue=queue, run_after=ms)["run_after"] == ms
    assert worker.enqueue(queue=queue, run_after="2100-01-01T00:00:00Z")["run_after"] == ms
    assert worker.claim(queue) == {"claimed": False}  # jobs are not claimable before run_after


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"job_type": ""},
        {"job_type": "a\u0000b"},
        {"job_type": "x", "max_attemptz": 3},
        {"job_type": "x", "max_attempts": 0},
        {"job_type": "x", "max_attempts": "5"},
        {"job_type": "x", "backoff_seconds": -1},
        {"job_type": "x", "run_after": "tomorrow"},
        {"job_type": "x", "run_after": -5},
        {"job_type": "x", "payload": 123456789012345678901234567890},
        ["job_type", "x"],
    ],
)
def test_enqueue_rejects_bad_bodies(worker: Jobs, body: object) -> None:
    r = worker.request("POST", "/jobs", body)
    assert r.status_code == 400, r.text
    assert isinstance(r.json()["error"], str)


def test_enqueue_rejects_non_json(worker: Jobs) -> None:
    r = worker.client.post("/jobs", content=b"job_type=x", headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 400 and "JSON" in r.json()["error"]


def test_idempotency_key(worker: Jobs, queue: str) -> None:
    a = worker.enqueue(queue=queue, idempotency_key="order-17")
    b = worker.enqueue(queue=queue, idempotency_key="order-17")
    assert a["id"] == b["id"] and a["idempotency_key"] == "order-17"


# --- claim, complete, fail ------------------------------------------------------------------------


def test_claim_nothing_ready_is_exactly_claimed_false(worker: Jobs, queue: str) -> None:
    r = worker.request("POST", "/jobs/claim", {"queue": queue, "worker_id": "worker-1"})
    assert r.status_code == 200 and r.json() == {"claimed": False}


def test_claim_then_complete(worker: Jobs, queue: str) -> None:
    job = worker.enqueue(queue=queue, payload={"n": 1})
    got = worker.claim(queue, "worker-1")
    assert got["claimed"] is True and set(got) == {"claimed", "job"}
    running = got["job"]
    assert running["id"] == job["id"] and running["status"] == "running" and running["attempts"] == 1
    assert running["claimed_by"] == "worker-1" and running["lease_expires_at"] > running["claimed_at"]
    assert worker.claim(queue) == {"claimed": False}
    done = worker.ok("POST", f"/jobs/{job['id']}/complete", {"result": {"ok": True}})
    assert done["status"] == "completed" and done["result"] == {"ok": True} and done["completed_at"] is not None
    again = worker.request("POST", f"/jobs/{job['id']}/complete", {"result": None})
    assert again.status_code == 409


def test_claim_by_priority(worker: Jobs, queue: str) -> None:
    low = worker.enqueue(queue=queue)
    high = worker.enqueue(queue=queue, priority=10)
    assert worker.claim(queue)["job"]["id"] == high["id"]
    assert worker.claim(queue)["job"]["id"] == low["id"]


def test_complete_without_body(worker: Jobs, queue: str) -> None:
    job = worker.enqueue(queue=queue)
    worker.claim(queue)
    r = worker.client.post(f"/jobs/{job['id']}/complete")
    assert r.status_code == 200 and r.json()["status"] == "completed" and r.json()["result"] is None


def test_fail_requeues_with_backoff(worker: Jobs, queue: str) -> None:
    job = worker.enqueue(queue=queue, backoff_seconds=30)
    worker.claim(queue)
    failed = worker.ok("POST", f"/jobs/{job['id']}/fail", {"error": "provider 5xx"})
    assert failed["status"] == "queued" and failed["last_error"] == "provider 5xx" and failed["attempts"] == 1
    assert failed["run_after"] == failed["updated_at"] + 30_000  # backoff * 2^(attempts-1)
    assert worker.claim(queue) == {"claimed": False}


def test_fail_needs_an_error(worker: Jobs, queue: str) -> None:
    job = worker.enqueue(queue=queue)
    worker.claim(queue)
    assert worker.request("POST", f"/jobs/{job['id']}/fail", {}).status_code == 400
    assert worker.request("POST", f"/jobs/{job['id']}/fail", {"error": 5}).status_code == 400


def test_exhausted_job_goes_to_the_dead_letter_tier_then_requeue_and_delete(worker: Jobs, admin: Jobs, queue: str) -> None:
    job = worker.enqueue(queue=queue, max_attempts=2, backoff_seconds=0)
    for _ in range(2):
        assert worker.claim(queue)["claimed"] is True
        last = worker.ok("POST", f"/jobs/{job['id']}/fail", {"error": "boom"})
    assert (last["status"], last["dead_reason"], last["attempts"]) == ("dead", "exhausted", 2)
    dlq = admin.ok("GET", "/dlq", queue=queue)
    assert [j["id"] for j in dlq["items"]] == [job["id"]] and dlq["total"] == 1
    requeued = admin.ok("POST", f"/dlq/{job['id']}/requeue")
    assert (requeued["status"], requeued["attempts"]) == ("queued", 0)
    assert admin.ok("GET", "/dlq", queue=queue)["total"] == 0
    # a live job cannot be deleted from the dead-letter tier
    assert admin.request("DELETE", f"/dlq/{job['id']}").status_code == 409
    worker.claim(queue)
    worker.ok("POST", f"/jobs/{job['id']}/fail", {"error": "boom"})
    worker.claim(queue)
    worker.ok("POST", f"/jobs/{job['id']}/fail", {"error": "boom"})
    assert admin.ok("DELETE", f"/dlq/{job['id']}") == {"deleted": True, "id": job["id"]}
    assert admin.request("GET", f"/jobs/{job['id']}").status_code == 404
    assert admin.request("DELETE", f"/dlq/{job['id']}").status_code == 404


def test_requeue_a_live_job_is_409(worker: Jobs, admin: Jobs, queue: str) -> None:
    job = worker.enqueue(queue=queue)
    assert admin.request("POST", f"/dlq/{job['id']}/requeue").status_code == 409


# --- beyond the seed ------------------------------------------------------------------------------


def test_heartbeat_extends_the_lease(worker: Jobs, queue: str) -> None:
    job = worker.enqueue(queue=queue)
    lease = worker.claim(queue, lease_seconds=60)["job"]["lease_expires_at"]
    beat = worker.ok("POST", f"/jobs/{job['id']}/heartbeat", {"lease_seconds": 3600})
    assert beat["lease_expires_at"] >= lease + 3_000_000 - 60_000
    assert worker.request("POST", f"/jobs/{job['id']}/heartbeat", {"lease_seconds": 0}).status_code == 400


def test_stale_worker_gets_409(worker: Jobs, worker2: Jobs, queue: str) -> None:
    job = worker.enqueue(queue=queue, backoff_seconds=0)
    assert worker.claim(queue, "a")["claimed"]
    worker.ok("POST", f"/jobs/{job['id']}/fail", {"error": "slow"})
    assert worker2.claim(queue, "b")["job"]["attempts"] == 2  # the job moved on to another worker
    for path, body in (("complete", {"result": 1}), ("fail", {"error": "late"}), ("heartbeat", {})):
        r = worker.request("POST", f"/jobs/{job['id']}/{path}", body)
        assert r.status_code == 409, (path, r.text)
        assert "lease" in r.json()["error"]
    assert worker2.ok("POST", f"/jobs/{job['id']}/complete", {"result": 2})["status"] == "completed"


def test_cancel_a_queued_or_running_job(worker: Jobs, admin: Jobs, queue: str) -> None:
    job = worker.enqueue(queue=queue)
    assert worker.request("POST", f"/jobs/{job['id']}/cancel", {}).status_code == 403
    cancelled = admin.ok("POST", f"/jobs/{job['id']}/cancel", {"reason": "not needed"})
    assert (cancelled["status"], cancelled["dead_reason"]) == ("dead", "cancelled")
    assert admin.request("POST", f"/jobs/{job['id']}/cancel").status_code == 409  # already dead
    running = worker.enqueue(queue=queue)
    worker.claim(queue)
    assert admin.ok("POST", f"/jobs/{running['id']}/cancel")["dead_reason"] == "cancelled"
    r = worker.request("POST", f"/jobs/{running['id']}/complete", {})
    assert r.status_code == 409 and r.json()["code"] == "cancelled"


def test_unknown_job_ids(worker: Jobs, admin: Jobs) -> None:
    for path in ("/jobs/999999999", f"/jobs/{2**64}"):
        r = admin.request("GET", path)
        assert r.status_code == 404 and "error" in r.json()
    assert worker.request("POST", "/jobs/999999999/complete", {}).status_code == 404
    assert worker.request("GET", "/jobs/abc").status_code == 404
    assert admin.request("POST", "/dlq/999999999/requeue").status_code == 404


# --- reading --------------------------------------------------------------------------------------


def test_list_filters_and_paginates(worker: Jobs, admin: Jobs, queue: str) -> None:
    ids = [worker.enqueue("a" if i % 2 else "b", queue=queue)["id"] for i in range(7)]
    worker.claim(queue)
    page1 = admin.ok("GET", "/jobs", queue=queue, per_page=3)
    assert set(page1) == {"items", "page", "per_page", "total"}
    assert (page1["page"], page1["per_page"], page1["total"], len(page1["items"])) == (1, 3, 7, 3)
    page3 = admin.ok("GET", "/jobs", queue=queue, per_page=3, page=3)
    assert len(page3["items"]) == 1
    seen = [j["id"] for p in (1, 2, 3) for j in admin.ok("GET", "/jobs", queue=queue, per_page=3, page=p)["items"]]
    assert sorted(seen) == sorted(ids)
    assert {j["job_type"] for j in admin.ok("GET", "/jobs", queue=queue, job_type="a")["items"]} == {"a"}
    assert admin.ok("GET", "/jobs", queue=queue, job_type="a")["total"] == 3
    assert admin.ok("GET", "/jobs", queue=queue, status="running")["total"] == 1
    assert admin.ok("GET", "/jobs", queue=queue, status="queued")["total"] == 6
    assert admin.ok("GET", "/jobs", queue=queue, status="", job_type="")["total"] == 7  # empty = absent


@pytest.mark.parametrize("params", [{"per_page": 0}, {"per_page": 201}, {"per_page": "x"}, {"page": 0}, {"status": "failed"}])
def test_list_rejects_bad_parameters(admin: Jobs, params: dict[str, object]) -> None:
    r = admin.request("GET", "/jobs", **params)
    assert r.status_code == 400 and "error" in r.json()


def test_get_job(worker: Jobs, admin: Jobs, roles: Roles, retry_server: Server, queue: str) -> None:
    job = worker.enqueue(queue=queue)
    assert worker.ok("GET", f"/jobs/{job['id']}")["id"] == job["id"]
    assert admin.ok("GET", f"/jobs/{job['id']}") == worker.ok("GET", f"/jobs/{job['id']}")
    plain = httpx.get(f"{retry_server.base}/api:job-retry/jobs/{job['id']}", headers=bearer(roles.plain))
    assert plain.status_code == 403


def test_reading_pending_work_needs_an_admin(worker: Jobs) -> None:
    for path in ("/jobs", "/dlq", "/history"):
        r = worker.request("GET", path)
        assert r.status_code == 403 and "admin" in r.json()["error"]


def test_history(worker: Jobs, admin: Jobs, queue: str) -> None:
    job = worker.enqueue("hist", queue=queue, backoff_seconds=0)
    worker.claim(queue, "w-h")
    worker.ok("POST", f"/jobs/{job['id']}/fail", {"error": "first"})
    worker.claim(queue, "w-h")
    worker.ok("POST", f"/jobs/{job['id']}/complete", {})
    items = admin.ok("GET", "/history", limit=2)["items"]
    assert [(a["task_id"], a["attempt"], a["outcome"], a["error"], a["worker"]) for a in items] == [
        (job["id"], 2, "completed", None, "w-h"),
        (job["id"], 1, "failed", "first", "w-h"),
    ]
    assert admin.request("GET", "/history", limit=0).status_code == 400
