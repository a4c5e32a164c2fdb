"""The dashboard's server side as the tests drive it: jobs made over seed 000's routes, and
signing a browser in."""

from __future__ import annotations

import re
from typing import Any

import httpx

from tests.http.servers import Server, bearer

J = "/api:job-retry"


def post(server: Server, path: str, token: str, body: Any = None) -> dict[str, Any]:
    r = httpx.post(server.base + J + path, json=body if body is not None else {}, headers=bearer(token), timeout=30)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def job(server: Server, token: str, job_id: int) -> dict[str, Any]:
    r = httpx.get(f"{server.base}{J}/jobs/{job_id}", headers=bearer(token), timeout=30)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def dead_job(server: Server, token: str, queue: str, error: str = "provider 5xx") -> int:
    """A job in the dead-letter tier: one attempt allowed, claimed, failed."""
    j = post(server, "/jobs", token, {"job_type": "webhook", "queue": queue, "payload": {"url": "https://example.com/hook"}, "max_attempts": 1})
    claimed = post(server, "/jobs/claim", token, {"queue": queue, "worker_id": "test-worker"})
    assert claimed["job"]["id"] == j["id"]
    assert post(server, f"/jobs/{j['id']}/fail", token, {"error": error})["status"] == "dead"
    return int(j["id"])


def sign_in(page: Any, token: str) -> None:
    """Paste `token` into the sign-in form, as a person would."""
    page.goto("/dashboard/login")
    page.fill("#token", token)
    page.click("#sign-in")


def csrf_of(html: str) -> str:
    m = re.search(r'name="csrf" value="([^"]+)"', html)
    assert m is not None, "no CSRF token in the page"
    return m.group(1)
