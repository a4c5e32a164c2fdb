"""The files a data directory holds beside LMDB's (stdbmod.json, jwt.key, owner.token), for a
database in PostgreSQL: rows of `<schema>.files`, so every node reads the same module record
and signing key (tokens one node signs, the others accept). Anyone who can read that table can
sign tokens: guard the database as the directory's 0600 files are guarded."""

from __future__ import annotations

from typing import Any

import psycopg
import psycopg.errors
from psycopg import sql

from ...errors import StorageError


class DatabaseFiles:
    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn = dsn
        self.schema = schema
        self._table = sql.SQL("{}.files").format(sql.Identifier(schema))

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self.dsn, autocommit=True, connect_timeout=10, application_name="stdbmod")
        except psycopg.Error as e:
            raise StorageError(f"cannot connect to PostgreSQL: {e}".rstrip()) from e

    def get(self, name: str) -> bytes | None:
        with self._connect() as conn:
            try:
                row = conn.execute(sql.SQL("SELECT body FROM {} WHERE name = %s").format(self._table), (name,)).fetchone()
            except psycopg.errors.UndefinedTable:
                return None
            except psycopg.Error as e:
                raise StorageError(f"PostgreSQL: {e}".rstrip()) from e
        return None if row is None else bytes(row[0])

    def put(self, name: str, body: bytes, *, replace: bool = True) -> bool:
        """Store `body` as `name`; False if it exists and `replace` is off (nothing written)."""
        upsert = "DO UPDATE SET body = EXCLUDED.body" if replace else "DO NOTHING"
        with self._connect() as conn:
            try:
                with conn.transaction():
                    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
                    conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (name text PRIMARY KEY, body bytea NOT NULL)").format(self._table))
                    cur = conn.execute(
                        sql.SQL("INSERT INTO {} (name, body) VALUES (%s, %s) ON CONFLICT (name) " + upsert).format(self._table), (name, body)
                    )
                    return cur.rowcount == 1
            except psycopg.Error as e:
                raise StorageError(f"PostgreSQL: {e}".rstrip()) from e

    def delete(self, name: str) -> None:
        with self._connect() as conn:
            try:
                conn.execute(sql.SQL("DELETE FROM {} WHERE name = %s").format(self._table), (name,))
            except psycopg.errors.UndefinedTable:
                pass
            except psycopg.Error as e:
                raise StorageError(f"PostgreSQL: {e}".rstrip()) from e

    def holds_database(self) -> bool:
        """Whether the schema holds a published stdbmod database (its metadata key)."""
        with self._connect() as conn:
            row = conn.execute("SELECT to_regclass(%s)", (f'"{self.schema}".kv',)).fetchone()
            if row is None or row[0] is None:
                return False
            s = sql.Identifier(self.schema)
            found = conn.execute(
                sql.SQL("SELECT EXISTS (SELECT 1 FROM {}.kv k JOIN {}.spaces p ON p.id = k.space WHERE p.name = 'meta')").format(s, s)
            ).fetchone()
        return bool(found and found[0])
