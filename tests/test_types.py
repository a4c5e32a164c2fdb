from __future__ import annotations

import datetime as dt
from importlib.machinery import EXTENSION_SUFFIXES

import msgspec
import pytest

from stdbmod import codec, special
from stdbmod.errors import InvalidValue, WrongType
from stdbmod.runtime.clock import SystemClock
from stdbmod.types import At, ConnectionId, Every, Identity, ScheduleAt, TimeDuration, Timestamp


def test_identity_from_claims_is_spacetimedb_shaped() -> None:
    a = Identity.from_claims("https://auth.example", "user-1")
    assert a.to_hex().startswith("c200") and len(a.to_hex()) == 64
    assert a == Identity.from_claims("https://auth.example", "user-1")
    assert a != Identity.from_claims("https://auth.example", "user-2")
    assert a != Identity.from_claims("https://other.example", "user-1")
    assert Identity.from_hex(a.to_hex()) == a == Identity.from_hex("0x" + a.to_hex())


@pytest.mark.parametrize("bad", ["", "c200", "zz" * 32, "c2" * 33])
def test_identity_hex_is_checked(bad: str) -> None:
    with pytest.raises(ValueError):
        Identity.from_hex(bad)


def test_identity_and_connection_widths() -> None:
    with pytest.raises(ValueError):
        Identity(b"x" * 31)
    assert len(ConnectionId.random().to_bytes()) == 16
    assert ConnectionId.random() != ConnectionId.random()


def test_values_are_immutable_and_hashable() -> None:
    i = Identity.zero()
    with pytest.raises(AttributeError):
        i._b = b"x"
    with pytest.raises(AttributeError):
        Timestamp(1).micros = 2
    assert {i: 1}[Identity.zero()] == 1
    assert len({Timestamp(1), Timestamp(1), TimeDuration(1)}) == 2


def test_timestamp_arithmetic_and_parsing() -> None:
    t = Timestamp.parse("2026-01-01T00:00:00Z")
    assert t.to_datetime() == dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert t + TimeDuration.from_seconds(1.5) == Timestamp(t.micros + 1_500_000)
    assert (t + TimeDuration(10)) - t == TimeDuration(10)
    assert Timestamp.parse(t.isoformat()) == t
    with pytest.raises(ValueError):
        Timestamp.parse("yesterday")
    with pytest.raises(ValueError):
        Timestamp(2**63)
    with pytest.raises(TypeError):
        Timestamp(1.5)
    # the same errors compiled (where a parameter typed `str` or `int` would raise mypyc's own)
    with pytest.raises(InvalidValue, match="not an RFC 3339 time"):
        Timestamp.parse(5)
    with pytest.raises(WrongType):
        Timestamp.checked(1.5)
    with pytest.raises(InvalidValue, match="years 1 to 9999"):
        Timestamp.checked(Timestamp.MAX_MICROS + 1)
    assert Timestamp.checked(7) == Timestamp(7)


def test_the_unchecked_constructions_make_equal_values() -> None:
    """The row decoder and the system clock build values without the constructor's checks
    (special.NATIVE says how, interpreted or compiled): what they build is the same value, of the
    same class, as the constructor's, and as immutable."""
    stored = codec.msgpack_encoder.encode([Timestamp(-5), TimeDuration(7), Identity.from_claims("a", "b"), ConnectionId(bytes(range(16)))])
    t, d, i, c = msgspec.msgpack.decode(stored, type=tuple[Timestamp, TimeDuration, Identity, ConnectionId], dec_hook=codec.dec_hook)
    assert (type(t), type(d), type(i), type(c)) == (Timestamp, TimeDuration, Identity, ConnectionId)
    assert (t, d, i, c) == (Timestamp(-5), TimeDuration(7), Identity.from_claims("a", "b"), ConnectionId(bytes(range(16))))
    assert hash(t) == hash(Timestamp(-5)) and t < Timestamp(0) and t + d == Timestamp(2)
    now = SystemClock().now()
    assert type(now) is Timestamp and now.in_range() and now == Timestamp(now.micros)
    for value in (t, now):
        with pytest.raises(AttributeError):
            value.micros = 0
    # compiled, they are native classes (whose constructor is the fast way); interpreted, not
    assert special.NATIVE == (special.__file__ or "").endswith(EXTENSION_SUFFIXES[0])


def test_json_forms() -> None:
    i = Identity.from_claims("a", "b")
    assert codec.to_builtins(i) == i.to_hex()
    assert codec.convert({"__identity__": "0x" + i.to_hex()}, Identity) == i
    assert codec.convert({"__timestamp_micros_since_unix_epoch__": 5}, Timestamp) == Timestamp(5)
    assert codec.convert("1970-01-01T00:00:01Z", Timestamp) == Timestamp(1_000_000)
    with pytest.raises(msgspec.ValidationError):
        codec.convert(True, Timestamp)
    with pytest.raises(msgspec.ValidationError):
        codec.convert("nothex", Identity)


def test_schedule_at_is_a_tagged_union() -> None:
    enc = codec.to_builtins(At(Timestamp(7)))
    assert enc == {"type": "time", "time": 7}
    assert codec.convert({"type": "interval", "interval": 5}, ScheduleAt) == Every(TimeDuration(5))
    raw = codec.msgpack_encoder.encode(Every(TimeDuration(3)))
    assert codec.msgpack_decoder(ScheduleAt).decode(raw) == Every(TimeDuration(3))
