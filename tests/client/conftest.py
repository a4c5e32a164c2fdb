"""A real server on loopback for the client tests: uvicorn in a thread of the test process over a
database whose clock the test moves (leases and backoff end when the test says so; `expire` runs
the reaper), with an admin (the owner) and a worker identity."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from stdbmod import Database, ManualClock
from stdbmod.client import Client, Worker
from stdbmod.http.app import create_app
from stdbmod.local.tokens import SigningKey
from stdbmod.retry import create_retry_module
from tests.http.servers import ThreadServer


@dataclass
class World:
    db: Database
    clock: ManualClock
    base: str
    tokens: dict[str, str]
    identities: dict[str, str]

    def client(self, who: str = "owner") -> Client:
        return Client(self.base, self.tokens[who])

    def worker(self, who: str = "worker", **options: Any) -> Worker:
        options = {"lease_seconds": 30, "poll_max_seconds": 0.2, "retry_max_wait": 0.5, "grace_seconds": 10.0, **options}
        return Worker(self.base, token=self.tokens[who], **options)

    def expire(self, seconds: float) -> int:
        """Move the server's clock and run what fell due (backoff timers, the lease sweep)."""
        self.clock.advance(seconds)
        return self.db.run_due()

    def task(self, task_id: int) -> Any:
        with self.db.read() as v:
            return v.db.task.id.find(task_id)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    key = SigningKey.generate()
    claims = {who: key.claims(who) for who in ("owner", "worker", "plain")}
    clock = ManualClock()
    db = Database.create(tmp_path / "db", create_retry_module().module, owner=claims["owner"].identity, clock=clock)
    db.call("grant_worker", claims["worker"].identity, sender=db.owner)
    try:
        with ThreadServer(create_app(db, key=key, run_scheduler=False)) as server:
            yield World(db, clock, server.base, {w: key.issue_token(c) for w, c in claims.items()}, {w: c.identity.to_hex() for w, c in claims.items()})
    finally:
        db.close()
