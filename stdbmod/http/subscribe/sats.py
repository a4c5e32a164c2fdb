"""SpacetimeDB's JSON forms (SATS-JSON) for stdbmod's column types: each value as SpacetimeDB's
JSON protocols write it, and each type as the `schema` of a `/sql` answer describes it.

    values: a row is a positional array; Identity {"__identity__": "0x<64 hex>"}, ConnectionId
    {"__connection_id__": <u128>}, Timestamp {"__timestamp_micros_since_unix_epoch__": n},
    TimeDuration {"__time_duration_micros__": n}, bytes as hex, an optional value {"some": v} or
    {"none": []}, ScheduleAt {"Interval": duration} / {"Time": timestamp}, an enum member
    {"<value>": []}, a nested Struct a positional array
    types: {"I64": []}, {"String": []}, {"Product": {"elements": [...]}}, {"Sum": {"variants": [...]}}

SATS has no "any JSON" type: a column typed `Any` (the task's payload) is its JSON text, a String.
Integers are all I64 (stdbmod's columns do not declare widths).
"""

from __future__ import annotations

import enum
import functools
import operator
import types as pytypes
import typing
from collections.abc import Callable
from functools import cache
from typing import Any, Literal

import msgspec

from ... import codec
from ...schema import TableDef
from ...types import At, ConnectionId, Every, Identity, TimeDuration, Timestamp

Encode = Callable[[Any], Any]
_NONE: list[Any] = []


def _some(name: str, tp: Any) -> dict[str, Any]:
    return {"name": {"some": name}, "algebraic_type": tp}


def _product(*fields: tuple[str, Any]) -> dict[str, Any]:
    return {"Product": {"elements": [_some(n, t) for n, t in fields]}}


def _sum(*variants: tuple[str, Any]) -> dict[str, Any]:
    return {"Sum": {"variants": [_some(n, t) for n, t in variants]}}


_SPECIAL_TYPES: dict[type, dict[str, Any]] = {
    Identity: _product(("__identity__", {"U256": []})),
    ConnectionId: _product(("__connection_id__", {"U128": []})),
    Timestamp: _product(("__timestamp_micros_since_unix_epoch__", {"I64": []})),
    TimeDuration: _product(("__time_duration_micros__", {"I64": []})),
}
_PRIMITIVE_TYPES: dict[type, dict[str, Any]] = {
    bool: {"Bool": []},
    int: {"I64": []},
    float: {"F64": []},
    str: {"String": []},
    bytes: {"Array": {"U8": []}},
}
_UNIT_TYPE: dict[str, Any] = {"Product": {"elements": []}}


def identity(value: Identity) -> dict[str, str]:
    return {"__identity__": "0x" + value.to_hex()}


def connection_id(value: ConnectionId | None) -> dict[str, int]:
    """SpacetimeDB's u128; the all-zero id stands for none."""
    return {"__connection_id__": int.from_bytes(value.to_bytes(), "big") if value is not None else 0}


def timestamp(micros: int) -> dict[str, int]:
    return {"__timestamp_micros_since_unix_epoch__": micros}


def duration(micros: int) -> dict[str, int]:
    return {"__time_duration_micros__": micros}


def _json_text(value: Any) -> str:
    return codec.json_encoder.encode(value).decode()


def _union(types: list[Any]) -> Any:
    """`A | B | ...` of `types` (one type: itself)."""
    return functools.reduce(operator.or_, types)


def _members(tp: Any) -> list[str] | None:
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return [str(m.value) if isinstance(m.value, str) else m.name for m in tp]
    if typing.get_origin(tp) is Literal:
        return [str(a) for a in typing.get_args(tp)]
    return None


def _variant_name(tp: Any) -> Callable[[Any], str]:
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return lambda v: str(v.value) if isinstance(v.value, str) else str(v.name)
    return str


@cache
def encoder(tp: Any) -> Encode:
    """value of type `tp` -> its SATS-JSON (plain JSON data)."""
    if tp in (bool, int, float, str):
        return lambda v: v
    if tp is bytes:
        return lambda v: v.hex()
    if tp is Identity:
        return identity
    if tp is ConnectionId:
        return connection_id
    if tp is Timestamp:
        return lambda v: timestamp(v.micros)
    if tp is TimeDuration:
        return lambda v: duration(v.micros)
    if _members(tp) is not None:
        name = _variant_name(tp)
        return lambda v: {name(v): _NONE}
    origin = typing.get_origin(tp)
    if origin in (typing.Union, pytypes.UnionType):
        args = typing.get_args(tp)
        if set(args) == {At, Every}:
            return lambda v: {"Interval": duration(v.interval.micros)} if isinstance(v, Every) else {"Time": timestamp(v.time.micros)}
        rest = [a for a in args if a is not type(None)]
        if type(None) in args:
            inner = encoder(_union(rest))
            return lambda v: {"none": _NONE} if v is None else {"some": inner(v)}
        return _json_text
    if origin in (list, tuple) and typing.get_args(tp):
        item = encoder(typing.get_args(tp)[0])
        return lambda v: [item(x) for x in v]
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        fields = [(f.name, encoder(f.type)) for f in msgspec.structs.fields(tp)]
        return lambda v: [enc(getattr(v, n)) for n, enc in fields]
    return _json_text  # Any, dicts and the rest: their JSON text


@cache
def algebraic_type(tp: Any) -> dict[str, Any]:
    """The SATS type of `tp`, as JSON."""
    if tp in _SPECIAL_TYPES:
        return _SPECIAL_TYPES[tp]
    if tp in _PRIMITIVE_TYPES:
        return _PRIMITIVE_TYPES[tp]
    members = _members(tp)
    if members is not None:
        return _sum(*((m, _UNIT_TYPE) for m in members))
    origin = typing.get_origin(tp)
    if origin in (typing.Union, pytypes.UnionType):
        args = typing.get_args(tp)
        if set(args) == {At, Every}:
            return _sum(("Interval", _SPECIAL_TYPES[TimeDuration]), ("Time", _SPECIAL_TYPES[Timestamp]))
        rest = [a for a in args if a is not type(None)]
        if type(None) in args:
            return _sum(("some", algebraic_type(_union(rest))), ("none", _UNIT_TYPE))
        return _PRIMITIVE_TYPES[str]
    if origin in (list, tuple) and typing.get_args(tp):
        return {"Array": algebraic_type(typing.get_args(tp)[0])}
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return _product(*((f.name, algebraic_type(f.type)) for f in msgspec.structs.fields(tp)))
    return _PRIMITIVE_TYPES[str]


def product_type(columns: list[tuple[str, Any]]) -> dict[str, Any]:
    """The `schema` of rows with these (name, type) columns."""
    return {"elements": [_some(n, algebraic_type(t)) for n, t in columns]}


class RowEncoder:
    """One table's rows (column-value tuples) as SATS-JSON positional arrays, or their JSON text
    (the WebSocket's form: each row a string)."""

    def __init__(self, table: TableDef) -> None:
        self._encoders = [encoder(c.type) for c in table.columns]
        self._json = msgspec.json.Encoder()

    def values(self, row: tuple[Any, ...]) -> list[Any]:
        return [enc(v) for enc, v in zip(self._encoders, row)]

    def text(self, row: tuple[Any, ...]) -> str:
        return self._json.encode([enc(v) for enc, v in zip(self._encoders, row)]).decode()

