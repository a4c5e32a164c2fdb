"""Values in scenario files: references (`$alice`, `$now+30`), typed comparison, display.

A scenario writes values as TOML/JSON data (TOML has no null: `"$null"` is None). Before use
they are resolved (references replaced, datetimes turned into Timestamps) and, when compared
with a row's column, converted to the column's type, so `"$alice"` equals an Identity column and
`"$now+60"` or `2026-01-01T00:01:00Z` equals a Timestamp column.
"""

from __future__ import annotations

import datetime as dt
import enum
import re
import typing
from collections.abc import Mapping
from typing import Any

import msgspec

from .. import codec
from ..types import Identity, TimeDuration, Timestamp

_NOW = re.compile(r"^\$now(?:\s*([+-])\s*(\d+(?:\.\d+)?))?$")
_REF = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)$")


class Resolver:
    """Replaces references with values, given the scenario's identities and clock."""

    def __init__(self, identities: Mapping[str, Identity], database: Identity, now: typing.Callable[[], Timestamp]) -> None:
        self.identities = dict(identities)
        self.database = database
        self._now = now
        self._names = {v: k for k, v in self.identities.items()}
        self._names[database] = "database"
        self._hex_names = {k.to_hex(): v for k, v in self._names.items()}

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str) and value.startswith("$"):
            return self._ref(value)
        if isinstance(value, dt.datetime):
            return Timestamp.from_datetime(value if value.tzinfo else value.replace(tzinfo=dt.UTC))
        if isinstance(value, dict):
            return {k: self(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v) for v in value]
        return value

    def _ref(self, text: str) -> Any:
        m = _NOW.match(text)
        if m:
            now = self._now()
            if m.group(1):
                delta = TimeDuration.from_seconds(float(m.group(2)))
                return now + delta if m.group(1) == "+" else now - delta
            return now
        m = _REF.match(text)
        if m:
            name = m.group(1)
            if name == "database":
                return self.database.to_hex()
            if name == "null":
                return None
            if name in self.identities:
                return self.identities[name].to_hex()
        raise ValueError(f"unknown reference {text!r} (identities: {', '.join('$' + n for n in sorted(self.identities))}, $database, $null, $now, $now+N)")

    def show(self, value: Any) -> str:
        """A value for a message: identities by name, times in RFC 3339."""
        if isinstance(value, Identity):
            return self._names.get(value, value.abbreviated())
        if isinstance(value, str) and len(value) == 64 and value in self._hex_names:
            return self._hex_names[value]
        if isinstance(value, Timestamp):
            return value.isoformat()
        if isinstance(value, enum.Enum):
            return repr(value.value)
        if isinstance(value, msgspec.Struct):
            return "{" + ", ".join(f"{f}={self.show(getattr(value, f))}" for f in value.__struct_fields__) + "}"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{k}={self.show(v)}" for k, v in value.items()) + "}"
        if isinstance(value, (list, tuple)):
            return "[" + ", ".join(self.show(v) for v in value) + "]"
        return repr(value)


_TYPES: dict[type, dict[str, Any]] = {}


def column_types(cls: type) -> dict[str, Any]:
    """A row type's column types (Annotated markers dropped), computed once per type."""
    if cls not in _TYPES:
        _TYPES[cls] = typing.get_type_hints(cls)
    return _TYPES[cls]


def typed(value: Any, typ: Any) -> Any:
    """`value` (already resolved) converted to `typ`; ValueError if it is not one."""
    if typ is Any:
        return value
    try:
        return codec.convert(value, typ)
    except (msgspec.ValidationError, ValueError, TypeError) as e:
        raise ValueError(f"{value!r} is not a {_type_name(typ)} ({e})") from None


def _type_name(typ: Any) -> str:
    return getattr(typ, "__name__", None) or str(typ).replace("typing.", "")


def same(actual: Any, expected: Any) -> bool:
    """Equal as data: enums equal their values, Structs equal dicts of their fields."""
    return bool(codec.to_builtins(actual) == codec.to_builtins(expected))


def field_mismatches(row: Any, expected: Mapping[str, Any], resolve: Resolver, *, contains: frozenset[str] = frozenset()) -> list[str]:
    """Why `row` (a Struct) does not match the partial row `expected`: one entry per column,
    "column: expected X, found Y". Columns in `contains` match when the found text contains the
    expected text."""
    types = column_types(type(row))
    out: list[str] = []
    for name, raw in expected.items():
        if name not in types:
            out.append(f"{name}: no such column (columns: {', '.join(types)})")
            continue
        found = getattr(row, name)
        try:
            want = resolve(raw)
            if name in contains and isinstance(want, str):
                if not (isinstance(found, str) and want in found):
                    out.append(f"{name}: expected text containing {want!r}, found {resolve.show(found)}")
                continue
            want = typed(want, types[name])
        except ValueError as e:
            out.append(f"{name}: {e}")
            continue
        if not same(found, want):
            out.append(f"{name}: expected {resolve.show(want)}, found {resolve.show(found)}")
    return out


def project(row: Any, columns: list[str], resolve: Resolver) -> str:
    """A row shown with only the given columns (all if none)."""
    names = [c for c in columns if c in row.__struct_fields__] or list(row.__struct_fields__)
    return "{" + ", ".join(f"{c}={resolve.show(getattr(row, c))}" for c in names) + "}"
