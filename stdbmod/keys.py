"""An order-preserving encoding of column values into LMDB keys.

`encode_key(v1) + encode_key(v2)` sorts byte-wise exactly as `(v1, v2)` sorts in Python, so an
index over several columns is one LMDB database and prefix or range scans are cursor walks. Every
value starts with a type tag and is prefix-free: integers are fixed width, strings and bytes are
escaped and terminated. Mixed types order by tag (None first), which Python would refuse to
compare; a column has one type, so that never matters to a query.
"""

from __future__ import annotations

import contextlib
import enum
import struct
from typing import Any, Final

from .errors import InvalidValue, SchemaError
from .special import NATIVE, SHORT_MAX, SHORT_MIN
from .types import ConnectionId, Identity, TimeDuration, Timestamp

_NONE: Final = b"\x01"
_FALSE: Final = b"\x02\x00"
_TRUE: Final = b"\x02\x01"
_INT: Final = 0x03
_FLOAT: Final = 0x04
_STR: Final = 0x05
_BYTES: Final = 0x06
_IDENTITY: Final = 0x07
_CONNECTION: Final = 0x08

_INT_OFFSET: Final = 1 << 63
_INT_MIN: Final = -(1 << 63)
_INT_MAX: Final = (1 << 64) - 1  # u64 columns are allowed too
_INT_WIDTH: Final = 9

MAX_KEY_SIZE: Final = 511


def _escape(raw: bytes) -> bytes:
    # 0x00 inside the value becomes 0x00 0xFF so that the terminator 0x00 0x00 sorts first.
    return raw.replace(b"\x00", b"\x00\xff") + b"\x00\x00"


_INT_TAG: Final = bytes((_INT,))


# An integer key is its tag and value + 2**63 in 9 bytes. For a value in mypyc's unboxed range
# (special.SHORT_MIN..SHORT_MAX) the first two of those bytes are 0x00 and (value >> 56) + 0x80,
# and the other seven the value's own low 56 bits: the same bytes without the addition, which
# compiled is on boxed ints (~400 instructions) as 2**63 is one.
_SHORT_PREFIX: Final = tuple(bytes((_INT, 0x00, i + 0x40)) for i in range(128))  # by (value >> 56) + 64
_LOW56: Final = (1 << 56) - 1


def _offset(value: int) -> bytes:
    """The key of an integer in the indexable range, checked by the caller."""
    if SHORT_MIN <= value <= SHORT_MAX:
        return _SHORT_PREFIX[(value >> 56) + 64] + (value & _LOW56).to_bytes(7, "big")
    return _INT_TAG + (value + _INT_OFFSET).to_bytes(_INT_WIDTH, "big")


# The keys of small integers, made once: a row's flags, counts and priorities (a claim index
# holds -priority, mostly 0) are half the integers a retry lifecycle's keys hold.
_SMALL: Final = tuple(_INT_TAG + (v + _INT_OFFSET).to_bytes(_INT_WIDTH, "big") for v in range(-128, 128))


def _int(value: int) -> bytes:
    if -128 <= value < 128:
        return _SMALL[value + 128]
    if not (SHORT_MIN <= value <= SHORT_MAX or _INT_MIN <= value <= _INT_MAX):  # special.py
        raise InvalidValue(f"integer {value} is outside the indexable range [-2**63, 2**64)")
    if NATIVE:  # compiled: `_offset` is a direct call
        return _offset(value)
    return _INT_TAG + (value + _INT_OFFSET).to_bytes(_INT_WIDTH, "big")  # interpreted: no second frame


def _float(value: float) -> bytes:
    bits: int = struct.unpack(">Q", struct.pack(">d", value))[0]
    bits = bits ^ 0xFFFFFFFFFFFFFFFF if bits & (1 << 63) else bits | (1 << 63)
    return bytes((_FLOAT,)) + bits.to_bytes(8, "big")


def _encode_slow(value: Any) -> bytes:
    if value is None:
        return _NONE
    if value is True:
        return _TRUE
    if value is False:
        return _FALSE
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, int):
        return _int(value)
    if isinstance(value, str):
        return bytes((_STR,)) + _escape(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, (Timestamp, TimeDuration)):
        return _int(value.micros)
    if isinstance(value, Identity):
        return bytes((_IDENTITY,)) + value.to_bytes()
    if isinstance(value, ConnectionId):
        return bytes((_CONNECTION,)) + value.to_bytes()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes((_BYTES,)) + _escape(bytes(value))
    if isinstance(value, float):
        return _float(value)
    raise SchemaError(f"values of type {type(value).__name__} cannot be used in a key")


_STR_TAG: Final = bytes((_STR,))
_IDENTITY_TAG: Final = bytes((_IDENTITY,))
_CONNECTION_TAG: Final = bytes((_CONNECTION,))
_BYTES_TAG: Final = bytes((_BYTES,))

# The keys of the strings written most: a table's rows repeat a few queue names, job types and
# the like in their indexed columns, and a string's key took ~1,300 instructions to make (an
# encode, a replace, two concatenations) where a dict's lookup of a str (its hash kept) takes
# ~100. Bounded: emptied when full, so many distinct strings (idempotency keys) cost one insert
# each, and only short strings are kept (~1 MB at most). Only exact `str` values come here.
_STR_KEYS: Final[dict[str, bytes]] = {}
_STR_KEYS_MAX: Final = 4096
_STR_KEPT_LEN: Final = 64


def _str(v: str) -> bytes:
    key = _STR_KEYS.get(v)
    if key is None:
        key = _STR_TAG + _escape(v.encode("utf-8", "surrogatepass"))
        if len(v) <= _STR_KEPT_LEN:
            if len(_STR_KEYS) >= _STR_KEYS_MAX:
                _STR_KEYS.clear()
            _STR_KEYS[v] = key
    return key


def _micros(v: Timestamp | TimeDuration) -> bytes:
    # The classes keep micros inside the i64 range, so `_int`'s range check cannot fail here.
    if NATIVE:
        return _offset(v.micros)
    return _INT_TAG + (v.micros + _INT_OFFSET).to_bytes(_INT_WIDTH, "big")


# The common exact types skip the isinstance chain (keys are built on every row write);
# anything else (subclasses, enums before their first use) takes `_encode_slow`, which gives the
# same bytes.
_FAST: Final[dict[type, Any]] = {
    int: _int,
    str: _str,
    # a dict's own lookup: no Python frame per value (None and bool fill most optional and flag columns)
    bool: {False: _FALSE, True: _TRUE}.__getitem__,
    type(None): {None: _NONE}.__getitem__,
    Timestamp: _micros,
    TimeDuration: _micros,
    Identity: lambda v: _IDENTITY_TAG + v.to_bytes(),
    ConnectionId: lambda v: _CONNECTION_TAG + v.to_bytes(),
    bytes: lambda v: _BYTES_TAG + _escape(v),
    float: _float,
}


class _EnumKeys(dict[Any, bytes]):
    """An enum's members' keys; a value not among them (a Flag combination made on the fly, an
    unencodable member) is encoded the slow way, which raises for the unencodable."""

    def __missing__(self, value: Any) -> bytes:
        return _encode_slow(value)


def _enum_encoder(cls: type[enum.Enum]) -> Any:
    """An enum's members have fixed values: encode each once, look it up after (a dict's own
    lookup: no Python frame per value)."""
    table = _EnumKeys()
    for m in cls.__members__.values():
        with contextlib.suppress(SchemaError, ValueError):  # unencodable: fails when used
            table[m] = _encode_slow(m)
    return table.__getitem__


def _fast_of(typ: type) -> Any:
    """The fast encoder of `typ`, made (and kept) for an enum type on its first use."""
    fast = _FAST.get(typ)
    if fast is None and issubclass(typ, enum.Enum):
        fast = _FAST[typ] = _enum_encoder(typ)
    return fast


# For callers encoding many values in a loop: `FAST_ENCODERS.get(type(v))`, and `encode_value`
# on a miss, saves a call per value.
FAST_ENCODERS: Final = _FAST


def encode_value(value: Any) -> bytes:
    """Encode one column value."""
    # The commonest key types first, by exact type: compiled, each is a direct C call, where a
    # callable from `_FAST` is a generic one through its wrapper (-1.6% of a lifecycle call's
    # instructions, docs/performance.md). Interpreted callers in a loop use `FAST_ENCODERS`.
    t = type(value)
    if t is int:
        return _int(value)
    if t is str:
        return _str(value)
    if value is None:
        return _NONE
    if t is Timestamp:
        return _micros(value)
    if t is Identity:
        ident: Identity = value
        return _IDENTITY_TAG + ident.to_bytes()
    fast = _FAST.get(t) or _fast_of(t)
    if fast is not None:
        return fast(value)  # type: ignore[no-any-return]
    return _encode_slow(value)


def encode_key(values: tuple[Any, ...]) -> bytes:
    """Encode a tuple of column values (a multi-column key, or a prefix of one)."""
    if len(values) == 1:
        return encode_value(values[0])
    return b"".join([encode_value(v) for v in values])


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key that starts with `prefix` (None: no such key)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes((stripped[-1] + 1,))


def encode_u64(n: int) -> bytes:
    """Fixed-width big-endian, for log offsets and other internal counters."""
    return n.to_bytes(8, "big")


def decode_u64(b: bytes) -> int:
    return int.from_bytes(b, "big")
