"""Where a database lives, as `--data` names it: a directory (LMDB, and its files beside it) or a
PostgreSQL URL (`postgresql://USER@HOST:PORT/DB[?schema=NAME]`, the files as rows of the
schema's `files` table: docs/scaling.md). The rest of `local/` reads and writes a data place's
files through here, so both kinds work wherever `--data` is taken."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any

from ..storage import private
from ..storage.postgres_url import files_at, is_url, redact

__all__ = ["is_url", "read_file", "write_file", "remove_file", "describe", "holds_storage", "exists", "show"]


def _files(data: str) -> Any:
    return files_at(data)


def read_file(data: str | os.PathLike[str], name: str) -> bytes | None:
    if is_url(data):
        return _files(str(data)).get(name)  # type: ignore[no-any-return]
    try:
        return (Path(data) / name).read_bytes()
    except FileNotFoundError:
        return None


def write_file(data: str | os.PathLike[str], name: str, body: bytes, *, secret: bool = False, replace: bool = True) -> bool:
    """Store a file of the place (in a directory: mode 0600, as every file there; `secret`
    matters to a database's rows); False if it exists and `replace` is off."""
    if is_url(data):
        return _files(str(data)).put(name, body, replace=replace)  # type: ignore[no-any-return]
    p = Path(data) / name
    if not replace and p.exists():
        return False
    tmp = p.with_name(temp_name(name))
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, private.FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # after a failure; after the rename it is gone already
    sync_dir(data)
    return True


def temp_name(name: str) -> str:
    """Where a file of a data directory is written before it is renamed into place: hidden, with
    its writer's pid (two writers never share one), so `remove_stale_temps` can tell a file a
    killed process left from one a live process is writing."""
    return f".{name}.{os.getpid()}.tmp"


_TEMP = re.compile(r"\..+\.([0-9]+)\.tmp")


def remove_stale_temps(data: str | os.PathLike[str]) -> list[str]:
    """Remove the temporary files (`temp_name`) of processes that are gone (killed between
    writing and renaming); the names removed."""
    gone = []
    for entry in os.listdir(data):
        m = _TEMP.fullmatch(entry)
        if m is None or _alive(int(m.group(1))):
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(data, entry))
            gone.append(entry)
    return gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def sync_dir(data: str | os.PathLike[str]) -> None:
    """fsync a directory, so the names just made or renamed in it survive a crash."""
    fd = os.open(data, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_file(data: str | os.PathLike[str], name: str) -> None:
    if is_url(data):
        _files(str(data)).delete(name)
    else:
        Path(data, name).unlink(missing_ok=True)


def holds_storage(data: str | os.PathLike[str]) -> bool:
    """Whether a database was published there (LMDB's data.mdb; PostgreSQL's metadata)."""
    if is_url(data):
        return _files(str(data)).holds_database()  # type: ignore[no-any-return]
    return os.path.exists(os.path.join(data, "data.mdb"))


def exists(data: str | os.PathLike[str]) -> bool:
    """Whether the place itself is there: a directory (a URL always is; its server says more)."""
    return is_url(data) or os.path.isdir(data)


def describe(data: str | os.PathLike[str], name: str) -> str:
    """The file, for messages: DIR/NAME, or NAME in the database."""
    if is_url(data):
        return f"{name} (in {show(data)})"
    return os.path.join(data, name)


def show(data: str | os.PathLike[str]) -> str:
    """The place, for messages (a URL without its password)."""
    return redact(str(data)) if is_url(data) else os.fspath(data)
