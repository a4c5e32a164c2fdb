"""Issue 21's behaviours over HTTP, against an in-process server: lifecycle calls refused with
400, the owner's private calls, arguments keyed by name, the schedule horizon, delete and
try_insert, the log stream (`logs?follow=true`, NDJSON) and dangling connections at startup."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from stdbmod import At, Database, Identity, ManualClock, codec
from stdbmod.errors import ReducerFailed
from stdbmod.http import SigningKey, create_app
from stdbmod.runtime.schedules import MAX_DELAY_MICROS
from tests.runtime.test_fidelity import Ping, m

from .servers import ThreadServer, bearer


@dataclass
class Env:
    db: Database
    base: str
    owner: dict[str, str]
    alice: dict[str, str]
    alice_id: Identity

    def call(self, who: dict[str, str], reducer: str, body: object) -> httpx.Response:
        content = body if isinstance(body, bytes) else codec.json_encoder.encode(body)
        return httpx.post(f"{self.base}/v1/database/fidelity/call/{reducer}", content=content, headers=who, timeout=30)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    key = SigningKey.generate()
    owner_claims, alice_claims = key.claims("owner"), key.claims("alice")
    owner = key.verify_token(key.issue_token(owner_claims)).identity
    db = Database.create(tmp_path / "db", m, owner=owner, clock=ManualClock())
    alice_token = key.issue_token(alice_claims)
    try:
        with ThreadServer(create_app(db, key=key, run_scheduler=False)) as server:
            yield Env(db, server.base, bearer(key.issue_token(owner_claims)), bearer(alice_token), key.verify_token(alice_token).identity)
    finally:
        db.close()


def test_lifecycle_call_is_400_with_spacetimedbs_message(env: Env) -> None:
    for name, variant in (("client_connected", "OnConnect"), ("on_disconnect", "OnDisconnect"), ("init", "Init")):
        for who in (env.alice, env.owner):
            r = env.call(who, name, [])
            assert (r.status_code, r.json()) == (400, {"error": f"can't directly call special {variant} lifecycle reducer"})


def test_scheduled_reducer_is_the_owners_to_call(env: Env) -> None:
    row = [Ping(1, At(env.db.clock.now()), "by hand")]
    r = env.call(env.alice, "ping", row)
    assert r.status_code == 404 and r.json()["error"].startswith("no such reducer: ping")
    assert env.call(env.owner, "ping", row).status_code == 200
    with env.db.read() as view:
        assert [s.what for s in view.db.seen.iter() if s.what.startswith("ping")] == ["ping by hand"]


def test_arguments_as_an_object_and_exact_deletes(env: Env) -> None:
    r = env.call(env.alice, "add", {"qty": 3, "name": "apple"})
    assert r.status_code == 200
    item = r.json()
    assert env.call(env.alice, "delete_as", {"id": item, "name": "apple", "qty": 4}).json() is False
    assert env.call(env.alice, "delete_as", [item, "apple", 3]).json() is True
    bad = env.call(env.alice, "add", {"name": "x", "colour": "red"})
    assert bad.status_code == 400 and "unknown field `colour`" in bad.json()["error"]
    r = env.call(env.alice, "add_twice", {"name": "plum"})
    assert (r.status_code, r.json()) == (200, "duplicate value 'plum' for unique column item.name")


def test_a_schedule_too_far_ahead_is_the_reducers_530(env: Env) -> None:
    r = env.call(env.alice, "schedule_raising", [MAX_DELAY_MICROS])
    assert r.status_code == 530 and r.json()["error"].startswith("Unable to schedule with long delay at")
    r = env.call(env.alice, "log_at", ["warning"])
    assert (r.status_code, r.json()) == (530, {"error": ReducerFailed.generic_message})


def test_logs_follow_streams_ndjson_woken_by_commits(env: Env) -> None:
    env.call(env.alice, "log_at", ["info"])
    url = f"{env.base}/v1/database/fidelity/logs?follow=true&num_lines=1"
    with httpx.stream("GET", url, headers=env.owner, timeout=30) as stream:
        assert stream.status_code == 200 and stream.headers["content-type"] == "application/x-ndjson"
        lines = stream.iter_lines()
        first = json.loads(next(lines))
        assert (first["level"], first["reducer"], first["message"]) == ("info", "log_at", "hello")
        env.call(env.alice, "log_at", ["warn"])  # a commit with a log line
        env.call(env.alice, "schedule_raising", [MAX_DELAY_MICROS])  # a failed call: its error line
        second, third = json.loads(next(lines)), json.loads(next(lines))
        assert (second["level"], second["offset"]) == ("warn", first["offset"] + 1)
        assert (third["level"], third["reducer"]) == ("error", "schedule_raising")
    assert httpx.get(url, headers=env.alice, timeout=30).status_code == 403
    assert httpx.get(url.replace("true", "maybe"), headers=env.owner, timeout=30).status_code == 400


def test_dangling_connections_are_disconnected_when_the_server_starts(tmp_path: Path) -> None:
    key = SigningKey.generate()
    owner = Identity.from_claims("test", "owner")
    bob = Identity.from_claims("test", "bob")
    db = Database.create(tmp_path / "db", m, owner=owner, clock=ManualClock())
    try:
        conn = db.connect(bob)  # the server died with bob connected
        with ThreadServer(create_app(db, key=key, run_scheduler=False)):
            assert db.dangling_connections() == []
            with db.read() as view:
                assert [s.what for s in view.db.seen.iter()] == [f"connect {conn}", f"disconnect {conn}"]
    finally:
        db.close()


def test_owner_sql_dml_over_http_is_a_logged_transaction_with_its_sender(env: Env) -> None:
    url = f"{env.base}/v1/database/fidelity/sql"
    r = httpx.post(url, content=b"INSERT INTO item (id, name, qty) VALUES (77, 'quince', 2)", headers=env.owner, timeout=30)
    assert r.status_code == 200, r.text
    refused = httpx.post(url, content=b"DELETE FROM item WHERE id = 77", headers=env.alice, timeout=30)
    assert refused.status_code == 403
    sql = [r for r in env.db.commit_log() if r.kind == "sql"]
    assert [(r.kind, Identity(r.sender)) for r in sql] == [("sql", env.db.owner)]
    with env.db.read() as view:
        assert view.db.item.id.find(77) is not None
