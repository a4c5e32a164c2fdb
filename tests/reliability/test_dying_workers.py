"""Dying workers, over real HTTP from separate worker processes, with the server's clock in the
test's hand (a ManualClock; leases end when the test says so, and `run_due` runs the reaper):

- a worker SIGKILLed mid-job: its task comes back after the lease and runs again (at-least-once);
- a paused worker (SIGSTOP) whose lease ended: its late complete is refused, the new holder's is
  accepted, the task completes once;
- several hammering worker processes, one killed: no claim while a lease holds, no task completes
  twice, every change of every task follows the state machine (checked over the commit log).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from stdbmod import Database, ManualClock
from stdbmod.codec import msgpack_encoder
from stdbmod.http.app import create_app
from stdbmod.local.tokens import SigningKey
from stdbmod.retry import create_retry_module
from tests.http.servers import ThreadServer

from .faults import env
from .invariants import TransitionChecker, retry_invariants

WORKERS = ("w1", "w2", "w3", "w4", "w5")


@dataclass
class World:
    db: Database
    clock: ManualClock
    base: str
    tokens: dict[str, str]
    identities: dict[str, Any]

    def worker(self, who: str, *mode: str) -> Worker:
        cmd = [sys.executable, "-m", "tests.reliability.worker", self.base, self.tokens[who], who, *(mode or ("interactive",))]
        return Worker(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env()))

    def enqueue(self, n: int = 1, **options: Any) -> list[int]:
        owner = self.db.owner
        return [self.db.call("submit", "job", None, {"n": i}, options.get("max_attempts", 3), 0, sender=owner).id for i in range(n)]

    def task(self, task_id: int) -> Any:
        with self.db.read() as v:
            return v.db.task.id.find(task_id)

    def expire_leases(self, seconds: float = 61) -> int:
        self.clock.advance(seconds)
        return self.db.run_due()


class Worker:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc

    def do(self, command: str) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the worker died: {command}"
        return json.loads(line)  # type: ignore[no-any-return]

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def finish(self) -> list[dict[str, Any]]:
        out, _ = self.proc.communicate(timeout=120)
        return [json.loads(line) for line in out.splitlines()]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=30)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    key = SigningKey.generate()
    claims = {who: key.claims(who) for who in ("owner", *WORKERS)}
    clock = ManualClock()
    db = Database.create(tmp_path / "db", create_retry_module().module, owner=claims["owner"].identity, clock=clock)
    for who in WORKERS:
        db.call("grant_worker", claims[who].identity, sender=db.owner)
    try:
        with ThreadServer(create_app(db, key=key, run_scheduler=False)) as server:
            yield World(db, clock, server.base, {who: key.issue_token(c) for who, c in claims.items()}, {w: c.identity for w, c in claims.items()})
        checker = TransitionChecker()
        assert checker.feed(db) == []
        assert retry_invariants(db) == [] and db.check_integrity() == []
    finally:
        db.close()


def test_a_killed_workers_task_comes_back_after_the_lease_and_runs_again(world: World) -> None:
    [task] = world.enqueue()
    w1, w2 = world.worker("w1"), world.worker("w2")
    try:
        got = w1.do("claim 60")
        assert got["claimed"] and got["id"] == task and got["attempts"] == 1
        w1.signal(signal.SIGKILL)  # dies mid-job
        assert w2.do("claim 60")["claimed"] is False  # the lease still holds
        world.clock.advance(59)
        world.db.run_due()
        assert w2.do("claim 60")["claimed"] is False  # ...until it ends
        assert world.expire_leases(2) == 1  # the reaper
        t = world.task(task)
        assert t.status.value == "queued" and t.attempts == 1 and "lease expired" in t.last_error
        again = w2.do("claim 60")
        assert again["claimed"] and again["id"] == task and again["attempts"] == 2  # at-least-once
        assert w2.do(f"complete {task}")["status"] == 200
        assert world.task(task).status.value == "completed"
    finally:
        w1.kill()
        w2.kill()


def test_a_paused_workers_late_complete_is_refused(world: World) -> None:
    [task] = world.enqueue()
    zombie, w2 = world.worker("w1"), world.worker("w2")
    try:
        assert zombie.do("claim 30")["id"] == task
        zombie.signal(signal.SIGSTOP)  # a long GC pause, a frozen VM...
        world.expire_leases(31)
        assert w2.do("claim 30")["attempts"] == 2
        zombie.signal(signal.SIGCONT)
        late = zombie.do(f"complete {task}")
        assert late["status"] == 409  # refused: its lease is over
        assert zombie.do(f"fail {task}")["status"] == 409
        assert zombie.do(f"heartbeat {task}")["status"] == 409
        assert w2.do(f"complete {task}")["status"] == 200
        assert w2.do(f"complete {task}")["status"] == 409  # a completed task is final
        t = world.task(task)
        assert t.status.value == "completed" and t.result == {"by": "w2"}
    finally:
        zombie.kill()
        w2.kill()


def test_a_paused_worker_sharing_an_identity_is_refused_by_its_attempt(world: World) -> None:
    """Two processes with one identity: the lease check alone cannot tell them apart, the attempt
    each claimed (sent with complete, fail and heartbeat) does."""
    [task] = world.enqueue()
    zombie, fresh = world.worker("w1"), world.worker("w1")
    try:
        assert zombie.do("claim 30")["id"] == task
        zombie.signal(signal.SIGSTOP)
        world.expire_leases(31)
        assert fresh.do("claim 30")["attempts"] == 2
        zombie.signal(signal.SIGCONT)
        for late in ("heartbeat", "fail", "complete"):
            r = zombie.do(f"{late} {task}")
            assert r["status"] == 409, r
        assert world.task(task).status.value == "running" and world.task(task).attempts == 2
        assert fresh.do(f"complete {task}")["status"] == 200
    finally:
        zombie.kill()
        fresh.kill()


def test_hammering_workers_never_share_a_task_and_nothing_completes_twice(world: World) -> None:
    tasks = set(world.enqueue(60, max_attempts=4))
    victim = world.worker("w1", "hammer", "1")
    others = [world.worker(w, "hammer", str(i)) for i, w in enumerate(("w2", "w3", "w4"), start=2)]
    assert victim.proc.stdout is not None
    seen = [victim.proc.stdout.readline() for _ in range(4)]  # let it work a little...
    victim.signal(signal.SIGKILL)  # ...then kill it wherever it is
    # Read the rest through the same buffered file: `communicate(timeout=...)` reads the pipe's fd
    # directly and would drop lines `readline` had already buffered (a lost "complete 200").
    with victim.proc.stdin, victim.proc.stdout:  # type: ignore[union-attr]
        rest = victim.proc.stdout.read()
    victim.proc.wait(timeout=30)
    events = [json.loads(line) for line in [*seen, *rest.splitlines()] if line.endswith("}") or line.endswith("}\n")]
    events += [e for w in others for e in w.finish()]
    for _ in range(20):  # the victim's lease ends; fresh workers drain what is left
        world.expire_leases()
        with world.db.read() as v:
            left = [t.id for t in v.db.task.iter() if t.status.value in ("queued", "running")]
        if not left:
            break
        events += [e for w in [world.worker("w5", "hammer", "9")] for e in w.finish()]
    with world.db.read() as v:
        final = {t.id: t for t in v.db.task.iter()}
    assert set(final) == tasks
    assert all(t.status.value in ("completed", "dead") for t in final.values()), [t.status for t in final.values()]

    accepted = [e for e in events if e["op"] == "complete" and e["status"] == 200]
    assert len(accepted) == len({e["task"] for e in accepted})  # no task completed twice
    assert all(final[e["task"]].status.value == "completed" for e in accepted)
    completed = sum(t.status.value == "completed" for t in final.values())
    assert completed - 1 <= len(accepted) <= completed  # the victim may have died before printing one
    claims = [(e["id"], e["attempts"]) for e in events if e["op"] == "claim" and e.get("claimed")]
    assert len(claims) == len(set(claims))  # no (task, attempt) handed out twice
    checker = TransitionChecker()
    assert checker.feed(world.db) == []  # no claim of a running task: no lease overlap, in commit order
    assert checker.completions == completed
    assert checker.reruns > 0  # failures and the killed worker made tasks run again


def test_the_transition_checker_sees_a_lease_overlap(world: World) -> None:
    [task] = world.enqueue()
    world.db.call("claim", None, "a", 30, sender=world.identities["w1"])
    records = world.db.commit_log()
    rec = records[-1]
    table = world.db.module.tables["task"]
    row = next(table.row_format.decode(raw) for c in rec.changes if c.table == "task" for raw in c.inserts)
    stolen = msgspec.structs.replace(row, attempts=2, lease_holder=world.identities["w2"])
    change = msgspec.structs.replace(rec.changes[0], table="task", inserts=[msgpack_encoder.encode(stolen)])
    forged = msgspec.structs.replace(rec, offset=rec.offset + 1, changes=[change])
    checker = TransitionChecker()
    problems = checker.feed_records([*records, forged], table.row_format.decode)
    assert any("lease overlap" in p for p in problems), problems
    assert task == row.id
