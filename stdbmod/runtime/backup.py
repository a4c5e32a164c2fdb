"""Online backup: a compacted, consistent copy of a database, taken while it keeps serving.

LMDB copies inside one read transaction, so writers are never blocked and the copy holds exactly
the transactions committed before it began. The source may be open in this process
(`Database.backup`) or served by another one (`backup_directory`, which the CLI uses): LMDB's
lock file coordinates processes. While a long copy runs, pages freed by newer commits cannot be
reused, so the source file may grow.
"""

from __future__ import annotations

import os

from ..errors import CallError, DatabaseNotFound
from ..storage import LmdbStorage


def check_target(dest: str | os.PathLike[str]) -> str:
    """`dest` as a path that may receive a copy: a new or empty directory."""
    target = os.fspath(dest)
    if os.path.exists(target):
        if not os.path.isdir(target):
            raise CallError(f"{target} exists and is not a directory")
        if os.listdir(target):
            raise CallError(f"{target} is not empty; back up into a new directory")
    return target


def backup_directory(data_dir: str | os.PathLike[str], dest: str | os.PathLike[str]) -> int:
    """Copy the database at `data_dir` (served by another process or not) to `dest`; the copy's
    size in bytes. Needs no module: the copy is of the storage, every table and log included."""
    source = os.fspath(data_dir)
    if not os.path.isfile(os.path.join(source, "data.mdb")):
        raise DatabaseNotFound(f"no database at {source}")
    target = check_target(dest)
    storage = LmdbStorage(source, readonly=True)  # the source may be on read-only media
    try:
        storage.copy_to(target, compact=True)
    finally:
        storage.close()
    return os.path.getsize(os.path.join(target, "data.mdb"))
