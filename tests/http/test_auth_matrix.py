"""Every route × every kind of caller: no token, bad tokens, a plain identity, a worker, an admin,
the owner. Authentication fails with 401 before anything else; a valid identity without the
role gets 403; the roles that may use a route never get 401/403 (nor a 5xx)."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from stdbmod.local.tokens import AUDIENCE, LOCAL_ISSUER, SigningKey, load_or_create_key

from .servers import Roles, Server

BAD = ["no token", "garbage", "basic scheme", "empty bearer", "forged", "expired", "alg none", "wrong audience"]
GOOD = ["plain", "worker", "admin", "owner"]


def _b64(obj: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


@dataclass
class World:
    server: Server
    roles: Roles
    headers: dict[str, dict[str, str]]
    identities: dict[str, str]
    job_id: int
    recurring_id: int = 0


@pytest.fixture(scope="module")
def world(retry_server: Server, roles: Roles) -> World:
    key = load_or_create_key(retry_server.data)  # the server's own key: the test owns the server
    claims = {"iss": LOCAL_ISSUER, "sub": "someone", "aud": AUDIENCE, "iat": 1}
    tokens = {
        "garbage": "Bearer not-a-token",
        "basic scheme": "Basic dXNlcjpwYXNz",
        "empty bearer": "Bearer",
        "forged": "Bearer " + SigningKey.generate().issue_token(SigningKey.generate().claims("someone")),
        "expired": "Bearer " + key.issue_token(key.claims("someone", expires_in=10, now=1_000)),
        "alg none": "Bearer " + f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(claims)}.",
        "wrong audience": "Bearer " + __import__("jwt").encode({**claims, "aud": "other"}, key._secret, algorithm="HS256"),
    }
    headers: dict[str, dict[str, str]] = {"no token": {}}
    headers.update({k: {"Authorization": v} for k, v in tokens.items()})
    for role in GOOD:
        headers[role] = {"Authorization": f"Bearer {getattr(roles, role)}"}
    owner_identity = httpx.get(f"{retry_server.base}/v1/database/retry", headers=headers["owner"]).json()["owner_identity"]
    identities = {**roles.identities, "owner": owner_identity}
    job = httpx.post(f"{retry_server.base}/api:job-retry/jobs", json={"job_type": "matrix", "queue": "matrix"}, headers=headers["owner"])
    assert job.status_code == 200
    rec = httpx.post(f"{retry_server.base}/api:job-retry/recurring", headers=headers["owner"],
                     json={"name": "matrix", "cron": "@daily", "job": {"job_type": "matrix", "queue": "matrix"}})  # fmt: skip
    assert rec.status_code == 200, rec.text
    return World(retry_server, roles, headers, identities, job.json()["id"], rec.json()["id"])


# (method, path, body, who may use it). A callable path or body is given the caller's role name.
Route = tuple[str, Any, Any, str]
J = "/api:job-retry"
ROUTES: list[Route] = [
    ("GET", "/v1/ping", None, "public"),
    ("POST", "/v1/identity", None, "public"),
    ("GET", "/openapi.json", None, "public"),
    ("GET", lambda w, who: f"/v1/identity/{w.identities.get(who, 'c200' + '0' * 60)}/verify", None, "identity"),
    ("GET", "/v1/database/retry", None, "identity"),
    ("POST", "/v1/database/retry/call/claim", [], "identity"),
    ("GET", "/v1/database/retry/schema", None, "identity"),
    ("GET", "/v1/database/retry/logs", None, "owner"),
    ("POST", f"{J}/jobs", {"job_type": "matrix", "queue": "matrix"}, "worker"),
    ("GET", f"{J}/jobs", None, "admin"),
    ("POST", f"{J}/jobs/claim", {"queue": "matrix-empty"}, "worker"),
    ("POST", f"{J}/jobs/enqueue_many", {"jobs": [{"job_type": "matrix", "queue": "matrix"}]}, "worker"),
    ("POST", f"{J}/jobs/claim_many", {"limit": 1, "queue": "matrix-empty"}, "worker"),
    ("POST", f"{J}/jobs/complete_many", {"jobs": [{"id": 1}]}, "worker"),
    ("GET", lambda w, who: f"{J}/jobs/{w.job_id}", None, "worker"),
    ("POST", lambda w, who: f"{J}/jobs/{w.job_id}/complete", {"result": None}, "worker"),
    ("POST", lambda w, who: f"{J}/jobs/{w.job_id}/fail", {"error": "x"}, "worker"),
    ("POST", lambda w, who: f"{J}/jobs/{w.job_id}/heartbeat", {}, "worker"),
    ("POST", lambda w, who: f"{J}/jobs/{w.job_id}/cancel", {}, "admin"),
    ("POST", lambda w, who: f"{J}/jobs/{w.job_id}/snooze", {"seconds": 5}, "worker"),
    ("POST", lambda w, who: f"{J}/jobs/{w.job_id}/run_now", {}, "admin"),
    ("GET", f"{J}/dlq", None, "admin"),
    ("POST", lambda w, who: f"{J}/dlq/{w.job_id}/requeue", None, "admin"),
    ("DELETE", lambda w, who: f"{J}/dlq/{w.job_id}", None, "admin"),
    ("GET", f"{J}/history", None, "admin"),
    ("GET", f"{J}/recurring", None, "admin"),
    ("POST", f"{J}/recurring", lambda w, who: {"name": f"matrix-{who}", "cron": "@daily", "job": {"job_type": "matrix", "queue": "matrix"}}, "admin"),
    ("PATCH", lambda w, who: f"{J}/recurring/{w.recurring_id}", {"catch_up": "one"}, "admin"),
    ("POST", lambda w, who: f"{J}/recurring/{w.recurring_id}/disable", {}, "admin"),
    ("POST", lambda w, who: f"{J}/recurring/{w.recurring_id}/enable", {}, "admin"),
    ("POST", lambda w, who: f"{J}/recurring/{w.recurring_id}/run_now", {}, "admin"),
    ("DELETE", lambda w, who: f"{J}/recurring/{w.recurring_id + 1000}", None, "admin"),
    ("GET", f"{J}/queues", None, "admin"),
    ("POST", f"{J}/queues/matrix-paused/pause", None, "admin"),
    ("POST", f"{J}/queues/matrix-paused/resume", None, "admin"),
    ("POST", f"{J}/queues/matrix-limited/limits", {"concurrency": 5}, "admin"),
    ("GET", f"{J}/dlq/groups", None, "admin"),
    ("POST", f"{J}/dlq/bulk_requeue", {"queue": "matrix-empty", "dry_run": True}, "admin"),
    ("POST", f"{J}/dlq/bulk_delete", {"queue": "matrix-empty"}, "admin"),
    ("GET", f"{J}/dlq/operations/1", None, "admin"),
    ("GET", f"{J}/retention", None, "admin"),
    ("POST", f"{J}/retention/completed", {"max_age_seconds": 604800}, "admin"),
]

ALLOWED = {
    "public": set(GOOD),
    "identity": set(GOOD),
    "owner": {"owner"},
    "worker": {"worker", "admin", "owner"},  # the owner is the first admin
    "admin": {"admin", "owner"},
}


def _request(w: World, route: Route, who: str) -> httpx.Response:
    method, path, body, _ = route
    url = w.server.base + (path(w, who) if callable(path) else path)
    return httpx.request(method, url, json=body(w, who) if callable(body) else body, headers=w.headers[who])


def _id(route: Route) -> str:
    method, path, _, _ = route
    return f"{method} {path if isinstance(path, str) else path(World(None, None, {}, {}, 1), 'x')}"  # type: ignore[arg-type]


@pytest.mark.parametrize("route", ROUTES, ids=_id)
@pytest.mark.parametrize("who", BAD + GOOD)
def test_auth_matrix(world: World, route: Route, who: str) -> None:
    access = route[3]
    r = _request(world, route, who)
    assert r.content == b"" or r.headers["content-type"] == "application/json", r.headers
    if who in BAD:
        if access == "public" and who == "no token":
            assert r.status_code == 200, r.text
        else:
            assert r.status_code == 401, (r.status_code, r.text)
            assert "error" in r.json()
            assert r.headers["www-authenticate"].startswith("Bearer")
    elif route[0:2] == ("POST", "/v1/database/retry/call/claim") and who == "plain":
        # any identity may call; the module refuses, and through /call that is SpacetimeDB's 530
        assert r.status_code == 530 and "worker role" in r.json()["error"]
    elif who in ALLOWED[access]:
        assert r.status_code not in (401, 403) and r.status_code < 500, (r.status_code, r.text)
    else:
        assert r.status_code == 403, (r.status_code, r.text)
        assert "error" in r.json()
