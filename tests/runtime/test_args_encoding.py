"""Arguments that decode from JSON but cannot be stored are an ArgumentError, not a crash."""

from __future__ import annotations

import pytest

from stdbmod import ArgumentError, Database

from ..conftest import ALICE


def test_integer_beyond_64_bits_is_an_argument_error(bank_db: Database) -> None:
    with pytest.raises(ArgumentError, match="open_account"):
        bank_db.call_json("open_account", b"[123456789012345678901234567890]", sender=ALICE)
    with pytest.raises(ArgumentError):
        bank_db.call("open_account", 2**70, sender=ALICE)
    assert bank_db.call("open_account", 5, sender=ALICE) == 1  # nothing was half-done
