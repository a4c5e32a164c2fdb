"""retry/fingerprint.py: realistic errors group as docs/operations.md says (the values that vary
between failures are normalized away; what differs in kind stays apart)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stdbmod.retry.fingerprint import MAX_SHAPE_CHARS, error_shape, fingerprint

TRACEBACK = """Traceback (most recent call last):
  File "/srv/app/jobs/{file}.py", line {line}, in send
    user = users[payload["user_id"]]
KeyError: 'user_{uid}'
"""

SAME = [
    ["timeout after 3012 ms for user 42", "timeout after 2999 ms for user 7", "timeout  after 12 ms\tfor user 100000"],
    ["HTTP 503 from https://api.example.com/v2/users/42", "HTTP 502 from https://api.example.com/v2/users/9001"],
    ["order_8f3a9c2e1b not found", "order_00aa11bb22cc33 not found"],
    ["row 3f2b8c1e-1234-4abc-9def-0123456789ab is locked", "row 00000000-0000-0000-0000-000000000000 is locked"],
    ["<Conn object at 0x7f3a2b1c9d10> closed", "<Conn object at 0x55d0e1f2a3b4> closed"],
    ["invalid email 'bob@example'", "invalid email 'x'", "invalid email 'it\\'s'"],
    ['column "price" must be positive, got -7.5', 'column "qty" must be positive, got -1'],
    ["deadline 2024-05-01T12:00:00Z passed", "deadline 2025-12-31T23:59:59Z passed"],
    [TRACEBACK.format(file="email", line=10, uid=1), TRACEBACK.format(file="mailer", line=311, uid=977)],
    ["lease expired at 2026-01-01T00:05:00Z: worker w-1 neither completed nor failed the task",
     "lease expired at 2026-03-04T10:00:30.123456Z: worker w-17 neither completed nor failed the task"],
]
DIFFERENT = [
    "timeout after 3012 ms for user 42",
    "connection refused",
    "HTTP 503 from https://api.example.com/v2/users/42",
    "HTTP 503 from https://billing.example.com/v2/users/42",
    "invalid email 'bob@example'",
    "KeyError: 'user_1'",
    "ValueError: 'user_1'",
    "",
]


@pytest.mark.parametrize("group", SAME, ids=lambda g: g[0][:30])
def test_varying_values_group_together(group: list[str]) -> None:
    assert len({fingerprint(e) for e in group}) == 1, [error_shape(e) for e in group]


def test_different_errors_stay_apart() -> None:
    assert len({fingerprint(e) for e in DIFFERENT}) == len(DIFFERENT)


def test_shapes_read_as_documented() -> None:
    assert error_shape("timeout after 3012 ms for user 42") == "timeout after <n> ms for user <n>"
    assert error_shape("order_8f3a9c2e1b not found") == "order_<hex> not found"
    assert error_shape(TRACEBACK.format(file="a", line=1, uid=5)) == "KeyError: '?'"
    assert error_shape("retry 3012ms, user42") == "retry <n>ms, user<n>"
    assert error_shape(None) == error_shape("") == ""
    assert fingerprint(None) == fingerprint("")
    assert len(fingerprint("x")) == 16 and int(fingerprint("x"), 16) >= 0


def test_long_errors_group_by_their_beginning() -> None:
    a = "boom " + "a" * 2000
    b = "boom " + "a" * 1000 + "b" * 1000
    assert len(error_shape(a)) == MAX_SHAPE_CHARS
    assert fingerprint(a) == fingerprint(b)


@given(st.text(max_size=300), st.integers(0, 10**12), st.integers(0, 10**12))
def test_numbers_never_split_a_group(text: str, x: int, y: int) -> None:
    """The same message around two different numbers always shares a fingerprint."""
    assert fingerprint(f"{text} {x} end") == fingerprint(f"{text} {y} end")
