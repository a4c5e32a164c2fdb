"""`stdbmod tasks recurring ...`: recurring jobs (cron) for admins: list, add, change, enable,
disable, delete, run-now. Writes are the retry module's recurring reducers (docs/cron.md)."""

from __future__ import annotations

import json
from typing import Any

import click

from ..retry import NewTask
from ..retry.recurring import MAX_CATCH_UP_LIMIT, CatchUp, RecurringSpec, list_recurring
from .options import CommandError
from .render import Column, console, print_json, print_record, print_table
from .tasks import _db, common, tasks

COLUMNS = [
    Column("id"), Column("name"), Column("cron"), Column("timezone", 2), Column("enabled", 1), Column("job_type"),
    Column("catch_up", 3), Column("next_fire", 1),
]
CATCH_UP = click.Choice([c.value for c in CatchUp])


def _job(job_type: str | None, payload: str | None, queue: str | None, priority: int | None) -> NewTask | None:
    if job_type is None:
        if payload is not None or queue is not None or priority is not None:
            raise CommandError("--payload, --queue and --priority need --job-type (the job is given whole)")
        return None
    try:
        data = None if payload is None else json.loads(payload)
    except ValueError as e:
        raise CommandError(f"--payload is not JSON: {e}") from None
    return NewTask(job_type, queue=queue, payload=data, priority=priority or 0)


def _show(row: Any, as_json: bool, title: str) -> None:
    if as_json:
        print_json(row)
    else:
        print_record(row, title=title)


@tasks.group(short_help="Recurring jobs (cron) for admins.")
def recurring() -> None:
    """Recurring jobs: a cron expression in a time zone enqueues a job at each instant."""


@recurring.command(name="list")
@common
def list_(data: str, module: str | None, as_: str | None, as_json: bool) -> None:
    """Every recurring job."""
    with _db(data, module, as_) as (db, who, _):
        rows = list_recurring(db, who)
    if as_json:
        print_json(rows)
        return
    print_table(COLUMNS, [[r.id, r.name, r.cron, r.timezone, r.enabled, r.job.job_type, r.catch_up.value, r.next_fire] for r in rows],
                title="recurring jobs")  # fmt: skip


def _job_options(f: Any) -> Any:
    for deco in (
        click.option("--priority", type=int, default=None),
        click.option("--queue", default=None),
        click.option("--payload", default=None, help="the job's payload, as JSON"),
    ):
        f = deco(f)
    return f


@recurring.command()
@common
@click.argument("name")
@click.argument("cron")
@click.option("--job-type", required=True)
@_job_options
@click.option("--timezone", default="UTC", show_default=True, help="an IANA zone, e.g. Europe/Paris")
@click.option("--catch-up", type=CATCH_UP, default="skip", show_default=True)
@click.option("--catch-up-limit", type=click.IntRange(1, MAX_CATCH_UP_LIMIT), default=10, show_default=True)
@click.option("--disabled", is_flag=True, help="add it disabled")
def add(data: str, module: str | None, as_: str | None, as_json: bool, name: str, cron: str, job_type: str, payload: str | None,
        queue: str | None, priority: int | None, timezone: str, catch_up: str, catch_up_limit: int, disabled: bool) -> None:  # fmt: skip
    """Add a recurring job NAME on CRON (five fields, or @hourly, @daily...)."""
    job = _job(job_type, payload, queue, priority)
    assert job is not None
    spec = RecurringSpec(name, cron, job, timezone, not disabled, CatchUp(catch_up), catch_up_limit)
    with _db(data, module, as_) as (db, who, _):
        row = db.call("add_recurring", spec, sender=who)
    _show(row, as_json, f"recurring job {row.id} added")


@recurring.command()
@common
@click.argument("recurring_id", type=click.IntRange(min=0))
@click.option("--name", default=None)
@click.option("--cron", default=None)
@click.option("--timezone", default=None)
@click.option("--job-type", default=None, help="the new job (with --payload, --queue, --priority)")
@_job_options
@click.option("--catch-up", type=CATCH_UP, default=None)
@click.option("--catch-up-limit", type=click.IntRange(1, MAX_CATCH_UP_LIMIT), default=None)
def change(data: str, module: str | None, as_: str | None, as_json: bool, recurring_id: int, name: str | None, cron: str | None,
           timezone: str | None, job_type: str | None, payload: str | None, queue: str | None, priority: int | None,
           catch_up: str | None, catch_up_limit: int | None) -> None:  # fmt: skip
    """Change the given fields of a recurring job."""
    job = _job(job_type, payload, queue, priority)
    with _db(data, module, as_) as (db, who, _):
        row = db.call("change_recurring", recurring_id, name, cron, timezone, job, catch_up and CatchUp(catch_up), catch_up_limit, sender=who)
    _show(row, as_json, f"recurring job {recurring_id} changed")


def _simple(reducer: str, doc: str, done: str) -> None:
    @recurring.command(name=reducer.split("_")[0] if reducer != "run_recurring_now" else "run-now", help=doc)
    @common
    @click.argument("recurring_id", type=click.IntRange(min=0))
    def command(data: str, module: str | None, as_: str | None, as_json: bool, recurring_id: int) -> None:
        with _db(data, module, as_) as (db, who, _):
            row = db.call(reducer, recurring_id, sender=who)
            db.run_due()
        if row is None:
            if as_json:
                print_json({"deleted": recurring_id})
            else:
                console().print(f"deleted recurring job {recurring_id}")
            return
        _show(row, as_json, done.format(recurring_id))


_simple("enable_recurring", "Enable a recurring job (counting from now).", "recurring job {} enabled")
_simple("disable_recurring", "Disable a recurring job.", "recurring job {} disabled")
_simple("delete_recurring", "Delete a recurring job (its tasks stay).", "")
_simple("run_recurring_now", "Enqueue a recurring job's job once now.", "task enqueued by recurring job {}")
