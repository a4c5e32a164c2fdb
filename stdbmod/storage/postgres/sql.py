"""The SQL the PostgreSQL backend sends, composed once per schema.

Two tables per schema: `spaces` names each key space (and keeps its key count, so `count` is a
row read, not a scan) and `kv` holds every key of every space, ordered by (space, key). `bytea`
compares bytewise (memcmp, then length), which is exactly the order the storage contract needs;
it has no collation to get in the way.
"""

from __future__ import annotations

import zlib

from psycopg import sql

# The first half of the advisory lock every write transaction takes (the second is the schema's
# hash): "sTdb" in ASCII, so the lock is recognisable in pg_locks.
LOCK_CLASS = 0x73546462


def lock_key(schema: str) -> int:
    """The schema's half of the writers' advisory lock: a signed 32-bit hash of its name."""
    h = zlib.crc32(schema.encode())
    return h - (1 << 32) if h >= 1 << 31 else h


class Statements:
    def __init__(self, schema: str) -> None:
        s = sql.Identifier(schema)
        self.schema = schema
        self.lock = f"SELECT pg_advisory_xact_lock({LOCK_CLASS}, {lock_key(schema)})"
        self.create = [
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(s),
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.spaces ("
                " id integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
                " name text NOT NULL UNIQUE,"
                " n bigint NOT NULL DEFAULT 0)"
            ).format(s),
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.kv ("
                " space integer NOT NULL,"
                " key bytea NOT NULL,"
                " value bytea NOT NULL,"
                " PRIMARY KEY (space, key))"
            ).format(s),
        ]
        # A counter every commit that writes moves on: a node whose last commit left it where it
        # is knows nobody else wrote since, so what it cached stays true (storage.py).
        self.create_version = [
            sql.SQL("CREATE TABLE IF NOT EXISTS {}.version (v bigint NOT NULL)").format(s),
            sql.SQL("INSERT INTO {}.version (v) SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM {}.version)").format(s, s),
        ]
        self.version = sql.SQL("SELECT v FROM {}.version").format(s)
        self.bump = sql.SQL("UPDATE {}.version SET v = v + 1 RETURNING v").format(s)
        self.spaces = sql.SQL("SELECT name, id FROM {}.spaces").format(s)
        self.add_spaces = sql.SQL("INSERT INTO {}.spaces (name) SELECT unnest(%s::text[]) ON CONFLICT (name) DO NOTHING").format(s)
        self.get = sql.SQL("SELECT value FROM {}.kv WHERE space = %s AND key = %s").format(s)
        self.count = sql.SQL("SELECT n FROM {}.spaces WHERE id = %s").format(s)
        # How many of some keys exist (a write transaction's count corrects for its own writes).
        self.count_keys = sql.SQL("SELECT count(*) FROM {}.kv WHERE space = %s AND key = ANY(%s::bytea[])").format(s)
        self._s = s
        self._scans: dict[tuple[str | None, bool, bool], sql.Composed] = {}
        # One statement applies a transaction's whole write set and keeps the key counts right:
        # an upsert reports whether it inserted (xmax = 0: no older version of the row existed).
        self.flush = sql.SQL(
            "WITH ins AS ("
            "  INSERT INTO {s}.kv (space, key, value)"
            "  SELECT * FROM unnest(%s::integer[], %s::bytea[], %s::bytea[])"
            "  ON CONFLICT (space, key) DO UPDATE SET value = EXCLUDED.value"
            "  RETURNING space, (xmax = 0) AS fresh),"
            " del AS ("
            "  DELETE FROM {s}.kv USING unnest(%s::integer[], %s::bytea[]) AS d(space, key)"
            "  WHERE kv.space = d.space AND kv.key = d.key RETURNING kv.space),"
            " delta AS ("
            "  SELECT space, sum(n) AS n FROM ("
            "   SELECT space, 1 AS n FROM ins WHERE fresh UNION ALL SELECT space, -1 FROM del) AS x"
            "  GROUP BY space)"
            " UPDATE {s}.spaces SET n = spaces.n + delta.n FROM delta"
            " WHERE spaces.id = delta.space AND delta.n <> 0"
        ).format(s=s)
        self.clear = sql.SQL("DELETE FROM {}.kv WHERE space = %s").format(s)
        self.zero = sql.SQL("UPDATE {}.spaces SET n = 0 WHERE id = %s").format(s)

    def scan(self, low: str | None, high: bool, reverse: bool) -> sql.Composed:
        """A page of a range scan, parameters (space, [low key], [high key], limit): `low` is
        None, '>=' or '>' (a later forward page resumes after the last key); `high` whether
        there is an exclusive upper bound (a later reverse page's is its last key)."""
        found = self._scans.get((low, high, reverse))
        if found is None:
            where = "space = %s"
            if low is not None:
                where += f" AND key {low} %s"
            if high:
                where += " AND key < %s"
            order = "DESC" if reverse else "ASC"
            found = sql.SQL("SELECT key, value FROM {}.kv WHERE " + where + " ORDER BY key " + order + " LIMIT %s").format(self._s)
            self._scans[(low, high, reverse)] = found
        return found
