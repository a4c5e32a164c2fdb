"""Whether data stored under one schema can be read with another, and which indexes must be
rebuilt for it.

Allowed without a hand-written migration: adding tables, adding reducers, changing reducers,
changing a table's `public` flag, appending a column that has a default (old rows decode with
the default), appending members at the end of a column's enum (old rows hold only the old
members' values, and keys encode an enum member by its value, so no index moves), and adding,
removing or redefining indexes, making one sparse or dense among them (`migrate.rebuild_indexes`
builds them from the rows, as SpacetimeDB's automatic migrations do). Anything else is refused
with a message naming the table and column: removing, renaming or reordering an enum's members
changes its type."""

from __future__ import annotations

import ast
from typing import Any

from ..errors import SchemaMismatch

_ENUM = "enum "


def _split_enums(type_name: str) -> tuple[str, list[tuple[Any, ...]]]:
    """A column's type string (schema.type_name) with each enum's member list cut out, and the
    member lists: `enum Status('a', 'b') | None` -> (`enum Status() | None`, [('a', 'b')])."""
    shape, members, i = [], [], 0
    while (start := type_name.find(_ENUM, i)) != -1:
        open_at = type_name.find("(", start)
        if open_at == -1:
            break
        close_at, quote, j = -1, "", open_at + 1
        while j < len(type_name):  # the closing parenthesis, outside the members' string literals
            c = type_name[j]
            if quote:
                if c == "\\":
                    j += 1
                elif c == quote:
                    quote = ""
            elif c in "'\"":
                quote = c
            elif c == ")":
                close_at = j
                break
            j += 1
        if close_at == -1:
            break
        inner = type_name[open_at + 1 : close_at]
        try:
            values = ast.literal_eval(f"({inner},)") if inner.strip() else ()
        except (ValueError, SyntaxError):
            values = (inner,)  # not literals: compared as text
        shape.append(type_name[i : open_at + 1] + ")")
        members.append(tuple(values))
        i = close_at + 1
    shape.append(type_name[i:])
    return "".join(shape), members


def same_or_appended(old: str, new: str) -> bool:
    """`new` is `old`, or `old` with members appended to its enums (values kept, in order)."""
    if old == new:
        return True
    old_shape, old_members = _split_enums(old)
    new_shape, new_members = _split_enums(new)
    return old_shape == new_shape and all(n[: len(o)] == o for o, n in zip(old_members, new_members, strict=True))


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
            if not same_or_appended(col["type"], nc["type"]):
                raise SchemaMismatch(f"table {name}: column {col['name']} changed type from {col['type']} to {nc['type']}")
        for key in ("primary_key", "auto_inc", "scheduled"):
            if old[key] != t[key]:
                raise SchemaMismatch(f"table {name}: {key.replace('_', ' ')} changed from {old[key]!r} to {t[key]!r}")
        if old.get("event", False) != t.get("event", False):  # as SpacetimeDB: the flag never changes
            was = "an event table" if old.get("event") else "a regular table"
            raise SchemaMismatch(f"table {name} was {was}: a table cannot become or stop being an event table")
        for extra in new_cols[len(old_cols):]:
            if not extra.get("has_default"):
                raise SchemaMismatch(f"table {name}: new column {extra['name']} needs a default so old rows can be read")
        old_ix, new_ix = old["indexes"], t["indexes"]
        changes += [(name, ix, False) for ix in sorted(old_ix) if new_ix.get(ix) != old_ix[ix]]
        changes += [(name, ix, True) for ix in sorted(new_ix) if old_ix.get(ix) != new_ix[ix]]
    return changes
