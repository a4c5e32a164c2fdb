"""How a table's rows are stored: a MessagePack array of the column values, in declared order.

A row's bytes in its table's space, and the row images of the commit log, are its columns' values
as a MessagePack array (`RowFormat.encode`). Databases and commit logs written before rows were
arrays hold MessagePack maps (msgspec's encoding of a Struct: every field's name with its value);
those are read as they are, told apart by their first byte, and a row is written as an array the
next time a reducer writes it. No pass rewrites a database: an upgrade opens it as it is.

Why arrays: a map repeats every column's name in every row and every row image, and decoding one
matches each key against the Struct's fields. A claimed task is 552 bytes as a map and 149 as an
array; decoding it takes ~20% less time and encoding ~5% less; a lifecycle's commit records shrink
below the size the commit log compresses (docs/performance.md, "Eleventh round").

Rows decode to a tuple of the columns' typed values, which build the row with its own
constructor, so that what a reducer reads is of the row type it declared, whatever the stored
form. An array shorter than the row type, written before columns were appended, decodes through
an `array_like` twin of the row type (same fields, types and defaults) and takes the defaults, as
a map without those keys did.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from . import codec
from ._mypyc import mypyc_attr
from .special import NATIVE

__all__ = ["ARRAY", "MAP", "RowFormat", "is_map"]

MAP: Final = 0  # the rows' form before they were arrays: read, and hashed by old checkpoints
ARRAY: Final = 1


def is_map(raw: bytes) -> bool:
    """Whether stored row bytes are the older map form (fixmap, map16, map32)."""
    first = raw[0]
    return 0x80 <= first <= 0x8F or first == 0xDE or first == 0xDF


# Compiled (mypyc), a native class; interpreted subclasses are allowed for tests that count reads.
@mypyc_attr(allow_interpreted_subclasses=True)
class RowFormat:
    """The stored form of one table's rows."""

    def __init__(self, row_type: type[msgspec.Struct]) -> None:
        self.row_type = row_type
        fields = msgspec.structs.fields(row_type)
        self._names = tuple(f.name for f in fields)
        self._maps = codec.msgpack_decoder(row_type)
        twin = msgspec.defstruct(
            row_type.__name__,
            [(f.name, f.type) if _default(f) is msgspec.NODEFAULT else (f.name, f.type, _default(f)) for f in fields],
            array_like=True,
            kw_only=True,  # a kw_only row type may declare a required field after an optional one
        )
        self._arrays = codec.msgpack_decoder(twin)
        # a full-length array straight to its typed values: no twin to build and take apart
        self._full = codec.msgpack_decoder(tuple[tuple(f.type for f in fields)])  # type: ignore[misc]
        # msgspec's __match_args__ names the fields its constructor takes by position
        self._positional = len(getattr(row_type, "__match_args__", ())) == len(fields)

    def encode(self, values: tuple[Any, ...]) -> bytes:
        """A row's stored bytes from its column values (`msgspec.structs.astuple(row)`)."""
        if NATIVE:  # special.py: compiled, handing msgspec its own types is quicker than its hook
            return codec.msgpack_encoder.encode(codec.stored_values(values))
        return codec.msgpack_encoder.encode(values)  # interpreted, the loop costs more than it saves

    def decode(self, raw: bytes) -> Any:
        """The row of stored bytes, either form."""
        if is_map(raw):
            return self._maps.decode(raw)
        values = self._array_values(raw)
        if self._positional:
            return self.row_type(*values)
        return self.row_type(**dict(zip(self._names, values, strict=True)))

    def values(self, raw: bytes) -> tuple[Any, ...]:
        """The column values of stored bytes, either form, without building the row."""
        if is_map(raw):
            return msgspec.structs.astuple(self._maps.decode(raw))
        return self._array_values(raw)

    def _array_values(self, raw: bytes) -> tuple[Any, ...]:
        try:
            return self._full.decode(raw)  # type: ignore[no-any-return]
        except msgspec.ValidationError:
            # written before columns were appended (shorter: the twin fills in their defaults),
            # or not a row at all (the twin raises as well, saying where)
            return msgspec.structs.astuple(self._arrays.decode(raw))

    def same(self, raw: bytes, encoded: bytes) -> bool:
        """Whether stored bytes, either form, hold the row whose `encode` is `encoded`: byte for
        byte, as equal rows were always told apart."""
        return raw == encoded or (is_map(raw) and self.hashed(raw, ARRAY) == encoded)

    def hashed(self, raw: bytes, form: int) -> bytes:
        """The bytes a state hash takes for a stored row: the row in `form` (ARRAY, or MAP for a
        checkpoint taken before rows were arrays), whichever form it is stored in."""
        if is_map(raw) == (form == MAP):
            return raw
        if form == MAP:
            return codec.msgpack_encoder.encode(self.decode(raw))
        return self.encode(self.values(raw))


def _default(f: msgspec.structs.FieldInfo) -> Any:
    if f.default_factory is not msgspec.NODEFAULT:
        return msgspec.field(default_factory=f.default_factory)
    return f.default
