"""Hostile input over HTTP: every request below gets a clear 4xx with a JSON error, never a 5xx,
and writes nothing (the state hash and the commit log are unchanged afterwards). Then a valid
request still works."""

from __future__ import annotations

import base64
import contextlib
import json
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from stdbmod import Database, ManualClock
from stdbmod.http.app import create_app
from stdbmod.http.inputs import DEFAULT_BODY_LIMIT
from stdbmod.local.tokens import AUDIENCE, LOCAL_ISSUER, SigningKey
from stdbmod.retry import create_retry_module
from tests.http.servers import ThreadServer

from .checks import log_length

J = "/api:job-retry"


@dataclass
class Target:
    db: Database
    base: str
    key: SigningKey
    token: str  # the owner: admin and worker rights, so only the input itself can be wrong

    def send(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None, token: str | None = None) -> httpx.Response:
        h = {"Authorization": f"Bearer {token or self.token}", "Content-Type": "application/json", **(headers or {})}
        return httpx.request(method, self.base + path, content=body, headers=h, timeout=30)


@contextlib.contextmanager
def serving(where: Path) -> Iterator[Target]:
    key = SigningKey.generate()
    owner = key.claims("owner")
    db = Database.create(where / "db", create_retry_module().module, owner=owner.identity, clock=ManualClock())
    db.call("submit", "existing", None, {"x": 1}, sender=owner.identity)
    try:
        with ThreadServer(create_app(db, key=key, run_scheduler=False)) as server:
            yield Target(db, server.base, key, key.issue_token(owner))
    finally:
        db.close()


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """One server for all the hostile requests; at the end nothing may have been written."""
    with serving(tmp_path_factory.mktemp("hostile")) as t:
        before = (t.db.state_hash(), log_length(t.db))
        yield t
        assert (t.db.state_hash(), log_length(t.db)) == before, "a hostile request wrote something"
        ok = t.send("POST", J + "/jobs", json.dumps({"job_type": "after"}).encode())
        assert ok.status_code == 200, ok.text  # and the server still serves


def test_arguments_nested_too_deeply_are_an_argument_error_in_process(target: Target) -> None:
    """Regression: msgspec raises RecursionError (not DecodeError) past its depth limit; it
    escaped as a 500 from the HTTP routes and /v1 calls, and as a RecursionError from db.call."""
    from stdbmod.errors import ArgumentError

    owner = target.db.owner
    with pytest.raises(ArgumentError, match="nested too deeply"):
        target.db.call_json("enqueue", b'["x", null, ' + b"[" * 100_000 + b"]" * 100_000 + b"]", sender=owner)
    payload: Any = []
    for _ in range(100_000):
        payload = [payload]
    with pytest.raises(ArgumentError, match="nested too deeply"):
        target.db.call("enqueue", "x", None, payload, sender=owner)


def test_nesting_just_under_the_limit_is_stored_and_read_back(tmp_path: Path) -> None:
    """Whatever depth the decoder accepts must also be stored, read and rendered: no 5xx on the
    way back out either."""
    accepted = 0
    with serving(tmp_path) as t:
        for n in range(900, 1001, 10):
            r = t.send("POST", "/v1/database/retry/call/enqueue", b'["x", null, ' + b"[" * n + b"]" * n + b"]")
            assert r.status_code in (200, 400), (n, r.status_code)
            if r.status_code == 200:
                accepted += 1
                task_id = int(re.match(rb'{"id":(\d+)', r.content).group(1))  # type: ignore[union-attr]
                got = t.send("GET", f"{J}/jobs/{task_id}")
                assert got.status_code == 200 and got.text.count("[") >= n
                assert t.send("GET", J + "/jobs?per_page=100").status_code == 200
        assert accepted > 0


def deep(n: int) -> bytes:
    return b'{"job_type": "deep", "payload": ' + b"[" * n + b"]" * n + b"}"


def _b64(obj: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


EMOJI_KEY = "\U0001f600" * 200  # 200 characters, 800 bytes: over LMDB's 511-byte key limit

BODIES: dict[str, tuple[str, str, bytes]] = {
    "body over the limit": ("POST", "/jobs", b'{"job_type": "big", "payload": "' + b"x" * DEFAULT_BODY_LIMIT + b'"}'),
    "nested 100000 deep": ("POST", "/jobs", deep(100_000)),
    "nested 2000 deep": ("POST", "/jobs", deep(2_000)),
    "huge integer field": ("POST", "/jobs", b'{"job_type": "n", "max_attempts": ' + b"9" * 400 + b"}"),
    "huge integer in payload": ("POST", "/jobs", b'{"job_type": "n", "payload": {"n": ' + b"9" * 400 + b"}}"),
    "integer over 64 bits in payload": ("POST", "/jobs", b'{"job_type": "n", "payload": 18446744073709551616}'),
    "huge float": ("POST", "/jobs", b'{"job_type": "n", "payload": 1e400}'),
    "negative priority overflow": ("POST", "/jobs", b'{"job_type": "n", "priority": -9223372036854775809}'),
    "run_after far away": ("POST", "/jobs", b'{"job_type": "n", "run_after": 99999999999999999999}'),
    "run_after garbage": ("POST", "/jobs", b'{"job_type": "n", "run_after": "yesterday"}'),
    "invalid UTF-8": ("POST", "/jobs", b'{"job_type": "\xff\xfe\xfd"}'),
    "lone surrogate": ("POST", "/jobs", b'{"job_type": "\\ud800"}'),
    "NUL in a name": ("POST", "/jobs", b'{"job_type": "a\\u0000b"}'),
    "job_type key over 511 bytes": ("POST", "/jobs", json.dumps({"job_type": EMOJI_KEY}).encode()),
    "idempotency key over 511 bytes": ("POST", "/jobs", json.dumps({"job_type": "k", "idempotency_key": EMOJI_KEY}).encode()),
    "queue key over 511 bytes": ("POST", "/jobs", json.dumps({"job_type": "k", "queue": EMOJI_KEY}).encode()),
    "name too long": ("POST", "/jobs", json.dumps({"job_type": "x" * 201}).encode()),
    "unknown field": ("POST", "/jobs", b'{"job_type": "x", "bogus": 1}'),
    "wrong type": ("POST", "/jobs", b'{"job_type": 5}'),
    "not an object": ("POST", "/jobs", b'["job_type"]'),
    "null": ("POST", "/jobs", b"null"),
    "truncated JSON": ("POST", "/jobs", b'{"job_type": "x"'),
    "empty body": ("POST", "/jobs", b""),
    "claim unknown field": ("POST", "/jobs/claim", b'{"worker": "x"}'),
    "claim lease 0": ("POST", "/jobs/claim", b'{"lease_seconds": 0}'),
    "claim lease huge": ("POST", "/jobs/claim", b'{"lease_seconds": 99999999999999999999}'),
    "complete a queued job": ("POST", "/jobs/1/complete", b"{}"),
    "complete no such job": ("POST", "/jobs/424242/complete", b"{}"),
    "job id over 64 bits": ("POST", "/jobs/999999999999999999999999/complete", b"{}"),
    "fail without error": ("POST", "/jobs/1/fail", b"{}"),
    "fail error too long": ("POST", "/jobs/1/fail", json.dumps({"error": "e" * 10_001}).encode()),
    "requeue a queued job": ("POST", "/dlq/1/requeue", b""),
    "page 0": ("GET", "/jobs?page=0", b""),
    "page negative": ("GET", "/jobs?page=-1", b""),
    "page huge": ("GET", "/jobs?page=100000000000000000000", b""),
    "page not a number": ("GET", "/jobs?page=abc", b""),
    "per_page 0": ("GET", "/jobs?per_page=0", b""),
    "per_page huge": ("GET", "/jobs?per_page=100000", b""),
    "dlq per_page huge": ("GET", "/dlq?per_page=100000", b""),
    "history limit huge": ("GET", "/history?limit=10000000", b""),
    "status unknown": ("GET", "/jobs?status=exploded", b""),
}


def test_invalid_utf8_in_a_query_is_a_400(target: Target) -> None:
    r = target.send("GET", J + "/jobs?queue=%ff%fe")
    assert r.status_code == 400 and "UTF-8" in r.json()["error"], r.text
    ok = target.send("GET", J + "/jobs?queue=%C3%A9t%C3%A9")  # valid UTF-8 (été) still filters
    assert ok.status_code == 200 and ok.json()["items"] == []


@pytest.mark.parametrize("case", sorted(BODIES))
def test_hostile_bodies_get_a_clear_4xx(target: Target, case: str) -> None:
    method, path, body = BODIES[case]
    r = target.send(method, J + path, body or None)
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    assert isinstance(r.json().get("error"), str) and r.json()["error"], r.text[:300]
    if case == "body over the limit":
        assert r.status_code == 413


V1_CALLS = {
    "unknown reducer": ("/v1/database/retry/call/explode", b"[]"),
    "scheduled reducer": ("/v1/database/retry/call/reap_lease", b"[]"),
    "lifecycle reducer": ("/v1/database/retry/call/retry_init", b"[]"),
    "arguments neither an array nor an object": ("/v1/database/retry/call/enqueue", b'"x"'),
    "arguments by an unknown name": ("/v1/database/retry/call/enqueue", b'{"job_type": "x", "colour": 1}'),
    "too many arguments": ("/v1/database/retry/call/enqueue", b'["x", null, null, null, null, null, 0, null, "extra"]'),
    "nested arguments": ("/v1/database/retry/call/enqueue", b'["x", null, ' + b"[" * 50_000 + b"]" * 50_000 + b"]"),
    "admin reducer bad argument": ("/v1/database/retry/call/set_history_cap", b"[-5]"),
    "unknown database": ("/v1/database/nope/call/enqueue", b'["x"]'),
}


@pytest.mark.parametrize("case", sorted(V1_CALLS))
def test_hostile_reducer_calls_get_a_clear_4xx(target: Target, case: str) -> None:
    path, body = V1_CALLS[case]
    r = target.send("POST", path, body)
    if case == "admin reducer bad argument":
        assert r.status_code == 530  # the reducer refused: SpacetimeDB's status for that, with its message
    else:
        assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    assert r.json().get("error"), r.text[:300]


def _tokens(t: Target) -> dict[str, str]:
    claims = {"iss": LOCAL_ISSUER, "sub": "owner", "aud": AUDIENCE, "iat": 1}
    other = SigningKey.generate()
    from cryptography.hazmat.primitives.asymmetric import rsa

    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return {
        "forged signature": t.token[: t.token.rindex(".") + 1] + "A" * 43,
        "another key": other.issue_token(other.claims("owner")),
        "expired": t.key.issue_token(t.key.claims("owner", expires_in=10, now=1_000)),
        "alg none": f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(claims)}.",
        "alg none, no dot": f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(claims)}",
        "RS256 with a stranger's key": jwt.encode(claims, rsa_key, algorithm="RS256"),
        "wrong audience": jwt.encode({**claims, "aud": "someone-else"}, t.key._secret, algorithm="HS256"),
        "no expiry claim tampered payload": t.token.split(".")[0] + "." + _b64({**claims, "sub": "admin"}) + "." + t.token.split(".")[2],
        "garbage": "not.a.token",
        "huge": "A" * 100_000,
    }


def test_bad_tokens_are_refused_and_write_nothing(target: Target) -> None:
    for name, token in _tokens(target).items():
        r = target.send("POST", J + "/jobs", b'{"job_type": "sneaky"}', token=token)
        assert r.status_code in (401, 431) or (400 <= r.status_code < 500), (name, r.status_code, r.text[:200])
        assert r.status_code != 200, name


def test_malformed_http_is_refused_at_the_door(target: Target) -> None:
    """Below the application: a lying Content-Length, an oversized header. The server answers 4xx
    or closes the connection, and keeps serving."""
    host, port = target.base.removeprefix("http://").split(":")
    for raw in (
        b"POST /api:job-retry/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 500\r\n\r\n{}",
        b"POST /api:job-retry/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
        b"GET /api:job-retry/jobs HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n",
        b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03",  # a TLS hello to a plain-HTTP port
    ):
        with socket.create_connection((host, int(port)), timeout=10) as s:
            try:
                s.sendall(raw)
                answer = s.recv(200)
            except OSError:
                answer = b""
        assert answer == b"" or answer.startswith(b"HTTP/1.1 4"), answer
    assert httpx.get(target.base + "/v1/ping").status_code == 200
