"""Defaults, bounds and argument checks shared by the reducers and the reads.

Names that end up in index keys (job type, queue, idempotency key) are bounded well under LMDB's
511-byte key limit, so a long one gets a clear InvalidArgument instead of a storage error.
"""

from __future__ import annotations

import msgspec

from .. import codec
from ..types import TimeDuration
from .errors import InvalidArgument

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_BACKOFF_SECONDS = 30

MAX_NAME_CHARS = 200  # job_type, queue, idempotency key, worker_id
MAX_ATTEMPTS_LIMIT = 1000
MAX_BACKOFF_SECONDS = 30 * 86_400
MAX_RETRY_DELAY_SECONDS = 30 * 86_400  # the doubling stops growing here (see backoff_delay)
PRIORITY_LIMIT = 2**31 - 1
MAX_LEASE_SECONDS = 30 * 86_400
MAX_HISTORY_CAP = 10_000_000
MAX_PER_PAGE = 500
MAX_ERROR_CHARS = 16_000  # longer errors (tracebacks) are stored cut, with a marker


def backoff_delay(backoff_seconds: int, failures: int) -> TimeDuration:
    """The wait after the `failures`-th failed attempt: backoff_seconds * 2**(failures - 1),
    capped at MAX_RETRY_DELAY_SECONDS so that a large max_attempts cannot overflow time."""
    exponent = max(failures - 1, 0)
    if exponent > 40:  # 2**40 s exceeds any cap; avoid building a huge integer
        seconds = MAX_RETRY_DELAY_SECONDS if backoff_seconds else 0
    else:
        seconds = min(backoff_seconds * 2**exponent, MAX_RETRY_DELAY_SECONDS)
    return TimeDuration(seconds * 1_000_000)


def check_name(what: str, value: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{what} must be a non-empty string")
    if len(value) > MAX_NAME_CHARS:
        raise InvalidArgument(f"{what} is {len(value)} characters long; the limit is {MAX_NAME_CHARS}")
    if "\x00" in value:
        raise InvalidArgument(f"{what} may not contain NUL characters")
    return value


def check_int(what: str, value: int, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidArgument(f"{what} must be an integer from {lo} to {hi}, got {value!r}")
    return value


def check_page(page: int, per_page: int) -> None:
    check_int("page", page, 1, 2**31)
    check_int("per_page", per_page, 1, MAX_PER_PAGE)


def clip_error(text: str) -> str:
    if len(text) <= MAX_ERROR_CHARS:
        return text
    half = MAX_ERROR_CHARS // 2
    return text[:half] + f"\n... [{len(text) - 2 * half} characters cut] ...\n" + text[-half:]


def unstorable(value: object) -> str | None:
    """Why `value` cannot be stored in a row (payload, result), or None if it can."""
    try:
        codec.msgpack_encoder.encode(value)
    except (TypeError, ValueError, NotImplementedError, OverflowError, msgspec.EncodeError) as e:
        return str(e) or type(e).__name__
    return None
