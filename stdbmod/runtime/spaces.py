"""Names of the storage spaces (LMDB named databases) the runtime uses."""

from __future__ import annotations

from ..schema import TableDef

META = "meta"
SEQUENCES = "seq"
COMMIT_LOG = "log"
DB_LOG = "dblog"
SCHEDULE_QUEUE = "sched/queue"  # due (u64) + table + 0x00 + pk key -> b""
SCHEDULE_BY_ROW = "sched/row"  # table + 0x00 + pk key -> its key in the queue
CLIENTS = "clients"  # connection id -> identity: open connections (SpacetimeDB's st_client)
SYSTEM = (META, SEQUENCES, COMMIT_LOG, DB_LOG, SCHEDULE_QUEUE, SCHEDULE_BY_ROW, CLIENTS)


def rows(table: str) -> str:
    return f"t/{table}"


def index(table: str, name: str) -> str:
    return f"i/{table}/{name}"


def of_table(table: TableDef) -> list[str]:
    return [rows(table.name), *(index(table.name, ix) for ix in table.indexes)]
