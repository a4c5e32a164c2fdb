"""The storage contract against every backend: memory, LMDB and PostgreSQL (each test in a
fresh schema; skipped with the reason when no server is reachable, see tests/postgres/server.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stdbmod.storage import LmdbStorage, MemoryStorage, Storage
from tests.postgres import server
from tests.storage.contract import StorageContract

BACKENDS = ["memory", "lmdb", "postgres"]


@pytest.fixture(params=BACKENDS)
def any_storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    s: Storage
    if request.param == "memory":
        s = MemoryStorage()
    elif request.param == "lmdb":
        s = LmdbStorage(str(tmp_path / "db"))
    else:
        from stdbmod.storage.postgres import PostgresStorage

        with server.fresh_schema() as schema:
            s = PostgresStorage(server.DSN, schema=schema)
            try:
                yield s
            finally:
                s.close()
        return
    yield s
    s.close()


class TestStorageContract(StorageContract):
    @pytest.fixture
    def storage(self, any_storage: Storage) -> Storage:
        return any_storage
