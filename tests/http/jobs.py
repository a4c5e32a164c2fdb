"""A small client of seed 000's routes for the tests."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from .servers import bearer

PREFIX = "/api:job-retry"

SEED_FIELDS = {
    "id", "created_at", "updated_at", "queue", "job_type", "payload", "status", "attempts", "max_attempts",
    "backoff_seconds", "run_after", "claimed_at", "claimed_by", "last_attempted_at", "last_error", "completed_at", "result",
}
EXTRA_FIELDS = {
    "dead_reason", "priority", "lease_expires_at", "lease_holder", "idempotency_key", "finished_at",
    "snoozes", "max_backoff_seconds", "backoff_jitter", "error_fingerprint", "triage_hold", "recurring_id",
}


def fresh_queue() -> str:
    return f"q-{uuid.uuid4().hex[:12]}"


class Jobs:
    def __init__(self, base: str, token: str) -> None:
        self.client = httpx.Client(base_url=base + PREFIX, headers=bearer(token), timeout=30)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Jobs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, body: Any = None, **params: Any) -> httpx.Response:
        return self.client.request(method, path, json=body, params=params or None)

    def ok(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        r = self.request(method, path, body, **params)
        assert r.status_code == 200, (r.status_code, r.text)
        return r.json()

    def enqueue(self, job_type: str = "send_welcome_email", **fields: Any) -> dict[str, Any]:
        job: dict[str, Any] = self.ok("POST", "/jobs", {"job_type": job_type, **fields})
        return job

    def claim(self, queue: str, worker_id: str = "worker-1", **fields: Any) -> dict[str, Any]:
        claimed: dict[str, Any] = self.ok("POST", "/jobs/claim", {"queue": queue, "worker_id": worker_id, **fields})
        return claimed
