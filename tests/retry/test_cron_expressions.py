"""retry/cron.py: expressions and zones checked, instants as cronsim walks them, the bounded
walk of missed instants, and the daylight-saving rules docs/cron.md states."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from stdbmod import Timestamp
from stdbmod.retry import InvalidArgument
from stdbmod.retry.cron import ALIASES, due, expression, instants_after, next_after, time_zone

PARIS = ZoneInfo("Europe/Paris")
NEW_YORK = ZoneInfo("America/New_York")
ZONES = ["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]


def ts(y: int, mo: int, d: int, h: int = 0, mi: int = 0, tz: dt.tzinfo = dt.UTC, fold: int = 0) -> Timestamp:
    return Timestamp.from_datetime(dt.datetime(y, mo, d, h, mi, tzinfo=tz, fold=fold))


def local(t: Timestamp, tz: dt.tzinfo) -> str:
    return t.to_datetime().astimezone(tz).strftime("%m-%d %H:%M%z")


def test_names_expand_to_crontab_five_fields() -> None:
    assert expression("@hourly") == "0 * * * *"
    assert expression("@DAILY") == expression("@midnight") == "0 0 * * *"
    assert expression("@weekly") == "0 0 * * 0"
    assert expression("@monthly") == "0 0 1 * *"
    assert expression("@yearly") == expression("@annually") == "0 0 1 1 *"
    assert set(ALIASES) >= {"@hourly", "@daily", "@weekly", "@monthly", "@yearly"}
    assert expression("  */15   9-17 * * MON-FRI ") == "*/15 9-17 * * MON-FRI"


@pytest.mark.parametrize(
    "text, says",
    [
        ("", "non-empty"),
        ("@reboot", "unknown name"),
        ("* * * *", "4 fields"),
        ("0 * * * * *", "6 fields"),
        ("61 * * * *", "Bad minute"),
        ("0 25 * * *", "Bad hour"),
        ("0 0 30 2 *", "Bad day-of-month"),
        ("0 0 * 13 *", "Bad month"),
        ("x" * 201, "limit is 200"),
    ],
)
def test_bad_expressions_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(InvalidArgument, match=says):
        expression(text)


def test_zones() -> None:
    assert time_zone("UTC") is dt.UTC
    assert time_zone("Europe/Paris") == PARIS
    for bad, says in [("Mars/Olympus", "unknown time zone"), ("../etc/passwd", "not a time zone"), ("", "IANA")]:
        with pytest.raises(InvalidArgument, match=says):
            time_zone(bad)


def test_spring_forward_fixed_time_fires_after_the_gap_and_hourly_skips_it() -> None:
    # Paris, 2025-03-30: 02:00 CET jumps to 03:00 CEST
    daily = [local(t, PARIS) for t in _take(instants_after("30 2 * * *", PARIS, ts(2025, 3, 29, 12, tz=PARIS)), 3)]
    assert daily == ["03-30 03:00+0200", "03-31 02:30+0200", "04-01 02:30+0200"]
    hourly = [local(t, PARIS) for t in _take(instants_after("0 * * * *", PARIS, ts(2025, 3, 30, 0, 30, tz=PARIS)), 3)]
    assert hourly == ["03-30 01:00+0100", "03-30 03:00+0200", "03-30 04:00+0200"]


def test_fall_back_fixed_time_fires_once_and_hourly_twice() -> None:
    # New York, 2025-11-02: 02:00 EDT falls back to 01:00 EST
    daily = [local(t, NEW_YORK) for t in _take(instants_after("30 1 * * *", NEW_YORK, ts(2025, 11, 1, 12, tz=NEW_YORK)), 2)]
    assert daily == ["11-02 01:30-0400", "11-03 01:30-0500"]
    hourly = [local(t, NEW_YORK) for t in _take(instants_after("0 * * * *", NEW_YORK, ts(2025, 11, 2, 0, 30, tz=NEW_YORK)), 3)]
    assert hourly == ["11-02 01:00-0400", "11-02 01:00-0500", "11-02 02:00-0500"]


def test_a_start_in_the_repeated_hour_never_names_an_instant_already_gone() -> None:
    second_pass = ts(2025, 11, 2, 1, 10, tz=NEW_YORK, fold=1)  # 01:10 EST, after 01:30 EDT
    nxt = next_after("30 1 * * *", NEW_YORK, second_pass)
    assert nxt is not None and nxt > second_pass
    assert local(nxt, NEW_YORK) == "11-03 01:30-0500"


def _take(it: object, n: int) -> list[Timestamp]:
    out = []
    for t in it:  # type: ignore[attr-defined]
        out.append(t)
        if len(out) == n:
            break
    return out


fields = st.tuples(
    st.sampled_from(["0", "*/15", "30", "5,35", "*", "59"]),
    st.sampled_from(["*", "2", "1", "0", "3", "*/6", "9-17", "23"]),
    st.sampled_from(["*", "1", "15", "L", "29", "31"]),
    st.sampled_from(["*", "*/3", "2,3,10,11", "3", "11"]),
    st.sampled_from(["*", "MON-FRI", "0", "SAT", "1#1"]),
).map(" ".join)


def test_due_counts_no_instant_in_the_second_after_upto() -> None:
    """`upto` a fraction of a second before a whole minute: the reverse walk, which starts a
    second later to include `upto` itself, must not count that minute (Hypothesis found this:
    `due` returned 8 of 9 instants and said more were left out)."""
    tz = time_zone("America/New_York")
    after = Timestamp(1_761_579_599_767_975)  # 2025-10-27T15:39:59.767975Z
    upto = Timestamp(after.micros + 27 * 86_400_000_000 + 3_600_000_000)  # 2025-11-23T16:39:59.767975Z
    got, more = due("* 9-17 * 11 *", tz, after, upto, 9)
    assert [t.isoformat() for t in got] == [f"2025-11-23T16:{m}:00Z" for m in range(31, 40)]
    assert more


@settings(max_examples=150, deadline=None)
@given(
    expr=fields,
    zone=st.sampled_from([z for z in ZONES if z != "Australia/Lord_Howe"]),  # see the xfail below
    start=st.integers(ts(2024, 1, 1).micros, ts(2027, 1, 1).micros),
    span_days=st.integers(0, 120),
    keep=st.integers(1, 12),
)
def test_due_is_the_newest_instants_of_the_forward_walk(expr: str, zone: str, start: int, span_days: int, keep: int) -> None:
    """`due` (the bounded catch-up walk) agrees with a full forward walk of cronsim's instants,
    across months, zones and their daylight-saving changes; and instants_after is cronsim's
    own forward walk, in real time."""
    try:
        expression(expr)
    except InvalidArgument:  # the fields can combine into a day no month has (31 in November)
        assume(False)
    tz = time_zone(zone)
    after = Timestamp(start)
    upto = Timestamp(start + span_days * 86_400_000_000 + 3_600_000_000)
    everything = []
    for t in instants_after(expr, tz, after):
        if t > upto:
            break
        everything.append(t)
    got, more = due(expr, tz, after, upto, keep)
    assert got == everything[-keep:]
    assert more == (len(everything) > keep)
    reference = CronSim(expr, after.to_datetime().astimezone(tz))
    mine = instants_after(expr, tz, after)
    for _ in range(5):
        theirs = Timestamp.from_datetime(next(reference))
        while theirs <= after:  # see test_a_start_in_the_repeated_hour...
            theirs = Timestamp.from_datetime(next(reference))
        assert next(mine) == theirs


def test_due_reads_a_bounded_number_of_instants_however_long_the_outage() -> None:
    got, more = due("* * * * *", dt.UTC, ts(2020, 1, 1), ts(2026, 1, 1), 3)
    assert [local(t, dt.UTC) for t in got] == ["12-31 23:58+0000", "12-31 23:59+0000", "01-01 00:00+0000"]
    assert more


@pytest.mark.xfail(strict=True, reason=(
    "known, not fixed: around a half-hour autumn fold (Lord Howe, 7 April 2024) the forward walk and the "
    "bounded catch-up walk name different instants for '*/15 2 * * *'; docs/cron.md says so"
))
def test_a_half_hour_fold_walks_agree() -> None:
    tz = time_zone("Australia/Lord_Howe")
    after, upto = Timestamp(1704067200000000), Timestamp(1704067200000000 + 97 * 86_400_000_000 + 3_600_000_000)
    everything = []
    for t in instants_after("*/15 2 * * *", tz, after):
        if t > upto:
            break
        everything.append(t)
    assert due("*/15 2 * * *", tz, after, upto, 3)[0] == everything[-3:]

