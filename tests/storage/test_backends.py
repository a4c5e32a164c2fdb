from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stdbmod.storage import LmdbStorage, MemoryStorage, Storage
from tests.storage.contract import StorageContract


class TestMemoryStorage(StorageContract):
    @pytest.fixture
    def storage(self) -> Iterator[Storage]:
        s = MemoryStorage()
        yield s
        s.close()


class TestLmdbStorage(StorageContract):
    @pytest.fixture
    def storage(self, tmp_path: Path) -> Iterator[Storage]:
        s = LmdbStorage(str(tmp_path / "db"))
        yield s
        s.close()
