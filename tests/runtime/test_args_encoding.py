"""Arguments that decode from JSON but cannot be stored are an ArgumentError, not a crash."""

from __future__ import annotations

from typing import Any

import pytest

from stdbmod import ArgumentError, Database, Module, ReducerContext

from ..conftest import ALICE


def test_integer_beyond_64_bits_is_an_argument_error(bank_db: Database) -> None:
    with pytest.raises(ArgumentError, match="open_account"):
        bank_db.call_json("open_account", b"[123456789012345678901234567890]", sender=ALICE)
    with pytest.raises(ArgumentError):
        bank_db.call("open_account", 2**70, sender=ALICE)
    assert bank_db.call("open_account", 5, sender=ALICE) == 1  # nothing was half-done


def test_an_object_msgpack_cannot_store_is_an_argument_error(make_db: object) -> None:
    m = Module("anyargs")

    @m.reducer
    def take(ctx: ReducerContext, value: Any) -> None: ...

    db = make_db(m)  # type: ignore[operator]
    with pytest.raises(ArgumentError, match="take"):
        db.call("take", object(), sender=ALICE)
    db.call("take", {"fine": [1, 2]}, sender=ALICE)
