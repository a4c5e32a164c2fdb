"""`POST /v1/database/{db}/sql`'s answer: SpacetimeDB's `[{"schema": ..., "rows": [...]}]`, one
element per statement, rows as SATS-JSON positional arrays."""

from __future__ import annotations

import time
from typing import Any

import msgspec

from ...runtime import Database
from ...types import Identity
from . import sats


class SqlStats(msgspec.Struct):
    rows_inserted: int = 0
    rows_deleted: int = 0
    rows_updated: int = 0


class SqlStatement(msgspec.Struct):
    """One statement's result: the rows' SATS product type, the rows, how long it took."""

    schema: dict[str, Any]
    rows: list[list[Any]]
    total_duration_micros: int
    stats: SqlStats


def run(db: Database, text: str, caller: Identity | None) -> list[SqlStatement]:
    """Run `text` as `caller` (blocking: DML waits for its commit) and answer each statement."""
    from ...runtime.sql import execute  # sqlglot is slow to import: not at server start

    started = time.perf_counter()
    results = execute(db, text, caller)
    micros = round((time.perf_counter() - started) * 1_000_000 / max(len(results), 1))
    out = []
    for r in results:
        encoders = [sats.encoder(t) for t in r.types]
        rows = [[enc(v) for enc, v in zip(encoders, row)] for row in r.rows]
        schema = sats.product_type(list(zip(r.columns, r.types)))
        out.append(SqlStatement(schema, rows, micros, SqlStats(r.inserted, r.deleted, r.updated)))
    return out
