"""The PostgreSQL server the tests use, and a fresh schema for each test.

The server is `STDBMOD_TEST_POSTGRES` (default: the machine's, postgres@127.0.0.1:5432/test,
trust auth). Without one reachable the PostgreSQL tests are skipped, saying why, except under CI
(`CI` set), where they fail: `.ci/run` starts a server, so a missing one is a broken CI."""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

DSN = os.environ.get("STDBMOD_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


@functools.cache
def unreachable() -> str | None:
    """Why the server cannot be used, or None."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install -e '.[test]')"
    try:
        with psycopg.connect(DSN, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as e:
        return f"no PostgreSQL server at {DSN}: {e}".strip()
    return None


def require() -> str:
    """The server's DSN; skips the test (fails it under CI) when there is none."""
    reason = unreachable()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the PostgreSQL tests: {reason}")
        pytest.skip(reason)
    return DSN


def new_schema() -> str:
    return "t_" + uuid.uuid4().hex[:16]


def drop_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@contextmanager
def fresh_schema() -> Iterator[str]:
    """A schema name no other test uses, dropped (with everything in it) afterwards."""
    require()
    schema = new_schema()
    try:
        yield schema
    finally:
        drop_schema(schema)


def require_module() -> None:
    """`require` for a whole test module, at import."""
    reason = unreachable()
    if reason is not None and not os.environ.get("CI"):
        pytest.skip(reason, allow_module_level=True)
