"""The failure policy over HTTP: fail with retry false or retry_in_seconds, snooze, run now, and
the backoff options in the enqueue body."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .jobs import Jobs, fresh_queue
from .servers import Roles, Server


@pytest.fixture(scope="module")
def admin(retry_server: Server, roles: Roles) -> Iterator[Jobs]:
    with Jobs(retry_server.base, roles.admin) as jobs:
        yield jobs


def _claimed(worker: Jobs, queue: str, **fields: object) -> dict[str, object]:
    made = worker.enqueue("policy", queue=queue, **fields)
    got = worker.claim(queue)
    assert got["claimed"] and got["job"]["id"] == made["id"]
    job: dict[str, object] = got["job"]
    return job


def test_fail_without_retry_is_discarded_and_retry_in_overrides_the_backoff(worker: Jobs) -> None:
    q = fresh_queue()
    job = _claimed(worker, q)
    dead = worker.ok("POST", f"/jobs/{job['id']}/fail", {"error": "card 4000 invalid", "retry": False})
    assert (dead["status"], dead["dead_reason"], dead["attempts"]) == ("dead", "discarded", 1)
    assert isinstance(dead["error_fingerprint"], str) and dead["triage_hold"] is False
    job = _claimed(worker, q)
    later = worker.ok("POST", f"/jobs/{job['id']}/fail", {"error": "429", "retry_in_seconds": 600})
    assert later["status"] == "queued" and later["run_after"] - later["updated_at"] == 600_000
    r = worker.request("POST", f"/jobs/{job['id']}/fail", {"error": "x", "retry": False, "retry_in_seconds": 5})
    assert r.status_code in (400, 409) and "error" in r.json()


def test_snooze_gives_the_attempt_back(worker: Jobs) -> None:
    q = fresh_queue()
    job = _claimed(worker, q, max_attempts=1)
    back = worker.ok("POST", f"/jobs/{job['id']}/snooze", {"seconds": 300, "attempt": 1})
    assert (back["status"], back["attempts"], back["snoozes"]) == ("queued", 0, 1)
    assert back["run_after"] - back["updated_at"] == 300_000
    r = worker.request("POST", f"/jobs/{job['id']}/snooze", {"seconds": 5})
    assert r.status_code == 409  # no longer running
    assert worker.request("POST", f"/jobs/{job['id']}/snooze", {"seconds": -1}).status_code == 400


def test_run_now_is_for_admins_and_makes_a_scheduled_job_due(worker: Jobs, admin: Jobs) -> None:
    q = fresh_queue()
    job = worker.enqueue("policy", queue=q, run_after=4_102_444_800_000, max_backoff_seconds=60, backoff_jitter=0.25)
    assert (job["max_backoff_seconds"], job["backoff_jitter"]) == (60, 0.25)
    assert worker.claim(q) == {"claimed": False}
    assert worker.request("POST", f"/jobs/{job['id']}/run_now", {}).status_code == 403
    due = admin.ok("POST", f"/jobs/{job['id']}/run_now", {})
    assert due["run_after"] <= due["updated_at"]
    assert worker.claim(q)["job"]["id"] == job["id"]
    assert admin.request("POST", f"/jobs/{job['id']}/run_now", {}).status_code == 409  # running
