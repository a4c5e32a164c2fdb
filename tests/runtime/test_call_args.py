"""A call's Python arguments that skip msgspec's conversion (runtime/calls.py) are exactly what
the conversion would have made of them: the same values, the defaults filled in the same way,
the same bytes in the commit log."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stdbmod import ArgumentError, Database, Identity, Module, ReducerContext
from stdbmod.runtime.calls import _as_is, _Plan, encode_args
from stdbmod.schema import ReducerDef
from stdbmod.types import Timestamp

ALICE = Identity.from_claims("test", "alice")

TYPES: list[Any] = [str, int, float, bool, bytes, Any, Identity, str | None, int | None, float | int, Timestamp, Timestamp | None, list[int], dict[str, int]]
DEFAULTS: list[Any] = [None, 0, 1.5, "x", b"", True, inspect.Parameter.empty]
VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5), st.binary(max_size=5),
    st.just(ALICE), st.just(Timestamp(5)), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)  # fmt: skip


def _noop(ctx: ReducerContext, *args: Any) -> None:
    pass


@st.composite
def reducers(draw: st.DrawFn) -> ReducerDef:
    n = draw(st.integers(0, 4))
    types = [draw(st.sampled_from(TYPES)) for _ in range(n)]
    required = draw(st.integers(0, n))
    defaults = [inspect.Parameter.empty] * required + [draw(st.sampled_from(DEFAULTS[:-1])) for _ in range(n - required)]
    return ReducerDef("r", _noop, "reducer", [(f"p{i}", t, d) for i, (t, d) in enumerate(zip(types, defaults))])


@settings(max_examples=400, deadline=None)
@given(reducers(), st.lists(VALUES, max_size=5))
def test_unconverted_arguments_are_what_the_conversion_makes(r: ReducerDef, args: list[Any]) -> None:
    fast = _as_is(_Plan(r), tuple(args))
    if fast is None:
        return  # the conversion's work
    converted = msgspec.structs.astuple(msgspec.convert(args, r.args_type))
    assert fast == converted
    assert [type(v) for v in fast] == [type(v) for v in converted]
    assert _logged(fast) == _logged(converted)


def _logged(args: tuple[Any, ...]) -> bytes | str:
    """The bytes the log would hold, or the error (an int beyond msgpack's 64 bits is the
    caller's error either way, and must read the same)."""
    try:
        return encode_args("r", args)
    except ArgumentError as e:
        return str(e)


def test_the_common_calls_skip_the_conversion() -> None:
    """What the property above could pass by never taking the short way: it is taken."""
    r = ReducerDef("r", _noop, "reducer", [("a", str, inspect.Parameter.empty), ("b", int | None, None), ("c", Any, None)])
    assert _as_is(_Plan(r), ("x",)) == ("x", None, None)
    assert _as_is(_Plan(r), ("x", 3, {"k": [1]})) == ("x", 3, {"k": [1]})
    assert _as_is(_Plan(r), ("x", True)) is None  # a bool is not an int: the conversion refuses it
    assert _as_is(_Plan(r), ()) is None  # too few: the conversion says which is missing


def test_a_string_that_cannot_be_utf8_is_an_argument_error(tmp_path: Path) -> None:
    m = Module("args")

    @m.reducer
    def take(ctx: ReducerContext, text: str, extra: dict[str, str] | None = None) -> None:
        pass

    db = Database.create(tmp_path / "db", m, owner=ALICE)
    try:
        with pytest.raises(ArgumentError, match="surrogates"):
            db.call("take", "a\ud800", sender=ALICE)  # taken as it is, then encoded for the log
        with pytest.raises(ArgumentError, match="surrogates"):
            db.call("take", "a", {"k": "\ud800"}, sender=ALICE)  # converted first
        assert len(db.commit_log()) == 1  # init's only: nothing half-written
    finally:
        db.close()
