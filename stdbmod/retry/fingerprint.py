"""Error fingerprints: what groups dead tasks in the dead-letter triage.

A fingerprint names an error's *shape*: its text with the values that vary from one failure to
the next replaced by placeholders, then hashed. So "timeout after 3012 ms for user 42" and
"timeout after 2999 ms for user 7" share one, "connection refused" has another. It does not
include the job type: one broken dependency shows as one group across the job types it breaks
(a group lists its job types; the triage filters by job type too).

The rules, in this order (each sees what the ones before left):

    a Python traceback   only its last line counts ("KeyError: 'user_id'"): the frames name
                         paths and line numbers that a deploy changes
    quoted values        'abc', "abc", `abc`          -> '?'  "?"  `?`
    UUIDs                3f2b8c1e-...-...             -> <uuid>
    hex                  0xdeadbeef, and runs of 8 or more hex digits with both a digit and a
                         letter among them (hashes, object ids: order_8f3a9c2e1b -> order_<hex>)
    numbers              42, -7, 3.14, 1e-3, 3012ms, user42, 2024-05-01 -> <n>, <n>ms, user<n>,
                         <n>-<n>-<n>
    whitespace           every run -> one space, none at the ends

The shape is cut at 500 characters before hashing, so very long errors group by how they begin.
"""

from __future__ import annotations

import hashlib
import re

MAX_SHAPE_CHARS = 500

_TRACEBACK = "Traceback (most recent call last):"
_QUOTED = re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"|`[^`\n]*`")
_ALNUM_BEFORE, _ALNUM_AFTER = r"(?<![0-9A-Za-z])", r"(?![0-9A-Za-z])"
_UUID = re.compile(_ALNUM_BEFORE + r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}" + _ALNUM_AFTER)
_HEX = re.compile(_ALNUM_BEFORE + r"(?:0[xX][0-9a-fA-F]+|(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,})" + _ALNUM_AFTER)
_NUMBER = re.compile(r"(?:(?<!\w)[-+])?\d+(?:\.\d+)*(?:[eE][-+]?\d+)?")
_SPACE = re.compile(r"\s+")


def _quote_placeholder(m: re.Match[str]) -> str:
    q = m.group(0)[0]
    return f"{q}?{q}"


def error_shape(error: str | None) -> str:
    """The normalized error text that the fingerprint hashes (a group's `shape`)."""
    if not error:
        return ""
    text = error.strip()
    if text.startswith(_TRACEBACK):
        text = [line for line in text.splitlines() if line.strip()][-1]
    text = _QUOTED.sub(_quote_placeholder, text)
    text = _UUID.sub("<uuid>", text)
    text = _HEX.sub("<hex>", text)
    text = _NUMBER.sub("<n>", text)
    return _SPACE.sub(" ", text).strip()[:MAX_SHAPE_CHARS]


def fingerprint(error: str | None) -> str:
    """16 hex digits naming the error's shape: the key of its dead-letter group."""
    return hashlib.blake2b(error_shape(error).encode(), digest_size=8).hexdigest()
