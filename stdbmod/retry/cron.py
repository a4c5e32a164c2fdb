"""Cron expressions and time zones for recurring jobs: checking them, and the instants they name.

Expressions are parsed and walked by cronsim (Healthchecks.io's evaluator; Debian cron's
semantics), never by hand. We accept five fields (minute hour day-of-month month day-of-week,
with cronsim's `*`, lists, ranges, steps, names, `L`, `LW` and `#`) and the usual names, which
crontab(5) defines as five-field expressions:

    @yearly @annually   0 0 1 1 *        @daily @midnight   0 0 * * *
    @monthly            0 0 1 * *        @hourly            0 * * * *
    @weekly             0 0 * * 0

`@reboot` is refused: a database has no boot to run at. Six-field expressions (seconds) are
refused too: recurring jobs are for schedules, not sub-minute loops.

Time zones are IANA names read with zoneinfo (the system's zone data, or the `tzdata` package:
`pip install 'stdbmod[cron]'` where the system has none). `UTC` works everywhere.

Daylight-saving changes, as Debian cron (and so cronsim) handles them:
- an expression with a fixed minute and hour (`30 2 * * *`) is matched against the wall clock:
  a time that does not exist (the hour skipped in spring) fires at the first minute after the
  gap (02:30 -> 03:00), and a time that happens twice (the hour repeated in autumn) fires once,
  at its first occurrence;
- an expression with `*` in the minute or hour field (`*/15 * * * *`, `0 * * * *`) runs on real
  time: every quarter hour goes on through the change, the skipped hour has no `0 * * * *`
  instant, and the repeated hour has two.
"""

from __future__ import annotations

import datetime as dt
from collections import deque
from collections.abc import Iterator
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ..types import Timestamp
from .errors import InvalidArgument

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MAX_CRON_CHARS = 200
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_ONE_SECOND = dt.timedelta(seconds=1)
# A walk of instants never takes more steps than this (an every-minute job down for a year has
# half a million missed instants; we never list them one by one).
MAX_WALK = 10_000


def expression(text: str) -> str:
    """The five-field expression `text` stands for (aliases expanded, spaces normalized), or
    InvalidArgument saying what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument("cron must be a non-empty string such as '0 3 * * *' or '@daily'")
    if len(text) > MAX_CRON_CHARS:
        raise InvalidArgument(f"cron is {len(text)} characters long; the limit is {MAX_CRON_CHARS}")
    words = text.split()
    if len(words) == 1 and words[0].startswith("@"):
        alias = ALIASES.get(words[0].lower())
        if alias is None:
            raise InvalidArgument(f"cron: unknown name {words[0]!r}; the names are {', '.join(ALIASES)}")
        return alias
    if len(words) != 5:
        raise InvalidArgument(f"cron: {text!r} has {len(words)} fields; give five (minute hour day-of-month month day-of-week) or a name such as @hourly")
    expr = " ".join(words)
    try:
        CronSim(expr, _EPOCH)
    except CronSimError as e:
        raise InvalidArgument(f"cron: {text!r}: {e}") from None
    return expr


def time_zone(name: str) -> dt.tzinfo:
    """The zone named `name` (IANA, e.g. Europe/Paris), or InvalidArgument."""
    if not isinstance(name, str) or not name:
        raise InvalidArgument("timezone must be an IANA time zone name such as 'UTC' or 'Europe/Paris'")
    return _zone(name)


@lru_cache(maxsize=256)
def _zone(name: str) -> dt.tzinfo:
    if name == "UTC":
        return dt.UTC
    try:
        return ZoneInfo(name)
    except ZoneInfoNotFoundError:
        raise InvalidArgument(
            f"timezone: unknown time zone {name!r} (IANA names such as 'Europe/Paris'; without system zone data, install tzdata: pip install 'stdbmod[cron]')"
        ) from None
    except (ValueError, OSError) as e:  # a malformed key such as '../x'
        raise InvalidArgument(f"timezone: {name!r} is not a time zone name: {e}") from None


def _local(t: Timestamp, tz: dt.tzinfo) -> dt.datetime:
    return (_EPOCH + dt.timedelta(microseconds=t.micros)).astimezone(tz)


def _stamp(d: dt.datetime) -> Timestamp:
    return Timestamp.from_datetime(d)


def instants_after(expr: str, tz: dt.tzinfo, after: Timestamp) -> Iterator[Timestamp]:
    """The instants of `expr` in zone `tz` strictly after `after`, in order (cronsim's walk).
    Ends if cronsim finds none within 50 years."""
    walk = CronSim(expr, _local(after, tz))
    last = after
    while True:
        try:
            t = _stamp(next(walk))
        except StopIteration:
            return
        # The wall-clock walk can name the first pass of a repeated hour after `after` lies in
        # its second pass (an instant already gone): only real time moving forward counts.
        if t > last:
            last = t
            yield t


def next_after(expr: str, tz: dt.tzinfo, after: Timestamp) -> Timestamp | None:
    """The first instant strictly after `after`, or None if there is none within 50 years."""
    return next(instants_after(expr, tz, after), None)


def _newest_before(expr: str, tz: dt.tzinfo, upto: Timestamp, count: int) -> Timestamp | None:
    """The `count`-th newest instant at or before `upto`, found walking backwards (cronsim's
    reverse walk: it only bounds the forward walk, which alone decides the instants)."""
    # The walk starts a second after `upto` so that an instant at `upto` itself counts; an
    # instant inside that second (`upto` at 11:39:59.5, the walk from 11:40:00.5) is after it.
    walk = CronSim(expr, _local(upto, tz) + _ONE_SECOND, reverse=True)
    found: Timestamp | None = None
    n = 0
    while n < count:
        try:
            t = _stamp(next(walk))
        except StopIteration:
            return found
        if t <= upto:
            found = t
            n += 1
    return found


def due(expr: str, tz: dt.tzinfo, after: Timestamp, upto: Timestamp, keep: int) -> tuple[list[Timestamp], bool]:
    """The newest `keep` instants in (after, upto], oldest first, and whether older ones were
    left out. Reads about `keep` instants however long the interval (a reverse walk finds where
    the newest `keep` begin; the forward walk from there decides them)."""
    if keep < 1:
        raise ValueError("keep must be at least 1")
    anchor = _newest_before(expr, tz, upto, keep + 1)
    more = anchor is not None and anchor > after
    found: deque[Timestamp] = deque(maxlen=keep)
    for steps, t in enumerate(instants_after(expr, tz, anchor if more and anchor is not None else after)):
        if t > upto:
            break
        if steps >= MAX_WALK:  # only if the two walks disagreed: stay bounded all the same
            more = True
            break
        found.append(t)
    return list(found), more
