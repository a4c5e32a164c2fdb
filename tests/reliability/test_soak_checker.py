"""The soak's history checker must fail when a write is lost, appears unasked, is applied twice
or is applied although it was refused; otherwise it proves nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stdbmod import Database, ManualClock
from stdbmod.retry import create_retry_module
from tests.soak.history import Follower, HistoryChecker

from .workloads import OWNER, W1


class World:
    def __init__(self, tmp_path: Path) -> None:
        self.db = Database.create(tmp_path / "db", create_retry_module().module, owner=OWNER, clock=ManualClock())
        self.db.call("grant_worker", W1, sender=OWNER)
        self.path = tmp_path / "c0.jsonl"
        self.path.touch()
        self.checker = HistoryChecker([str(self.path)])
        self.n = 0

    def line(self, **r: Any) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(r) + "\n")

    def op(self, op: str, key: str, status: Any, do: bool, **extra: Any) -> Any:
        """Log an operation answered `status`; `do`: whether it really happens in the database."""
        self.n += 1
        self.line(t="i", c=0, n=self.n, op=op, who=W1.to_hex(), key=key, **{k: v for k, v in extra.items() if k == "task"})
        result = None
        if do:
            if op == "enqueue":
                result = self.db.call("enqueue", "job", None, {"tok": key}, None, None, None, 0, key, sender=W1)
            elif op == "claim":
                result = self.db.call("claim", None, key, 30, sender=W1)
            elif op == "complete":
                result = self.db.call("complete", extra["task"], {"tok": key}, sender=W1)
        answer: dict[str, Any] = {"t": "r", "c": 0, "n": self.n, "st": status}
        if result is not None:
            answer["id"] = result.id
        if op == "claim" and status == 200:
            answer["claimed"] = extra.get("claimed", result is not None)
        self.line(**answer)
        return result

    def problems(self) -> list[str]:
        return self.checker.check(self.db)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.db.close()


def test_a_consistent_history_passes(world: World) -> None:
    t = world.op("enqueue", "k1", 200, True)
    world.op("enqueue", "k1", 200, True)  # the same key again: the same task
    world.op("enqueue", "k2", "unknown", True)  # died after committing
    world.op("enqueue", "k3", "unknown", False)  # died before
    world.op("enqueue", "k4", "unsent", False)
    world.op("claim", "w1", 200, True)
    world.op("complete", "r1", 200, True, task=t.id)
    world.op("complete", "r2", 409, False, task=t.id)  # refused
    assert world.problems() == []


def test_a_lost_acknowledged_write_is_found(world: World) -> None:
    world.op("enqueue", "k1", 200, False)
    assert any(p.startswith("LOST") for p in world.problems())


def test_a_write_nobody_asked_for_is_found(world: World) -> None:
    world.db.call("enqueue", "job", None, None, None, None, None, 0, "ghost", sender=W1)
    assert any("nobody asked" in p for p in world.problems())


def test_a_refused_write_that_happened_is_found(world: World) -> None:
    world.op("enqueue", "k1", 409, True)
    assert any(p.startswith("UNEXPECTED") for p in world.problems())


def test_an_unsent_write_that_happened_is_found(world: World) -> None:
    world.op("enqueue", "k1", "unsent", True)
    assert any(p.startswith("UNEXPECTED") for p in world.problems())


def test_a_claim_answered_empty_that_took_a_task_is_found(world: World) -> None:
    world.op("enqueue", "k1", 200, True)
    world.op("claim", "w1", 200, True, claimed=False)  # answered "nothing to claim", yet it took one
    assert any(p.startswith("UNEXPECTED") for p in world.problems())


def test_a_completion_missing_from_the_state_is_found(world: World) -> None:
    t = world.op("enqueue", "k1", 200, True)
    world.op("claim", "w1", 200, True)
    world.op("complete", "r1", 200, True, task=t.id)
    assert world.problems() == []
    world.op("complete", "r2", 200, False, task=t.id)  # acknowledged, never committed
    problems = world.problems()
    assert any("LOST" in p and "r2" in p for p in problems), problems


def test_five_hundreds_are_reported(world: World) -> None:
    world.line(t="i", c=0, n=99, op="read", who=W1.to_hex())
    world.line(t="r", c=0, n=99, st=500, body="boom")
    assert any(p.startswith("5xx") for p in world.problems())


def test_the_replay_follower_notices_a_divergence(world: World, tmp_path: Path) -> None:
    db = world.db
    scratch = Database.create(tmp_path / "scratch", db.module, owner=db.owner, name=db.name, identity=db.identity, run_init=False, durable=False)
    try:
        f = Follower(scratch)
        world.op("enqueue", "k1", 200, True)
        assert f.follow(db) == []
        world.op("enqueue", "k2", 200, True)
        assert f.follow(db) == []
        w = db.storage.begin_write()  # a row changed behind the log's back
        from stdbmod.runtime import spaces

        w.delete(spaces.rows("task"), next(iter(w.scan(spaces.rows("task"))))[0])
        w.commit()
        assert f.follow(db) == ["the commit log does not replay to the live state"]
    finally:
        scratch.close()
