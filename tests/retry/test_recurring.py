"""Recurring jobs (retry/recurring.py, docs/cron.md): each instant enqueues exactly once as its
timer row fires, agreeing with cronsim across months and daylight-saving changes under the
manual clock; across a restart; each catch-up policy; the admin reducers."""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from cronsim import CronSim
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from stdbmod import Database, ManualClock, Timestamp
from stdbmod.retry import InvalidArgument, NewTask, NotAuthorized, RetryModule, TaskStatus, create_retry_module, queries
from stdbmod.retry.cron import expression, time_zone
from stdbmod.retry.recurring import ON_TIME_SECONDS, RecurringNotFound, RecurringSpec, get_recurring, list_recurring
from tests.retry.support import ADMIN, WORKER
from tests.retry.test_cron_expressions import ZONES, fields

H = 3600


def ts(y: int, mo: int, d: int, h: int = 0, mi: int = 0, s: int = 0) -> Timestamp:
    return Timestamp.from_datetime(dt.datetime(y, mo, d, h, mi, s, tzinfo=dt.UTC))


def tasks_of(db: Database) -> list[Any]:
    return sorted(queries.list_tasks(db, ADMIN, per_page=200).items, key=lambda t: t.id)


def to_next_due(db: Database, clock: ManualClock) -> None:
    due = db.next_due()
    assert due is not None
    clock.set(max(due, clock.now()))
    db.run_due()


def spec(cron: str = "@hourly", **options: Any) -> RecurringSpec:
    return RecurringSpec(options.pop("name", "nightly"), cron, NewTask("report", queue="cron"), **options)


# --- against cronsim, across months and daylight-saving changes --------------------------------------

STARTS = [ts(2025, 1, 15), ts(2025, 3, 29, 22), ts(2025, 10, 25, 23), ts(2025, 11, 1, 20), ts(2026, 6, 30, 23, 59)]


@settings(max_examples=40, deadline=None)
@given(expr=fields | st.sampled_from(["@hourly", "@daily", "@weekly", "@monthly", "30 2 * * *", "0 * * * *", "*/20 1-3 * * *"]),
       zone=st.sampled_from(ZONES), start=st.sampled_from(STARTS), offset_min=st.integers(0, 60 * 24 * 40))  # fmt: skip
def test_firings_enqueue_cronsims_instants_one_task_each(expr: str, zone: str, start: Timestamp, offset_min: int) -> None:
    try:
        expression(expr)
    except InvalidArgument:  # the fields can combine into a day no month has
        assume(False)
    where = Path(tempfile.mkdtemp(prefix="recurring-"))
    clock = ManualClock(Timestamp(start.micros + offset_min * 60_000_000))
    rm = create_retry_module()
    db = Database.create(where / "db", rm.module, owner=ADMIN, clock=clock, durable=False)
    try:
        created = clock.now()
        entry = db.call("add_recurring", spec(expr, timezone=zone), sender=ADMIN)
        tz = time_zone(zone)
        reference = CronSim(expression(expr), created.to_datetime().astimezone(tz))
        expected: list[Timestamp] = []
        while len(expected) < 6:
            t = Timestamp.from_datetime(next(reference))
            if t > (expected[-1] if expected else created):  # real time only moves forward (cron.py)
                expected.append(t)
        assert entry.next_fire == expected[0]
        for _ in expected:
            to_next_due(db, clock)
        made = tasks_of(db)
        assert [t.created_at for t in made] == expected  # each fired at its instant, on the manual clock
        assert [t.idempotency_key for t in made] == [f"recurring:{entry.id}:{t.isoformat()}" for t in expected]
        assert {t.recurring_id for t in made} == {entry.id}
        assert get_recurring(db, ADMIN, entry.id).last_fired == expected[-1]
    finally:
        db.close()
        shutil.rmtree(where, ignore_errors=True)


def test_a_daylight_saving_change_in_paris() -> None:
    """30 2 * * * on 2025-03-30 (02:00 CET jumps to 03:00 CEST) fires at 03:00; @hourly skips the
    missing hour; on 2025-10-26 the repeated hour fires once for the daily, twice for the hourly."""
    where = Path(tempfile.mkdtemp(prefix="recurring-dst-"))
    clock = ManualClock(ts(2025, 3, 29, 12))
    db = Database.create(where / "db", create_retry_module().module, owner=ADMIN, clock=clock, durable=False)
    try:
        db.call("add_recurring", spec("30 2 * * *", name="daily", timezone="Europe/Paris"), sender=ADMIN)
        db.call("add_recurring", spec("@hourly", name="hourly", timezone="Europe/Paris"), sender=ADMIN)
        while clock.now() < ts(2025, 3, 30, 3):
            to_next_due(db, clock)
        paris = time_zone("Europe/Paris")
        fired = [(t.recurring_id, t.created_at.to_datetime().astimezone(paris).strftime("%d %H:%M%z")) for t in tasks_of(db)]
        assert (1, "30 03:00+0200") in fired and (1, "30 02:30+0100") not in fired
        hourly = [when for rid, when in fired if rid == 2 and when.startswith("30 0")]
        assert hourly == ["30 00:00+0100", "30 01:00+0100", "30 03:00+0200", "30 04:00+0200", "30 05:00+0200"]  # no 02:00
        db.call("change_recurring", 1, None, None, None, None, None, None, sender=ADMIN)  # nothing changes
        clock.set(ts(2025, 10, 25, 20))
        db.call("disable_recurring", 2, sender=ADMIN)
        db.call("enable_recurring", 2, sender=ADMIN)  # counts from now: no catch-up of the months between
        db.call("disable_recurring", 1, sender=ADMIN)
        db.call("enable_recurring", 1, sender=ADMIN)
        before = len(tasks_of(db))
        while clock.now() < ts(2025, 10, 26, 3):
            to_next_due(db, clock)
        fall = [(t.recurring_id, t.created_at.to_datetime().astimezone(paris).strftime("%d %H:%M%z")) for t in tasks_of(db)[before:]]
        hourly = [w for r, w in fall if r == 2 and w.startswith("26 0")]
        assert hourly == ["26 00:00+0200", "26 01:00+0200", "26 02:00+0200", "26 02:00+0100", "26 03:00+0100", "26 04:00+0100"]
        assert [w for r, w in fall if r == 1] == ["26 02:30+0200"]  # the repeated 02:30 fires once
    finally:
        db.close()
        shutil.rmtree(where, ignore_errors=True)


# --- restarts and the catch-up policies --------------------------------------------------------------


@pytest.fixture
def down_for_hours(tmp_path: Path) -> Any:
    """A db with one @hourly entry (catch-up as asked), closed at 00:30 and reopened `hours` later
    (at a time `past` seconds after an hour), its due rows run: the tasks made, by instant."""

    def run(catch_up: str, limit: int, hours: int, past: int) -> tuple[list[str], Database, ManualClock]:
        clock = ManualClock(ts(2026, 1, 1, 0, 0, 0))
        rm = create_retry_module()
        db = Database.create(tmp_path / "db", rm.module, owner=ADMIN, clock=clock, durable=False)
        db.call("add_recurring", spec(catch_up=catch_up, catch_up_limit=limit), sender=ADMIN)
        clock.advance(H // 2)
        db.run_due()
        db.close()
        clock.set(Timestamp(ts(2026, 1, 1, hours).micros + past * 1_000_000))
        db = Database.open(tmp_path / "db", rm.module, clock=clock, durable=False)
        db.run_due()
        keys = [t.idempotency_key.rsplit(":", 3)[-3][-2:] for t in tasks_of(db)]  # the instants' hours
        return keys, db, clock

    return run


@pytest.mark.parametrize(
    "catch_up, limit, past, expected",
    [
        ("skip", 10, 0, ["05"]),  # reopened on the hour: that instant is on time; 01-04 were missed
        ("skip", 10, ON_TIME_SECONDS - 1, ["05"]),  # under a minute late is on time
        ("skip", 10, ON_TIME_SECONDS, []),  # a minute late: 05 counts as missed too
        ("one", 10, 120, ["05"]),  # one task for the missed, for the newest of them
        ("one", 10, 0, ["04", "05"]),  # the newest missed, and the one on time
        ("each", 10, 120, ["01", "02", "03", "04", "05"]),
        ("each", 2, 120, ["04", "05"]),  # the newest `limit` of them
    ],
)
def test_catch_up_policies_after_a_restart(down_for_hours: Any, catch_up: str, limit: int, past: int, expected: list[str]) -> None:
    keys, db, clock = down_for_hours(catch_up, limit, 5, past)
    try:
        assert keys == expected
        entry = list_recurring(db, ADMIN)[0]
        assert entry.last_fired == clock.now() and entry.next_fire == ts(2026, 1, 1, 6)
    finally:
        db.close()


def test_each_instant_enqueues_exactly_once_across_restarts(tmp_path: Path, down_for_hours: Any) -> None:
    keys, db, clock = down_for_hours("each", 10, 3, 0)
    assert keys == ["01", "02", "03"]
    db.close()
    for _ in range(2):  # reopened at the same instant, twice: the watermark says it is done
        db = Database.open(tmp_path / "db", db.module, clock=clock, durable=False)
        db.run_due()
        assert len(tasks_of(db)) == 3
        db.close()
    db = Database.open(tmp_path / "db", db.module, clock=clock, durable=False)
    try:
        for _ in range(3):
            to_next_due(db, clock)
        made = tasks_of(db)
        assert len(made) == 6 and len({t.idempotency_key for t in made}) == 6
        assert [t.created_at for t in made[3:]] == [ts(2026, 1, 1, h) for h in (4, 5, 6)]
    finally:
        db.close()


# --- the admin reducers ----------------------------------------------------------------------------


def test_admin_reducers(tmp_path: Path, rm: RetryModule, clock: ManualClock) -> None:
    db = Database.create(tmp_path / "db", rm.module, owner=ADMIN, clock=clock, durable=False)
    db.call("grant_worker", WORKER, sender=ADMIN)
    try:
        with pytest.raises(NotAuthorized):
            db.call("add_recurring", spec(), sender=WORKER)
        before = db.state_hash()
        for bad, says in [(spec("61 * * * *"), "Bad minute"), (spec(timezone="Mars/Base"), "unknown time zone"),
                          (spec(catch_up_limit=0), "catch_up_limit"),
                          (RecurringSpec("x", "@daily", NewTask("")), "job: job_type"),
                          (RecurringSpec("x", "@daily", NewTask("a", idempotency_key="k")), "set by each firing")]:  # fmt: skip
            with pytest.raises(InvalidArgument, match=says):
                db.call("add_recurring", bad, sender=ADMIN)
        assert db.state_hash() == before
        e = db.call("add_recurring", spec("@daily"), sender=ADMIN)
        with pytest.raises(InvalidArgument, match="exists already"):
            db.call("add_recurring", spec("@daily"), sender=ADMIN)
        assert e.cron == "0 0 * * *" and e.enabled and e.next_fire is not None
        changed = db.call("change_recurring", e.id, None, "*/5 * * * *", "Asia/Kolkata", NewTask("other", priority=3), "each", 3, sender=ADMIN)
        assert (changed.cron, changed.timezone, changed.job.job_type, changed.catch_up.value, changed.catch_up_limit) == (
            "*/5 * * * *", "Asia/Kolkata", "other", "each", 3)  # fmt: skip
        off = db.call("disable_recurring", e.id, sender=ADMIN)
        assert not off.enabled and off.next_fire is None and db.next_due() is None
        now = db.call("run_recurring_now", e.id, sender=ADMIN)  # disabled entries can be run by hand
        assert (now.job_type, now.priority, now.recurring_id, now.idempotency_key, now.status) == ("other", 3, e.id, None, TaskStatus.QUEUED)
        on = db.call("enable_recurring", e.id, sender=ADMIN)
        assert on.enabled and on.next_fire is not None and db.next_due() == on.next_fire
        db.call("delete_recurring", e.id, sender=ADMIN)
        assert list_recurring(db, ADMIN) == [] and db.next_due() is None
        with pytest.raises(RecurringNotFound):
            db.call("enable_recurring", e.id, sender=ADMIN)
        with pytest.raises(NotAuthorized):
            list_recurring(db, WORKER)
        assert queries.get_task(db, ADMIN, now.id).recurring_id == e.id  # its tasks stay
    finally:
        db.close()
