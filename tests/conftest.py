from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from stdbmod import Database, Identity, ManualClock, Module

OWNER = Identity.from_claims("test", "owner")
ALICE = Identity.from_claims("test", "alice")
BOB = Identity.from_claims("test", "bob")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def make_db(tmp_path: Path, clock: ManualClock) -> Iterator[Callable[..., Database]]:
    """Create databases under tmp_path; all are closed at teardown."""
    opened: list[Database] = []
    counter = iter(range(1_000_000))

    def make(module: Module, *, owner: Identity = OWNER, path: Path | None = None, **kw: object) -> Database:
        db = Database.create(path or tmp_path / f"db{next(counter)}", module, owner=owner, clock=clock, **kw)  # type: ignore[arg-type]
        opened.append(db)
        return db

    yield make
    for db in opened:
        db.close()


@pytest.fixture
def bank_db(make_db: Callable[..., Database]) -> Database:
    from stdbmod.examples.bank import bank

    return make_db(bank)
