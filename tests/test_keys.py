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
# in keys._offset makes the same bytes without the addition); edges of both ranges always tried
_EDGES = (0, -1, 2**56 - 1, 2**56, -(2**56), -(2**56) - 1, 2**62 - 1, 2**62, -(2**62), -(2**62) - 1, 2**63 - 1, -(2**63), 2**64 - 1)


@given(st.one_of(ints, st.sampled_from(_EDGES), st.integers(min_value=-(2**62) - 2, max_value=2**62 + 1)))
def test_int_keys_are_value_plus_2_to_63_in_9_bytes(v: int) -> None:
    assert encode_value(v) == b"\x03" + (v + 2**63).to_bytes(9, "big")
    if -(2**63) <= v < 2**63:
        assert encode_value(Timestamp(v)) == encode_value(v)
