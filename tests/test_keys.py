"""The order-preserving key encoding: encoded byte order equals Python value order."""

from __future__ import annotations

import enum
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from stdbmod.keys import encode_key, encode_value, prefix_end
from stdbmod.types import Identity, Timestamp

ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)
texts = st.text()
blobs = st.binary()
bools = st.booleans()
timestamps = st.integers(min_value=-(2**63), max_value=2**63 - 1).map(Timestamp)
identities = st.binary(min_size=32, max_size=32).map(Identity)
floats = st.floats(allow_nan=False)


def _key(v: Any) -> Any:
    """The Python sort key of a value (Identity sorts by its bytes, Timestamp by micros)."""
    if isinstance(v, Identity):
        return v.to_bytes()
    if isinstance(v, Timestamp):
        return v.micros
    return v


def _same_order(a: Any, b: Any) -> None:
    ea, eb = encode_value(a), encode_value(b)
    ka, kb = _key(a), _key(b)
    assert (ea < eb) == (ka < kb)
    assert (ea == eb) == (ka == kb)


@given(ints, ints)
def test_ints(a: int, b: int) -> None:
    _same_order(a, b)


@given(texts, texts)
def test_strings(a: str, b: str) -> None:
    _same_order(a, b)


@given(blobs, blobs)
def test_bytes(a: bytes, b: bytes) -> None:
    _same_order(a, b)


@given(bools, bools)
def test_bools(a: bool, b: bool) -> None:
    _same_order(a, b)


@given(timestamps, timestamps)
def test_timestamps(a: Timestamp, b: Timestamp) -> None:
    _same_order(a, b)


@given(identities, identities)
def test_identities(a: Identity, b: Identity) -> None:
    _same_order(a, b)


@given(floats, floats)
def test_floats(a: float, b: float) -> None:
    if a == b:  # -0.0 == 0.0 in Python but they encode differently; order is all we promise
        return
    assert (encode_value(a) < encode_value(b)) == (a < b)


row = st.tuples(st.one_of(ints), texts, blobs, bools, timestamps, identities)


@given(row, row)
def test_tuples_order_like_python_tuples(a: tuple[Any, ...], b: tuple[Any, ...]) -> None:
    ea, eb = encode_key(a), encode_key(b)
    ka, kb = tuple(map(_key, a)), tuple(map(_key, b))
    assert (ea < eb) == (ka < kb)
    assert (ea == eb) == (ka == kb)


@given(st.tuples(ints, texts), st.tuples(ints, texts, ints))
def test_a_prefix_bounds_exactly_its_extensions(prefix: tuple[Any, ...], full: tuple[Any, ...]) -> None:
    p = encode_key(prefix)
    k = encode_key(full)
    end = prefix_end(p)
    inside = full[: len(prefix)] == prefix
    assert (p <= k and (end is None or k < end)) == inside


def test_none_sorts_first_and_enums_by_value() -> None:
    class Color(str, enum.Enum):
        RED = "red"
        BLUE = "blue"

    assert encode_value(None) < encode_value(-(2**63)) < encode_value(0)
    assert encode_value(Color.BLUE) == encode_value("blue") < encode_value(Color.RED)


def test_out_of_range_ints_are_refused() -> None:
    import pytest

    with pytest.raises(ValueError):
        encode_value(2**64)
    with pytest.raises(ValueError):
        encode_value(-(2**63) - 1)


# the stored format: tag 0x03, then value + 2**63 in 9 bytes big-endian (the short-range path
# in keys._offset makes the same bytes without the addition, and keys._SMALL holds -128..127's);
# edges of each range always tried
_EDGES = (0, -1, 127, 128, -128, -129, 2**56 - 1, 2**56, -(2**56), -(2**56) - 1, 2**62 - 1, 2**62, -(2**62), -(2**62) - 1, 2**63 - 1, -(2**63), 2**64 - 1)


@given(st.one_of(ints, st.sampled_from(_EDGES), st.integers(min_value=-(2**62) - 2, max_value=2**62 + 1)))
def test_int_keys_are_value_plus_2_to_63_in_9_bytes(v: int) -> None:
    assert encode_value(v) == b"\x03" + (v + 2**63).to_bytes(9, "big")
    if -(2**63) <= v < 2**63:
        assert encode_value(Timestamp(v)) == encode_value(v)


# the stored format of a string: tag 0x05, its UTF-8 (lone surrogates passed) with 0x00 escaped
# as 0x00 0xFF, then 0x00 0x00; short strings' keys are kept in a bounded dict (keys._STR_KEYS)
@given(st.text(max_size=80))
def test_string_keys_are_the_same_made_or_kept(v: str) -> None:
    fresh = b"\x05" + v.encode("utf-8", "surrogatepass").replace(b"\x00", b"\x00\xff") + b"\x00\x00"
    assert encode_value(v) == fresh
    assert encode_value(v) == fresh  # the second time from the dict, if it keeps this one


def test_the_string_keys_kept_stay_bounded() -> None:
    from stdbmod import keys

    keys._STR_KEYS.clear()
    long = "x" * (keys._STR_KEPT_LEN + 1)
    encode_value(long)
    assert long not in keys._STR_KEYS  # a long string is made each time, never kept
    for i in range(keys._STR_KEYS_MAX + 10):
        encode_value(f"queue-{i}")
    assert 0 < len(keys._STR_KEYS) <= keys._STR_KEYS_MAX
    assert f"queue-{keys._STR_KEYS_MAX + 9}" in keys._STR_KEYS  # the newest are kept
    assert encode_value("queue-5") == b"\x05queue-5\x00\x00"


def test_a_str_subclass_is_not_kept_for_str() -> None:
    """Only exact str values reach the dict: a subclass is encoded the slow way, to the same bytes."""
    from stdbmod import keys

    class Name(str):
        pass

    keys._STR_KEYS.clear()
    assert encode_value(Name("default")) == encode_value("default") == b"\x05default\x00\x00"
    assert list(keys._STR_KEYS) == ["default"] and type(next(iter(keys._STR_KEYS))) is str
