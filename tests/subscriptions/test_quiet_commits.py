"""Commits no query reads ("quiet" ones) do not wake the subscriptions' thread one by one (issue
15: live subscribers must not slow calls that concern none of them); they wait in its inbox. What
a subscriber sees must not change: a commit it reads is delivered at once however many quiet
ones came before it, `sync` returns as soon as everything is handed over, and a subscription
added after quiet commits neither misses nor repeats one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stdbmod import Database, Identity
from stdbmod.retry import create_retry_module
from stdbmod.runtime.subscriptions import Applied, Update

from .helpers import Collector

OWNER = Identity.from_claims("test", "quiet-owner")
WORKER = Identity.from_claims("test", "quiet-worker")
WORKERS = "SELECT * FROM retry_worker"  # the lifecycle never writes it
TASKS = "SELECT * FROM task"


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = Database.create(tmp_path / "db", create_retry_module().module, owner=OWNER, durable=False)
    yield d
    d.close()


def lifecycles(db: Database, n: int) -> None:
    for i in range(n):
        db.call("enqueue", "email", None, {"i": i}, sender=OWNER)
        task = db.call("claim", None, "w", sender=OWNER)
        db.call("complete", task.id, {"ok": True}, sender=OWNER)


def test_a_commit_a_query_reads_is_delivered_at_once_after_quiet_ones(db: Database) -> None:
    got = Collector()
    db.subscribe([WORKERS], got, sender=OWNER, inline=True)
    lifecycles(db, 5)  # 15 quiet commits: fewer than the hub gathers before it wakes on its own
    assert got.of(Update) == []
    db.call("grant_worker", WORKER, sender=OWNER)
    # no sync(): the commit itself must wake the hub
    assert got.wait(lambda events: any(isinstance(e, Update) for e in events), timeout=20)
    (update,) = got.of(Update)
    assert [w.identity for w in update.inserts("retry_worker")] == [WORKER]


def test_sync_returns_once_quiet_commits_are_handed_over(db: Database) -> None:
    got = Collector()
    sub = db.subscribe([WORKERS], got, sender=OWNER, inline=True)
    lifecycles(db, 3)
    assert sub.sync(timeout=20)  # it wakes the hub for what waits in its inbox, not the timeout
    assert [type(e) for e in got.events] == [Applied]


def test_a_subscription_added_after_quiet_commits_misses_none_and_repeats_none(db: Database) -> None:
    quiet = Collector()
    db.subscribe([WORKERS], quiet, sender=OWNER, inline=True)
    lifecycles(db, 3)  # quiet for the subscriber above, still in the hub's inbox
    tasks = Collector()
    sub = db.subscribe([TASKS], tasks, sender=OWNER, inline=True)
    assert sorted(t.id for t in sub.initial[0].rows) == [1, 2, 3]
    lifecycles(db, 2)
    assert sub.sync(timeout=20)
    updates = tasks.of(Update)
    assert len(updates) == 6  # the two lifecycles' six calls, none of the first three lifecycles'
    assert sorted({t.id for u in updates for t in u.inserts("task")}) == [4, 5]
    assert quiet.of(Update) == []
