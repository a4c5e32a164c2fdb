"""The batch routes beside seed 000's: enqueue_many, claim_many, complete_many, on a real server."""

from __future__ import annotations

import pytest

from .jobs import EXTRA_FIELDS, SEED_FIELDS, Jobs, fresh_queue


def test_a_batch_round_trip(worker: Jobs) -> None:
    q = fresh_queue()
    made = worker.ok("POST", "/jobs/enqueue_many", {"jobs": [
        {"job_type": "a", "queue": q, "payload": {"n": 1}},
        {"job_type": "b", "queue": q, "priority": 5, "run_after": 0},
        {"job_type": "c", "queue": q, "run_after": 4_102_444_800_000},  # 2100: not ready
    ]})["jobs"]
    assert [j["job_type"] for j in made] == ["a", "b", "c"] and all(set(j) == SEED_FIELDS | EXTRA_FIELDS for j in made)
    assert made[1]["run_after"] == 0 and made[2]["run_after"] == 4_102_444_800_000

    got = worker.ok("POST", "/jobs/claim_many", {"limit": 10, "queue": q, "worker_id": "w-batch"})["jobs"]
    assert [j["job_type"] for j in got] == ["b", "a"]  # priority first; "c" is not due
    assert {(j["status"], j["claimed_by"], j["attempts"]) for j in got} == {("running", "w-batch", 1)}

    done = worker.ok("POST", "/jobs/complete_many", {"jobs": [{"id": got[0]["id"], "result": "ok"}, {"id": got[1]["id"]}]})["jobs"]
    assert [(j["id"], j["status"], j["result"]) for j in done] == [(got[0]["id"], "completed", "ok"), (got[1]["id"], "completed", None)]
    assert worker.ok("POST", "/jobs/claim_many", {"limit": 10, "queue": q})["jobs"] == []


def test_complete_many_is_all_or_nothing(worker: Jobs, worker2: Jobs) -> None:
    q = fresh_queue()
    worker.ok("POST", "/jobs/enqueue_many", {"jobs": [{"job_type": "x", "queue": q}] * 3})
    mine = worker.ok("POST", "/jobs/claim_many", {"limit": 2, "queue": q})["jobs"]
    theirs = worker2.claim(q)["job"]
    r = worker.request("POST", "/jobs/complete_many", {"jobs": [{"id": mine[0]["id"]}, {"id": theirs["id"]}]})
    assert r.status_code == 409 and str(theirs["id"]) in r.json()["error"]
    assert worker.ok("GET", f"/jobs/{mine[0]['id']}")["status"] == "running"  # nothing of the batch happened


def test_enqueue_many_is_all_or_nothing(worker: Jobs) -> None:
    q = fresh_queue()
    r = worker.request("POST", "/jobs/enqueue_many", {"jobs": [{"job_type": "ok", "queue": q}, {"job_type": "bad", "queue": q, "run_after": "soon"}]})
    assert r.status_code == 400 and "run_after" in r.json()["error"]
    assert worker.ok("POST", "/jobs/claim_many", {"limit": 5, "queue": q})["jobs"] == []


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/jobs/enqueue_many", {"jobs": []}),
        ("/jobs/enqueue_many", {"jobs": [{"job_type": "x"}] * 1001}),
        ("/jobs/enqueue_many", {"jobs": [{"job_type": "x", "bogus": 1}]}),
        ("/jobs/claim_many", {}),
        ("/jobs/claim_many", {"limit": 0}),
        ("/jobs/claim_many", {"limit": 1001}),
        ("/jobs/complete_many", {"jobs": []}),
        ("/jobs/complete_many", {"jobs": [{"id": -1}]}),
        ("/jobs/complete_many", None),
    ],
)
def test_bad_batches_are_400s(worker: Jobs, path: str, body: object) -> None:
    r = worker.request("POST", path, body)
    assert r.status_code == 400 and "error" in r.json(), (r.status_code, r.text)


def test_complete_many_of_an_unknown_job_is_404(worker: Jobs) -> None:
    for job_id in (10**12, 2**63):
        r = worker.request("POST", "/jobs/complete_many", {"jobs": [{"id": job_id}]})
        assert r.status_code == 404 and "error" in r.json(), (r.status_code, r.text)


def test_integral_floats_in_batch_items_are_integers(worker: Jobs) -> None:
    """JSON Schema counts 5.0 as an integer, and so do the single routes; the batch items too."""
    q = fresh_queue()
    made = worker.ok("POST", "/jobs/enqueue_many", {"jobs": [{"job_type": "f", "queue": q, "priority": 7.0, "max_attempts": 2.0}]})["jobs"]
    assert (made[0]["priority"], made[0]["max_attempts"]) == (7, 2)
    got = worker.ok("POST", "/jobs/claim_many", {"limit": 1.0, "queue": q})["jobs"]
    done = worker.ok("POST", "/jobs/complete_many", {"jobs": [{"id": float(got[0]["id"])}]})["jobs"]
    assert done[0]["status"] == "completed"
    r = worker.request("POST", "/jobs/enqueue_many", {"jobs": [{"job_type": "f", "priority": 7.5}]})
    assert r.status_code == 400
