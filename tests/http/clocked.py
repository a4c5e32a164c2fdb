"""A task-retry server under a manual clock: the database and uvicorn in this process, speaking
real HTTP on a loopback port, so a test can set every instant of a story (and read the stored
rows a response must show)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from stdbmod import Database, Identity, ManualClock, Module
from stdbmod.http import SigningKey, create_app

from .jobs import Jobs
from .servers import ThreadServer

ROLES = ("owner", "worker", "worker2", "plain")


@dataclass
class Clocked:
    db: Database
    clock: ManualClock
    base: str
    tokens: dict[str, str]
    identities: dict[str, Identity]

    def jobs(self, who: str) -> Jobs:
        """Seed 000's routes as `who` (owner: the first admin; worker, worker2: the worker role;
        plain: no role)."""
        return Jobs(self.base, self.tokens[who])


@contextmanager
def clocked_server(where: Path, module: Module) -> Iterator[Clocked]:
    """`module` (which includes a retry module) published by "owner" at `where`, workers granted,
    served without the scheduler loop: the test fires due rows with `db.run_due()`."""
    key = SigningKey.generate()
    claims = {who: key.claims(who) for who in ROLES}
    identities = {who: c.identity for who, c in claims.items()}
    clock = ManualClock()
    db = Database.create(where, module, owner=identities["owner"], clock=clock, durable=False)
    try:
        for who in ("worker", "worker2"):
            db.call("grant_worker", identities[who], sender=identities["owner"])
        with ThreadServer(create_app(db, key=key, run_scheduler=False)) as server:
            yield Clocked(db, clock, server.base, {who: key.issue_token(c) for who, c in claims.items()}, identities)
    finally:
        db.close()
