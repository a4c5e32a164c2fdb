"""Defaults, bounds and argument checks: the one source of the retry module's limits, for its
reducers and reads, the HTTP routes (their bodies and query strings, and what /openapi.json
says) and the CLI's options.

Names that end up in index keys (job type, queue, idempotency key) are bounded well under LMDB's
511-byte key limit, so a long one gets a clear InvalidArgument instead of a storage error.
"""

from __future__ import annotations

from collections.abc import Sized

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
MAX_BATCH = 1000  # items per batch call (enqueue_many, claim_many, complete_many): bounds one transaction
MAX_PAGE = 1_000_000
MAX_PER_PAGE = 200  # tasks per page of a list (HTTP, CLI and Python alike)
MAX_HISTORY_READ = 1000  # attempt rows one HTTP request or CLI command reads (Python: up to the cap)
MAX_ERROR_CHARS = 16_000  # longer errors (tracebacks) are stored cut, with a marker
MAX_REPORT_CHARS = 10_000  # the longest error or cancel reason an HTTP request may carry


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
    check_int("page", page, 1, MAX_PAGE)
    check_int("per_page", per_page, 1, MAX_PER_PAGE)


def check_batch(what: str, items: Sized) -> None:
    if not items:
        raise InvalidArgument(f"{what}: give at least one item")
    if len(items) > MAX_BATCH:
        raise InvalidArgument(f"{what}: {len(items)} items; the limit is {MAX_BATCH} per call")


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
