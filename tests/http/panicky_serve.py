"""`stdbmod serve`, except that every write transaction raises LMDB's panic once the file named
by argv[1] exists: how test_serving.py sees the server exit non-zero on a storage panic."""

from __future__ import annotations

import os
import sys

from stdbmod.errors import StoragePanic
from stdbmod.http.cli import serve_command
from stdbmod.storage import lmdb_storage

trigger = sys.argv.pop(1)
begin_write = lmdb_storage.LmdbStorage.begin_write


def panicky(self: lmdb_storage.LmdbStorage) -> object:
    if os.path.exists(trigger):
        raise StoragePanic("LMDB panic: MDB_PANIC (injected by the test)")
    return begin_write(self)


lmdb_storage.LmdbStorage.begin_write = panicky  # type: ignore[assignment, method-assign]
serve_command()
