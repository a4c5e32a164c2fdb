from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stdbmod import Database, ManualClock
from stdbmod.retry import RetryModule, create_retry_module
from tests.retry.support import ADMIN, WORKER, WORKER2


@pytest.fixture
def rm() -> RetryModule:
    return create_retry_module()


def published(where: Path, rm: RetryModule, clock: ManualClock) -> Database:
    """A retry database published by ADMIN, with WORKER and WORKER2 granted the worker role."""
    d = Database.create(where, rm.module, owner=ADMIN, clock=clock, durable=False)
    d.call("grant_worker", WORKER, sender=ADMIN)
    d.call("grant_worker", WORKER2, sender=ADMIN)
    return d


@pytest.fixture
def db(tmp_path: Path, rm: RetryModule, clock: ManualClock) -> Iterator[Database]:
    d = published(tmp_path / "db", rm, clock)
    yield d
    d.close()
