"""Whether data stored under one schema can be read with another, and which indexes must be
rebuilt for it.

Allowed without a hand-written migration: adding tables, adding reducers, changing reducers,
changing a table's `public` flag, appending a column that has a default (old rows decode with
the default), and adding, removing or redefining indexes (`migrate.rebuild_indexes` builds them
from the rows, as SpacetimeDB's automatic migrations do). Anything else is refused with a
message naming the table and column."""

from __future__ import annotations

from typing import Any

from ..errors import SchemaMismatch


def check_compatible(stored: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """The index changes the new schema needs, as (table, index, build): build False empties a
    removed (or redefined) index's space, True fills an added (or redefined) one."""
    new_tables = {t["name"]: t for t in new["tables"]}
    changes: list[tuple[str, str, bool]] = []
    for old in stored["tables"]:
        name = old["name"]
        t = new_tables.get(name)
        if t is None:
            raise SchemaMismatch(f"table {name} holds data but the module no longer declares it")
        old_cols, new_cols = old["columns"], t["columns"]
        for i, col in enumerate(old_cols):
            if i >= len(new_cols):
                raise SchemaMismatch(f"table {name}: column {col['name']} was removed")
            nc = new_cols[i]
            if nc["name"] != col["name"]:
                raise SchemaMismatch(f"table {name}: column {col['name']} was renamed, moved or removed (now {nc['name']})")
            if nc["type"] != col["type"]:
                raise SchemaMismatch(f"table {name}: column {col['name']} changed type from {col['type']} to {nc['type']}")
        for key in ("primary_key", "auto_inc", "scheduled"):
            if old[key] != t[key]:
                raise SchemaMismatch(f"table {name}: {key.replace('_', ' ')} changed from {old[key]!r} to {t[key]!r}")
        for extra in new_cols[len(old_cols):]:
            if not extra.get("has_default"):
                raise SchemaMismatch(f"table {name}: new column {extra['name']} needs a default so old rows can be read")
        old_ix, new_ix = old["indexes"], t["indexes"]
        changes += [(name, ix, False) for ix in sorted(old_ix) if new_ix.get(ix) != old_ix[ix]]
        changes += [(name, ix, True) for ix in sorted(new_ix) if old_ix.get(ix) != new_ix[ix]]
    return changes
