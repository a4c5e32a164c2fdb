"""SpacetimeDB's special value types: Identity, ConnectionId, Timestamp, TimeDuration.

Small immutable value classes, re-exported by `stdbmod.types` (where `ScheduleAt` is); the hooks
in `stdbmod.codec` encode them (bytes or hex for identities, integer microseconds for times). A
module of their own so that the optional compiled build can make them native classes (mypyc
would drop the class options of the msgspec Structs in types.py): a time's arithmetic and
comparisons, and every row decode's construction of its times, are then C calls.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from types import FunctionType
from typing import Annotated, Any, ClassVar, Final

import blake3
import msgspec

from ._mypyc import mypyc_attr
from .errors import InvalidValue, WrongType

__all__ = ["ConnectionId", "Identity", "TimeDuration", "Timestamp"]


@mypyc_attr(acyclic=True)
class _Bytes:
    """A fixed-width byte string shown as lowercase big-endian hex."""

    __slots__ = ("_b",)
    WIDTH: ClassVar[int] = 0
    _b: bytes

    def __init__(self, value: object) -> None:
        if not isinstance(value, (bytes, bytearray)) or len(value) != self.WIDTH:
            raise InvalidValue(f"{type(self).__name__} takes exactly {self.WIDTH} bytes")
        object.__setattr__(self, "_b", value if type(value) is bytes else bytes(value))  # bytes are immutable: no copy

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    @classmethod
    def from_hex(cls, text: str) -> Any:
        text = text.strip()
        if text.startswith(("0x", "0X")):
            text = text[2:]
        if len(text) != cls.WIDTH * 2:
            raise InvalidValue(f"{cls.__name__} hex must be {cls.WIDTH * 2} characters, got {len(text)}")
        try:
            return cls(bytes.fromhex(text))
        except ValueError:
            raise InvalidValue(f"{cls.__name__} hex contains a non-hex character") from None

    def to_bytes(self) -> bytes:
        return self._b

    def to_hex(self) -> str:
        return self._b.hex()

    def __str__(self) -> str:
        return self._b.hex()

    def __repr__(self) -> str:
        return f"{type(self).__name__}.from_hex({self._b.hex()!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._b == self._b

    def __lt__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._b < other._b

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._b))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._b,))


@mypyc_attr(acyclic=True)
class Identity(_Bytes):
    """A 32-byte identity. Derived from a token's issuer and subject as SpacetimeDB does
    (`Identity::from_claims`), so every derived identity's hex starts with ``c200``."""

    __slots__ = ()
    WIDTH: ClassVar[int] = 32

    @classmethod
    def from_claims(cls, issuer: str, subject: str) -> Identity:
        h1 = blake3.blake3(f"{issuer}|{subject}".encode()).digest()[:26]
        checksum = blake3.blake3(b"\xc2\x00" + h1).digest()[:4]
        return cls(b"\xc2\x00" + checksum + h1)

    @classmethod
    def zero(cls) -> Identity:
        return cls(bytes(32))

    def abbreviated(self) -> str:
        return self._b.hex()[:16]


@mypyc_attr(acyclic=True)
class ConnectionId(_Bytes):
    """A 16-byte connection id, random per connection; SpacetimeDB treats all-zero as none."""

    __slots__ = ()
    WIDTH: ClassVar[int] = 16

    @classmethod
    def random(cls) -> ConnectionId:
        return cls(os.urandom(16))


# The range of the compiled build's unboxed ints (mypyc's short ints, 63 bits). Compiled, a
# comparison of an int with one of these is a machine compare; one with 2**63 is a call on boxed
# ints (~300 instructions), and every time and key checks its range (docs/performance.md,
# "Fourteenth round"). So a range check asks these first.
SHORT_MIN: Final = -4611686018427387904  # -(2**62)
SHORT_MAX: Final = 4611686018427387903  # 2**62 - 1


@mypyc_attr(acyclic=True)
class _Micros:
    __slots__ = ("micros",)
    micros: int

    def __init__(self, micros: object) -> None:
        if isinstance(micros, bool) or not isinstance(micros, int):
            raise WrongType(f"{type(self).__name__} takes integer microseconds")
        if not (SHORT_MIN <= micros <= SHORT_MAX or -(2**63) <= micros < 2**63):
            raise InvalidValue(f"{type(self).__name__} out of the i64 microsecond range")
        object.__setattr__(self, "micros", micros)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.micros == self.micros

    def __lt__(self, other: Any) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.micros < other.micros

    def __le__(self, other: Any) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.micros <= other.micros

    def __gt__(self, other: Any) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.micros > other.micros

    def __ge__(self, other: Any) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.micros >= other.micros

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.micros))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.micros,))


@mypyc_attr(acyclic=True)
class TimeDuration(_Micros):
    """A signed duration in microseconds."""

    __slots__ = ()

    @classmethod
    def from_seconds(cls, seconds: float) -> TimeDuration:
        return cls(round(seconds * 1_000_000))

    def seconds(self) -> float:
        return self.micros / 1_000_000

    def __add__(self, other: TimeDuration) -> TimeDuration:
        return TimeDuration(self.micros + other.micros)

    def __mul__(self, k: int) -> TimeDuration:
        return TimeDuration(self.micros * k)

    def __repr__(self) -> str:
        return f"TimeDuration({self.micros})"


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
# RFC 3339's date-time (section 5.6), which msgspec's datetime decoding alone would widen (a
# space for the T, a +hhmm offset): date, T, time to the second, a fraction, Z or +hh:mm.
_RFC3339 = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})")
_AwareDatetime = Annotated[_dt.datetime, msgspec.Meta(tz=True)]
_CYCLE_DAYS = 146_097  # the Gregorian calendar repeats every 400 years
_CYCLE_MICROS = _CYCLE_DAYS * 86_400 * 1_000_000


@mypyc_attr(acyclic=True)
class Timestamp(_Micros):
    """Microseconds since the Unix epoch, as SpacetimeDB's `Timestamp`.

    Any i64 is a Timestamp (a module may compute one), but a time that comes in from outside (a
    JSON argument, an RFC 3339 string, a SQL literal, `run_after`) must fall in years 1 to 9999
    UTC, what RFC 3339 and Python's datetime can write (`checked`): the same instant is then
    accepted in every form or refused in every form."""

    __slots__ = ()

    MIN_MICROS: ClassVar[int] = -62_135_596_800_000_000  # 0001-01-01T00:00:00Z
    MAX_MICROS: ClassVar[int] = 253_402_300_799_999_999  # 9999-12-31T23:59:59.999999Z

    @classmethod
    def checked(cls, micros: object) -> Timestamp:
        """`Timestamp(micros)`, refused (InvalidValue) outside years 1 to 9999 UTC."""
        t = cls(micros)
        if not t.in_range():
            raise InvalidValue(f"a time must fall in years 1 to 9999 (UTC); {t.isoformat()} ({t.micros} µs since the epoch) does not")
        return t

    def in_range(self) -> bool:
        """Whether it falls in years 1 to 9999 UTC (`checked` would take it)."""
        return self.MIN_MICROS <= self.micros <= self.MAX_MICROS

    @classmethod
    def from_datetime(cls, value: _dt.datetime) -> Timestamp:
        """An aware datetime's instant; refused if in UTC it falls outside years 1 to 9999 (an
        offset can carry 0001-01-01T00:00:00+01:00 into year 0)."""
        if value.tzinfo is None:
            raise InvalidValue("a Timestamp needs a timezone-aware datetime")
        offset = value.utcoffset() or _dt.timedelta()
        local = value.replace(tzinfo=_dt.UTC) - _EPOCH  # never overflows, unlike value - _EPOCH
        delta = local - offset
        return cls.checked((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds)

    @classmethod
    def parse(cls, text: object) -> Timestamp:
        """An RFC 3339 time (``2026-01-01T00:00:00Z``, ``2026-01-01t10:30:00.5+01:00``), and
        nothing else ISO 8601 allows: no date alone, basic or week format, hour alone, ``+0100``
        offset, comma decimals, nor a time without its offset (which UTC would only guess)."""
        if not isinstance(text, str) or _RFC3339.fullmatch(text) is None:
            raise InvalidValue(f"not an RFC 3339 time (e.g. 2026-01-01T09:30:00Z or 2026-01-01T10:30:00+01:00): {text!r}")
        try:
            value = msgspec.convert(text, _AwareDatetime)
        except msgspec.ValidationError:
            raise InvalidValue(f"not a valid RFC 3339 time: {text!r}") from None
        return cls.from_datetime(value)

    def to_datetime(self) -> _dt.datetime:
        """As an aware datetime (UTC); InvalidValue outside years 1 to 9999 (see `isoformat`)."""
        if not self.in_range():
            raise InvalidValue(f"{self.isoformat()} is outside the years a datetime can hold")
        return _EPOCH + _dt.timedelta(microseconds=self.micros)

    def isoformat(self) -> str:
        """RFC 3339 (``2026-01-01T00:00:00Z``); any i64 writes, outside years 1 to 9999 with an
        ISO 8601 expanded year (``+10000-01-01T00:00:00Z``), so a tool showing a stored value
        never fails on it."""
        if self.in_range():
            return (_EPOCH + _dt.timedelta(microseconds=self.micros)).isoformat().replace("+00:00", "Z")
        cycles, rest = divmod(self.micros - self.MIN_MICROS, _CYCLE_MICROS)  # 400-year cycles from year 1
        shifted = _EPOCH + _dt.timedelta(microseconds=self.MIN_MICROS + rest)
        year = shifted.year + 400 * cycles
        return f"{year:+05d}" + shifted.isoformat()[4:].replace("+00:00", "Z")

    def __add__(self, other: TimeDuration) -> Timestamp:
        if not isinstance(other, TimeDuration):
            return NotImplemented
        return Timestamp(self.micros + other.micros)

    def __sub__(self, other: Any) -> Any:
        if isinstance(other, Timestamp):
            return TimeDuration(self.micros - other.micros)
        if isinstance(other, TimeDuration):
            return Timestamp(self.micros - other.micros)
        return NotImplemented

    def __repr__(self) -> str:
        return f"Timestamp({self.micros})"


# A value built without its constructor's checks, for the callers that vouch for it: the row
# decoder (codec.dec_hook: an int it range-checked, bytes of the right width) and the system
# clock. Interpreted, `v = _new(Timestamp); _set_micros(v, micros)` is `Timestamp(micros)`
# without a Python frame (two C calls). Compiled (the optional build makes these native
# classes), the constructor is itself a C call, and the only way: a native class refuses
# `object.__new__`. `NATIVE` says which; the callers take the constructor when it is true.
NATIVE: Final = not isinstance(vars(_Micros)["__init__"], FunctionType)
_new = object.__new__
_set_micros = vars(_Micros)["micros"].__set__  # the slot's (or the native attribute's) setter
_set_bytes = vars(_Bytes)["_b"].__set__
