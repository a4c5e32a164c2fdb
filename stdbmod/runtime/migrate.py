"""Index migrations, run by `Database.open` when the module adds, removes or redefines an index.

An index is derived from the rows, so migrating one is a rebuild: a removed index's space is
emptied, an added one is filled from the table's rows. It happens in the write transaction that
also stores the new schema, so a crash leaves either the old schema with the old indexes or the
new one with the new: never an index that disagrees with its rows. It is not a commit-log record:
replaying the log into a database of the new module builds the same indexes as it goes.

Making an index sparse (or dense again) redefines it (its stored description gains or loses
`"sparse": true`): it is emptied and built again, with or without the rows whose first indexed
column is None. The rebuild is the one way to drop a dense index's None entries, or to add them.
"""

from __future__ import annotations

import logging
import time

from ..errors import SchemaMismatch
from ..keys import MAX_KEY_SIZE
from ..module import Module
from ..storage import WriteTxn
from . import spaces

log = logging.getLogger("stdbmod")


def rebuild_indexes(txn: WriteTxn, module: Module, changes: list[tuple[str, str, bool]]) -> None:
    """Empty the dropped indexes' spaces, then fill the built ones; a unique index that the rows
    already break is a SchemaMismatch naming the rows."""
    for table, name, build in changes:
        if not build:
            txn.clear(spaces.index(table, name))
            log.info("schema change: dropped index %s.%s", table, name)
    for table, name, build in changes:
        if build:
            started = time.monotonic()
            rows = _build(txn, module, table, name)
            log.info("schema change: built index %s.%s from %d rows in %.1f s", table, name, rows, time.monotonic() - started)


def _build(txn: WriteTxn, module: Module, table: str, name: str) -> int:
    t = module.tables[table]
    ix = t.indexes[name]
    space = spaces.index(table, name)
    rows = 0
    for pk_key, raw in txn.scan(spaces.rows(table)):
        rows += 1
        vals = t.row_format.values(raw)
        if ix.leaves_out(vals):
            continue  # no entry for a None (Index(sparse=True))
        value = ix.values(vals)
        key = ix.encode(value)
        if ix.unique:
            holder = txn.get(space, key)
            if holder is not None:
                raise SchemaMismatch(
                    f"table {table}: cannot add unique index {name}: two rows share {', '.join(ix.columns)} = {value!r}"
                )
        else:
            key += pk_key
        if len(key) > MAX_KEY_SIZE:
            raise SchemaMismatch(f"table {table}: cannot add index {name}: a row's indexed value is too long for a key")
        txn.put(space, key, pk_key)
    return rows
