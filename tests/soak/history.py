"""Checking the clients' histories against the server's commit log (Jepsen's total-queue idea,
with the commit log as the final read).

Every write a client makes carries a token the commit record keeps, so each committed
transaction names the call that made it. For every token:

- acknowledged (200 that wrote) <= committed <= acknowledged + unknown: fewer is a LOST write,
  more is an UNEXPECTED one (nobody asked, or it was applied twice, or a refused or unsent call
  was applied after all);
- an idempotency key is committed at most once, and exactly once if any enqueue with it was
  acknowledged; every acknowledgement of it names the same task;
- at most one complete is committed per task (no task completes twice);
- no answer is a 5xx.

Everything is incremental (files and the log are append-only), so a soak of hundreds of restarts
re-reads only what is new.
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from stdbmod import Database, Identity
from stdbmod.runtime import CommitRecord

SETUP = {"grant_worker", "add_admin", "set_history_cap", "set_default_lease"}
SCHEDULED = {"scheduled", "schedule_cleanup", "init"}


@dataclass
class Op:
    c: int
    n: int
    op: str
    who: str
    key: str | None
    task: int | None = None
    stale: bool = False
    status: Any = "pending"  # an HTTP status, "unsent", "unknown", or "pending" (no answer yet)
    claimed: bool | None = None
    id: int | None = None

    def token(self) -> tuple[str, ...] | None:
        if self.key is None or self.op == "read":
            return None
        if self.op == "heartbeat":
            return ("heartbeat", self.who, self.key)
        return (self.op, self.key)

    @property
    def acked_write(self) -> bool:
        return self.status == 200 and (self.op != "claim" or bool(self.claimed))

    @property
    def maybe(self) -> bool:
        return self.status in ("unknown", "pending")


def record_token(db: Database, rec: CommitRecord) -> tuple[str, ...] | None:
    """The token of the call that made `rec`; None for setup, lifecycle and scheduled records."""
    if rec.kind in SCHEDULED or rec.reducer in SETUP:
        return None
    args = db.module.reducers[rec.reducer].msgpack_decoder.decode(rec.args)
    r = rec.reducer
    if r == "enqueue":
        return ("enqueue", args.idempotency_key)
    if r == "claim":
        return ("claim", args.worker_id)
    if r == "complete":
        tok = args.result.get("tok") if isinstance(args.result, dict) else None
        return ("complete", str(tok))
    if r == "fail":
        return ("fail", args.error)
    if r == "heartbeat":
        return ("heartbeat", Identity(rec.sender).to_hex(), f"{args.task_id}:{args.lease_seconds}")
    if r == "requeue":
        return ("requeue", str(args.task_id))
    return ("unexpected reducer", r)


@dataclass
class Figures:
    invoked: int = 0
    acked_writes: int = 0
    unknown: int = 0
    unsent: int = 0
    refused: int = 0
    reads: int = 0
    records: int = 0
    server_errors: int = 0


class HistoryChecker:
    def __init__(self, paths: list[str]) -> None:
        self.paths = paths
        self._offsets = dict.fromkeys(paths, 0)
        self.ops: dict[tuple[int, int], Op] = {}
        self.committed: Counter[tuple[str, ...]] = Counter()
        self.completes: Counter[int] = Counter()
        self.log_offset = 0
        self.problems: list[str] = []
        self.server_errors: list[str] = []

    # --- reading ----------------------------------------------------------------------------

    def read_histories(self) -> None:
        for path in self.paths:
            if not os.path.exists(path):
                continue
            with open(path, "rb") as f:
                f.seek(self._offsets[path])
                data = f.read()
            end = data.rfind(b"\n") + 1  # a line still being written is read next time
            self._offsets[path] += end
            for line in data[:end].splitlines():
                self._line(json.loads(line))

    def _line(self, r: dict[str, Any]) -> None:
        k = (r["c"], r["n"])
        if r["t"] == "i":
            self.ops[k] = Op(r["c"], r["n"], r["op"], r["who"], r.get("key"), r.get("task"), r.get("stale", False))
            return
        op = self.ops[k]
        op.status = r["st"]
        op.claimed = r.get("claimed")
        op.id = r.get("id")
        if isinstance(op.status, int) and op.status >= 500:
            self.server_errors.append(f"{op.op} c{op.c}-{op.n}: {op.status} {r.get('body', '')}")

    def read_log(self, db: Database) -> None:
        for rec in db.iter_commit_log(self.log_offset):
            self.log_offset = rec.offset + 1
            tok = record_token(db, rec)
            if tok is None:
                continue
            self.committed[tok] += 1
            if tok[0] == "complete":
                task_id = db.module.reducers["complete"].msgpack_decoder.decode(rec.args).task_id
                self.completes[task_id] += 1

    # --- checking -----------------------------------------------------------------------------

    def check(self, db: Database) -> list[str]:
        """Read what is new and check everything; the problems (empty: all good)."""
        self.read_histories()
        self.read_log(db)
        problems: list[str] = [f"5xx: {e}" for e in self.server_errors]
        by_token: dict[tuple[str, ...], list[Op]] = defaultdict(list)
        for op in self.ops.values():
            tok = op.token()
            if tok is not None:
                by_token[tok].append(op)
        for tok, ops in by_token.items():
            committed = self.committed.get(tok, 0)
            acked = sum(op.acked_write for op in ops)
            maybe = sum(op.maybe for op in ops)
            if tok[0] == "enqueue":
                ids = {op.id for op in ops if op.status == 200}
                if len(ids) > 1:
                    problems.append(f"idempotency key {tok[1]} answered with tasks {sorted(ids, key=lambda i: -1 if i is None else i)}")
                acked, maybe = min(acked, 1), min(maybe, 1)
                if committed > 1:
                    problems.append(f"UNEXPECTED: idempotency key {tok[1]} created {committed} tasks")
            if committed < acked:
                problems.append(f"LOST: {tok} acknowledged {acked}x, committed {committed}x")
            elif committed > acked + maybe:
                answers = [op.status if op.op != "claim" else (op.status, op.claimed) for op in ops]
                problems.append(f"UNEXPECTED: {tok} committed {committed}x, answers {answers}")
        for tok, n in self.committed.items():
            if tok not in by_token:
                problems.append(f"UNEXPECTED: {tok} committed {n}x and nobody asked")
        problems += [f"task {t} completed {n} times" for t, n in self.completes.items() if n > 1]
        problems += self._state(db, by_token)
        return problems

    def _state(self, db: Database, by_token: dict[tuple[str, ...], list[Op]]) -> list[str]:
        """Terminal facts the state must show: each acknowledged enqueue's task exists under its
        key; each acknowledged complete left its task completed with that result."""
        problems: list[str] = []
        with db.read() as v:
            for tok, ops in by_token.items():
                acked = [op for op in ops if op.acked_write]
                if not acked:
                    continue
                if tok[0] == "enqueue":
                    task = v.db.task.id.find(acked[0].id)
                    if task is None or task.idempotency_key != tok[1]:
                        problems.append(f"LOST: the task of acknowledged key {tok[1]} is not there")
                elif tok[0] == "complete":
                    task = v.db.task.id.find(acked[0].task)
                    if task is None or task.status.value != "completed" or task.result != {"tok": tok[1]}:
                        problems.append(f"LOST: acknowledged completion {tok[1]} of task {acked[0].task} is not in the state")
        return problems

    def figures(self) -> Figures:
        f = Figures(records=self.log_offset, server_errors=len(self.server_errors))
        for op in self.ops.values():
            f.invoked += 1
            if op.op == "read":
                f.reads += 1
            elif op.acked_write:
                f.acked_writes += 1
            elif op.status == "unsent":
                f.unsent += 1
            elif op.maybe:
                f.unknown += 1
            elif isinstance(op.status, int) and op.status != 200:
                f.refused += 1
        return f


@dataclass
class Follower:
    """Replays the commit log into a scratch database incrementally; its state must always equal
    the live one."""

    scratch: Database
    offset: int = 0
    problems: list[str] = field(default_factory=list)

    def follow(self, db: Database) -> list[str]:
        from stdbmod.runtime import apply_changes

        if self.offset:
            last = db.commit_log(self.offset - 1, 1)
            mine = self.scratch.commit_log(self.offset - 1, 1)
            if last != mine:
                return [f"the commit log changed under offset {self.offset - 1}"]
        new = list(db.iter_commit_log(self.offset))
        apply_changes(self.scratch, new)
        if new:
            self.offset = new[-1].offset + 1
        if self.scratch.state_hash() != db.state_hash():
            return ["the commit log does not replay to the live state"]
        return []
