"""Dead-letter triage and recurring jobs over HTTP: groups, a dry run, bulk requeue and delete, an
operation's progress; the recurring routes end to end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .jobs import Jobs, fresh_queue
from .servers import Roles, Server


@pytest.fixture(scope="module")
def admin(retry_server: Server, roles: Roles) -> Iterator[Jobs]:
    with Jobs(retry_server.base, roles.admin) as jobs:
        yield jobs


def _dead(worker: Jobs, queue: str, job_type: str, error: str) -> dict[str, object]:
    made = worker.enqueue(job_type, queue=queue)
    assert worker.claim(queue)["job"]["id"] == made["id"]
    job: dict[str, object] = worker.ok("POST", f"/jobs/{made['id']}/fail", {"error": error, "retry": False})
    return job


def test_groups_dry_run_bulk_requeue_and_delete(worker: Jobs, admin: Jobs) -> None:
    q = fresh_queue()
    a = _dead(worker, q, "sync", "timeout after 3012 ms for user 42")
    _dead(worker, q, "sync", "timeout after 2999 ms for user 7")
    _dead(worker, q, "export", "KeyError: 'user_id'")
    groups = admin.ok("GET", "/dlq/groups", queue=q)["groups"]
    assert [(g["count"], g["job_types"], g["shape"]) for g in groups] == [
        (2, ["sync"], "timeout after <n> ms for user <n>"), (1, ["export"], "KeyError: '?'")]  # fmt: skip
    assert groups[0]["fingerprint"] == a["error_fingerprint"] and groups[0]["first_seen"] <= groups[0]["last_seen"]
    dry = admin.ok("POST", "/dlq/bulk_requeue", {"group": a["error_fingerprint"], "queue": q, "dry_run": True})
    assert dry["dry_run"] is True and dry["count"] == 2 and [j["id"] for j in dry["sample"]][0] == a["id"]
    assert admin.ok("GET", "/dlq/groups", queue=q)["groups"] == groups  # the dry run changed nothing
    done = admin.ok("POST", "/dlq/bulk_requeue", {"group": a["error_fingerprint"], "queue": q})
    assert done["dry_run"] is False and done["operation"]["processed"] == 2 and done["operation"]["done"] is True
    assert admin.ok("GET", f"/dlq/operations/{done['operation']['id']}")["action"] == "requeue"
    assert worker.ok("GET", f"/jobs/{a['id']}")["status"] == "queued"
    gone = admin.ok("POST", "/dlq/bulk_delete", {"job_type": "export", "queue": q})
    assert gone["operation"]["processed"] == 1
    assert admin.ok("GET", "/dlq/groups", queue=q)["groups"] == []
    assert admin.request("POST", "/dlq/bulk_delete", {"finished_after": -1}).status_code == 400
    assert admin.request("GET", "/dlq/operations/999999").status_code == 404


def test_recurring_routes(admin: Jobs) -> None:
    body = {"name": fresh_queue(), "cron": "30 2 * * *", "timezone": "Europe/Paris", "job": {"job_type": "report", "payload": {"k": 1}}}
    made = admin.ok("POST", "/recurring", body)
    assert (made["cron"], made["catch_up"], made["enabled"], made["job"]["payload"]) == ("30 2 * * *", "skip", True, {"k": 1})
    assert made["next_fire"] > made["created_at"]
    assert admin.request("POST", "/recurring", body).status_code == 400  # the name is taken
    assert admin.request("POST", "/recurring", {**body, "name": "x", "cron": "@reboot"}).status_code == 400
    assert admin.request("POST", "/recurring", {**body, "name": "y", "timezone": "Mars/Base"}).status_code == 400
    rid = made["id"]
    changed = admin.ok("PATCH", f"/recurring/{rid}", {"catch_up": "each", "catch_up_limit": 3})
    assert (changed["catch_up"], changed["catch_up_limit"], changed["cron"]) == ("each", 3, "30 2 * * *")
    assert admin.ok("POST", f"/recurring/{rid}/disable", {})["next_fire"] is None
    assert admin.ok("POST", f"/recurring/{rid}/enable", {})["enabled"] is True
    job = admin.ok("POST", f"/recurring/{rid}/run_now", {})
    assert (job["job_type"], job["recurring_id"]) == ("report", rid)
    assert rid in [r["id"] for r in admin.ok("GET", "/recurring")["items"]]
    assert admin.ok("DELETE", f"/recurring/{rid}") == {"deleted": True, "id": rid}
    assert admin.request("POST", f"/recurring/{rid}/enable", {}).status_code == 404
