"""The runtime's subscription events as the WebSocket protocol's parts: table updates with rows
as JSON text, a call's arguments as JSON text, table and reducer ids."""

from __future__ import annotations

from typing import Any

import msgspec

from ...runtime import Database
from ...runtime.subscriptions import QueryChange, QueryRows
from . import messages, sats

_astuple = msgspec.structs.astuple
_U32_MAX = (1 << 32) - 1
_json = msgspec.json.Encoder()


class Encoder:
    """What one database's messages need to know about its module, worked out once."""

    def __init__(self, db: Database) -> None:
        self.module = db.module
        tables = list(db.module.tables.values())
        self.table_ids = {t.name: i for i, t in enumerate(tables)}
        names = [*db.module.reducers, *(r.name for hooks in db.module.lifecycle.values() for r in hooks)]
        self.reducer_ids = {n: i for i, n in enumerate(names)}
        self._rows = {t.name: sats.RowEncoder(t) for t in tables}
        self._cache_offset = -1
        self._cache: dict[int, str] = {}  # id(row) -> its text, within one commit (the hub's thread only)
        self._shared_offset = -1
        self._shared: dict[tuple[str, ...], str] = {}  # whole messages, within one commit

    def shared(self, offset: int, key: tuple[str, ...], build: Any) -> str:
        """The text `build()` makes for commit `offset` seen through the queries `key`, made once
        for every subscriber that sees exactly that (the hub's thread only)."""
        if offset != self._shared_offset:
            self._shared_offset, self._shared = offset, {}
        text = self._shared.get(key)
        if text is None:
            text = self._shared[key] = build()
        return str(text)

    def reducer_id(self, name: str) -> int:
        return self.reducer_ids.get(name, _U32_MAX)

    def row_text(self, table: str, row: Any) -> str:
        return self._rows[table].text(_astuple(row))

    def _cached(self, offset: int, table: str, row: Any) -> str:
        """`row_text`, encoded once per commit however many subscribers get the row."""
        if offset != self._cache_offset:
            self._cache_offset, self._cache = offset, {}
        text = self._cache.get(id(row))
        if text is None:
            text = self._cache[id(row)] = self.row_text(table, row)
        return text

    def changes(self, changes: list[QueryChange], offset: int | None = None) -> list[dict[str, Any]]:
        """A transaction's `DatabaseUpdate.tables`: one TableUpdate per table, one QueryUpdate
        per query that changed. `offset` (the hub's thread only) shares row texts between
        subscribers of one commit."""
        by_table: dict[str, list[tuple[list[str], list[str]]]] = {}
        for c in changes:
            if offset is None:
                enc = [self.row_text(c.table, r) for r in c.deletes], [self.row_text(c.table, r) for r in c.inserts]
            else:
                enc = [self._cached(offset, c.table, r) for r in c.deletes], [self._cached(offset, c.table, r) for r in c.inserts]
            by_table.setdefault(c.table, []).append(enc)
        return [messages.table_update(self.table_ids[t], t, qs) for t, qs in by_table.items()]

    def rows(self, held: list[QueryRows], deleted: bool = False) -> list[dict[str, Any]]:
        """Query results as a `DatabaseUpdate.tables`: inserts (subscribing) or deletes (leaving)."""
        changes = [QueryChange(0, q.query, q.table, q.rows if deleted else [], [] if deleted else q.rows) for q in held]
        out = self.changes(changes)
        for q in held:  # a query with no rows still names its table
            if q.table not in {t["table_name"] for t in out}:
                out.append(messages.table_update(self.table_ids[q.table], q.table, [([], [])]))
        return out

    def args_text(self, kind: str, reducer: str, args: bytes, schedule_row: bytes | None = None) -> str:
        """A call's arguments (msgpack, as logged) as the JSON text of their array."""
        try:
            if kind == "call":
                r = self.module.reducers[reducer]
                return _json.encode(sats.encoder(r.args_type)(r.msgpack_decoder.decode(args))).decode()
            if kind in ("scheduled", "schedule_cleanup") and schedule_row is not None:
                table = self.module.tables[schedule_row.split(b"\x00", 1)[0].decode()]
                return _json.encode([self._rows[table.name].values(table.row_format.values(args))]).decode()
            if kind == "sql":
                return _json.encode([msgspec.msgpack.decode(args, type=str)]).decode()
        except (KeyError, msgspec.DecodeError, UnicodeDecodeError):
            pass
        return "[]"
