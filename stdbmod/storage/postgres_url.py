"""`--data postgresql://USER@HOST:PORT/DB[?schema=NAME]`: a PostgreSQL URL as a place for a
stdbmod database. libpq takes the URL as it is, less `schema`, which is stdbmod's own: the
PostgreSQL schema the database lives in (default `stdbmod`), so several stdbmod databases can
share one PostgreSQL database."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import CallError, StorageError

if TYPE_CHECKING:
    from .base import Storage

SCHEMES = ("postgresql://", "postgres://")


def is_url(where: str | os.PathLike[str]) -> bool:
    return isinstance(where, str) and where.startswith(SCHEMES)


def split_url(url: str, default_schema: str = "stdbmod") -> tuple[str, str]:
    """(the libpq URL, the schema)."""
    parts = urlsplit(url)
    if not parts.path.strip("/"):
        raise CallError(f"{redact(url)}: name the database (postgresql://USER@HOST:PORT/DB)")
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [v for k, v in query if k == "schema"]
    rest = [(k, v) for k, v in query if k != "schema"]
    return urlunsplit(parts._replace(query=urlencode(rest))), (schemas[-1] if schemas else default_schema)


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))


def _backend() -> Any:
    try:
        from . import postgres
    except ImportError as e:
        raise StorageError(f"a PostgreSQL URL needs the postgres extra (pip install 'stdbmod[postgres]'): {e}") from None
    return postgres


def open_url(url: str, *, durable: bool = True) -> Storage:
    """The PostgreSQL storage a URL names."""
    dsn, schema = split_url(url)
    storage: Storage = _backend().PostgresStorage(dsn, schema=schema, durable=durable)
    return storage


def files_at(url: str) -> Any:
    """The data place's files table (`postgres.files.DatabaseFiles`) a URL names."""
    _backend()
    from .postgres.files import DatabaseFiles

    return DatabaseFiles(*split_url(url))
