"""Defaults, bounds and argument checks: the one source of the retry module's limits, for its
reducers and reads, the HTTP routes (their bodies and query strings, and what /openapi.json
says) and the CLI's options.

The checks take `object`: they are what turns a value of the wrong type into an InvalidArgument,
also in the optional compiled build, where a parameter typed `int` would refuse a `str` with a
TypeError of its own.

Names that end up in index keys (job type, queue, idempotency key) are bounded well under LMDB's
511-byte key limit, so a long one gets a clear InvalidArgument instead of a storage error.
"""

from __future__ import annotations

import random
from collections.abc import Sized

import msgspec

from .. import codec
from ..types import TimeDuration
from .errors import InvalidArgument

DEFAULT_QUEUE = "default"  # the defaults must pass the checks below: transitions.checked skips them
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_BACKOFF_SECONDS = 30

MAX_NAME_CHARS = 200  # job_type, queue, idempotency key, partition key, worker_id
MAX_ATTEMPTS_LIMIT = 1000
MAX_BACKOFF_SECONDS = 30 * 86_400
MAX_RETRY_DELAY_SECONDS = 30 * 86_400  # the doubling stops growing here (see backoff_delay)
PRIORITY_LIMIT = 2**31 - 1
MAX_LEASE_SECONDS = 30 * 86_400
MAX_TIMEOUT_SECONDS = 30 * 86_400  # a task's timeout_seconds
MAX_UNIQUE_PERIOD_SECONDS = 366 * 86_400  # a unique spec's window
MAX_RETENTION_SECONDS = 10 * 366 * 86_400  # how long finished tasks may be kept
MAX_RETENTION_COUNT = 1_000_000_000
MAX_HISTORY_CAP = 10_000_000
MAX_CONCURRENCY = 1_000_000  # a queue's running tasks at once
MAX_RATE_LIMIT = 100_000  # claims per rate window: bounds the claim_mark rows a queue keeps
MAX_RATE_PERIOD_SECONDS = 86_400
MAX_BATCH = 1000  # items per batch call (enqueue_many, claim_many, complete_many): bounds one transaction
MAX_PAGE = 1_000_000
MAX_PER_PAGE = 200  # tasks per page of a list (HTTP, CLI and Python alike)
MAX_HISTORY_READ = 1000  # attempt rows one HTTP request or CLI command reads (Python: up to the cap)
MAX_ERROR_CHARS = 16_000  # longer errors (tracebacks) are stored cut, with a marker
MAX_REPORT_CHARS = 10_000  # the longest error or cancel reason an HTTP request may carry
# failure policy (docs/retry.md, "Failure policy")
MAX_SNOOZES = 100  # snoozes a task may take before a snooze spends its attempt like a failure
MAX_SNOOZE_SECONDS = MAX_RETRY_DELAY_SECONDS  # also the longest retry_in_seconds


def backoff_delay(
    backoff_seconds: int, failures: int, max_backoff_seconds: int | None = None, jitter: float = 0.0, rng: random.Random | None = None
) -> TimeDuration:
    """The wait after the `failures`-th failed attempt: backoff_seconds * 2**(failures - 1),
    capped at MAX_RETRY_DELAY_SECONDS so that a large max_attempts cannot overflow time.

    The task's backoff options (docs/retry.md, "Backoff options"): `max_backoff_seconds` caps
    the delay; `jitter` (0 to 1) then draws it uniformly from [delay * (1 - jitter), delay] with
    `rng` (a reducer's ctx.rng, so a replay draws the same). Jitter only ever shortens the wait:
    the cap, and seed 000's table, stay upper bounds. With neither option the formula is seed
    000's exactly (and nothing is drawn)."""
    exponent = max(failures - 1, 0)
    if exponent > 40:  # 2**40 s exceeds any cap; avoid building a huge integer
        seconds = MAX_RETRY_DELAY_SECONDS if backoff_seconds else 0
    else:
        seconds = min(backoff_seconds * 2**exponent, MAX_RETRY_DELAY_SECONDS)
    if max_backoff_seconds is not None:
        seconds = min(seconds, max_backoff_seconds)
    micros = seconds * 1_000_000
    if jitter > 0 and micros > 0:
        if rng is None:
            raise ValueError("jitter needs the reducer's rng")
        micros -= int(micros * jitter * rng.random())
    return TimeDuration(micros)


def check_fraction(what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise InvalidArgument(f"{what} must be a number from 0 to 1, got {value!r}")
    return float(value)


def check_name(what: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{what} must be a non-empty string")
    if len(value) > MAX_NAME_CHARS:
        raise InvalidArgument(f"{what} is {len(value)} characters long; the limit is {MAX_NAME_CHARS}")
    if "\x00" in value:
        raise InvalidArgument(f"{what} may not contain NUL characters")
    return value


def check_int(what: str, value: object, lo: int, hi: int) -> int:
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
