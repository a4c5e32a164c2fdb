"""`stdbmod tasks ...`: the task-retry module for admins, as tables.

Reads go through `stdbmod.retry.queries` (which check the caller is an admin, or a worker for
`show`); requeue and delete are the module's admin reducers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from ..local.datadir import open_database
from ..retry import queries
from ..retry.errors import InvalidArgument
from ..retry.limits import MAX_CONCURRENCY, MAX_HISTORY_CAP, MAX_PER_PAGE, MAX_RATE_LIMIT, MAX_RATE_PERIOD_SECONDS, MAX_RETENTION_COUNT, MAX_RETENTION_SECONDS
from ..runtime import Database
from ..types import Identity
from .options import (
    CommandError,
    as_option,
    caller,
    data_option,
    json_option,
    module_option,
)
from .render import Column, console, print_json, print_record, print_table

F = TypeVar("F", bound=Callable[..., Any])

# At 80 columns the first ones stay; `drop` says which go first when the terminal is narrower.
TASK_COLUMNS = [
    Column("id"), Column("job_type"), Column("status"), Column("attempts", 1), Column("run_after", 3),
    Column("queue", 2), Column("last_error", 4, cut=True), Column("dead_reason", 5), Column("claimed_by", 6),
]
HISTORY_COLUMNS = [
    Column("task_id"), Column("attempt"), Column("outcome"), Column("job_type", 1), Column("finished_at", 2),
    Column("error", 3, cut=True), Column("worker", 4), Column("id", 5),
]


def _task_cells(t: Any) -> list[Any]:
    """A task as TASK_COLUMNS' cells; attempts as "made/allowed"."""
    return [t.id, t.job_type, t.status, f"{t.attempts}/{t.max_attempts}", t.run_after, t.queue, t.last_error, t.dead_reason, t.claimed_by]


@contextmanager
def _db(data: str, module: str | None, as_: str | None) -> Iterator[tuple[Database, Identity, Any]]:
    who = caller(as_)
    with open_database(data, module) as (db, _):
        if "task" not in db.module.tables:
            raise CommandError(f"the database at {data} has no task-retry module (no task table)")
        try:
            yield db, who, queries
        except InvalidArgument as e:  # an option's value the module refuses: a usage error
            raise CommandError(str(e)) from None


def common(f: F) -> F:
    for deco in (json_option, as_option, module_option, data_option):
        f = deco(f)
    return f


def _page(page: Any, as_json: bool, title: str) -> None:
    if as_json:
        print_json(page)
        return
    print_table(TASK_COLUMNS, [_task_cells(t) for t in page.items], title=title)
    c = console()
    pages = max(1, -(-page.total // page.per_page))
    c.print(f"page {page.page} of {pages} ({page.total} task{'s' if page.total != 1 else ''})")


@click.group(short_help="The task-retry module for admins.")
def tasks() -> None:
    """The task-retry module for admins: list, show, dead-letter tier, requeue, run now, cancel, delete, history;
    queues, pause, resume, limits; retention."""


@tasks.command(name="list")
@common
@click.option("--status", type=click.Choice(["queued", "running", "completed", "dead"]), default=None)
@click.option("--queue", default=None)
@click.option("--job-type", default=None)
@click.option("--page", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--per-page", type=click.IntRange(min=1, max=MAX_PER_PAGE), default=50, show_default=True)
def list_(
    data: str, module: str | None, as_: str | None, as_json: bool, status: str | None, queue: str | None, job_type: str | None, page: int, per_page: int
) -> None:
    """Tasks, filtered by status, queue and job type."""
    with _db(data, module, as_) as (db, who, q):
        result = q.list_tasks(db, who, status=status, queue=queue, job_type=job_type, page=page, per_page=per_page)
    _page(result, as_json, "tasks")


@tasks.command()
@common
@click.argument("task_id", type=click.IntRange(min=0))
def show(data: str, module: str | None, as_: str | None, as_json: bool, task_id: int) -> None:
    """One task, every column."""
    with _db(data, module, as_) as (db, who, q):
        task = q.get_task(db, who, task_id)
    if as_json:
        print_json(task)
    else:
        print_record(task, title=f"task {task_id}")


@tasks.command()
@common
@click.option("--queue", default=None)
@click.option("--page", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--per-page", type=click.IntRange(min=1, max=MAX_PER_PAGE), default=50, show_default=True)
def dlq(data: str, module: str | None, as_: str | None, as_json: bool, queue: str | None, page: int, per_page: int) -> None:
    """The dead-letter tier: dead tasks (exhausted, gave up or cancelled)."""
    with _db(data, module, as_) as (db, who, q):
        result = q.dead_letter(db, who, queue=queue, page=page, per_page=per_page)
    _page(result, as_json, "dead-letter tier")


@tasks.command()
@common
@click.argument("task_id", type=click.IntRange(min=0))
def requeue(data: str, module: str | None, as_: str | None, as_json: bool, task_id: int) -> None:
    """Put a dead task back in the queue with its attempts reset."""
    _made_due(data, module, as_, as_json, "requeue", task_id, "requeued")


@tasks.command(name="run-now")
@common
@click.argument("task_id", type=click.IntRange(min=0))
def run_now(data: str, module: str | None, as_: str | None, as_json: bool, task_id: int) -> None:
    """Make a queued task (scheduled later, or backing off) due now."""
    _made_due(data, module, as_, as_json, "run_now", task_id, "due now")


def _made_due(data: str, module: str | None, as_: str | None, as_json: bool, reducer: str, task_id: int, done: str) -> None:
    """Call `reducer` on the task, then run what fell due (a handler's task runs at once)."""
    with _db(data, module, as_) as (db, who, _):
        task = db.call(reducer, task_id, sender=who)
        db.run_due()
    if as_json:
        print_json(task)
    else:
        print_record(task, title=f"task {task_id} {done}")


@tasks.command()
@common
@click.argument("task_id", type=click.IntRange(min=0))
@click.option("--reason", default=None, help="Stored as the task's last_error.")
def cancel(data: str, module: str | None, as_: str | None, as_json: bool, task_id: int, reason: str | None) -> None:
    """Cancel a queued or running task: it goes to the dead-letter tier (cancelled). A running
    attempt ends there; its worker's next heartbeat or report is refused."""
    with _db(data, module, as_) as (db, who, _):
        task = db.call("cancel", task_id, reason, sender=who)
    if as_json:
        print_json(task)
    else:
        print_record(task, title=f"task {task_id} cancelled")


@tasks.command()
@common
@click.argument("task_id", type=click.IntRange(min=0))
def delete(data: str, module: str | None, as_: str | None, as_json: bool, task_id: int) -> None:
    """Delete a dead task (cancel a queued one first)."""
    with _db(data, module, as_) as (db, who, _):
        db.call("delete_task", task_id, sender=who)
    if as_json:
        print_json({"deleted": task_id})
    else:
        console().print(f"deleted task {task_id}")


@tasks.command()
@common
@click.option("-n", "--limit", type=click.IntRange(min=1, max=MAX_HISTORY_CAP), default=50, show_default=True)
def history(data: str, module: str | None, as_: str | None, as_json: bool, limit: int) -> None:
    """The attempt history across all job types, newest first."""
    with _db(data, module, as_) as (db, who, q):
        entries = q.history(db, who, limit=limit)
    if as_json:
        print_json(entries)
        return
    print_table(HISTORY_COLUMNS, [[getattr(e, c.name) for c in HISTORY_COLUMNS] for e in entries], title="attempt history (newest first)")


# --- queues (issue 16): pause, resume, limits ------------------------------------------------------

QUEUE_COLUMNS = [
    Column("queue"), Column("paused"), Column("queued"), Column("running"), Column("oldest_ready_s", 2),
    Column("completed", 3), Column("dead", 3), Column("concurrency", 1), Column("rate", 1), Column("partition", 4),
]  # fmt: skip


def _queue_cells(q: Any) -> list[Any]:
    rate = None if q.rate_limit is None else f"{q.rate_limit}/{q.rate_period_seconds}s"
    partition = None if q.partition_limit is None else f"{q.partition_limit}/{q.rate_period_seconds}s"
    age = None if q.oldest_ready_age_seconds is None else round(q.oldest_ready_age_seconds, 1)
    c = q.counts
    return [q.queue, "yes" if q.paused else "", c["queued"], c["running"], age, c["completed"], c["dead"], q.concurrency, rate, partition]


def _show_queue(db: Database, who: Identity, queue: str, as_json: bool, title: str) -> None:
    info = queries.queue_info(db, who, queue)
    if as_json:
        print_json(info)
    else:
        print_table(QUEUE_COLUMNS, [_queue_cells(info)], title=title)


@tasks.command()
@common
def queues(data: str, module: str | None, as_: str | None, as_json: bool) -> None:
    """Every queue: tasks per status, paused, limits, the age of its oldest ready task."""
    with _db(data, module, as_) as (db, who, q):
        infos = q.queue_list(db, who)
    if as_json:
        print_json(infos)
    else:
        print_table(QUEUE_COLUMNS, [_queue_cells(i) for i in infos], title="queues")


@tasks.command()
@common
@click.argument("queue")
def pause(data: str, module: str | None, as_: str | None, as_json: bool, queue: str) -> None:
    """Pause QUEUE: claims get nothing and in-module attempts wait; enqueues still land."""
    with _db(data, module, as_) as (db, who, _):
        db.call("pause_queue", queue, sender=who)
        _show_queue(db, who, queue, as_json, f"queue {queue} paused")


@tasks.command()
@common
@click.argument("queue")
def resume(data: str, module: str | None, as_: str | None, as_json: bool, queue: str) -> None:
    """Resume a paused QUEUE."""
    with _db(data, module, as_) as (db, who, _):
        db.call("resume_queue", queue, sender=who)
        db.run_due()  # the in-module attempts that waited
        _show_queue(db, who, queue, as_json, f"queue {queue} resumed")


@tasks.command()
@common
@click.argument("queue")
@click.option("--concurrency", type=click.IntRange(min=1, max=MAX_CONCURRENCY), default=None, help="At most N running at once.")
@click.option("--rate-limit", type=click.IntRange(min=1, max=MAX_RATE_LIMIT), default=None, help="At most N claims per period.")
@click.option("--rate-period", type=click.IntRange(min=1, max=MAX_RATE_PERIOD_SECONDS), default=None, help="The rate window in seconds [60].")
@click.option("--partition-limit", type=click.IntRange(min=1, max=MAX_RATE_LIMIT), default=None, help="At most N claims per partition key per period.")
def limits(
    data: str, module: str | None, as_: str | None, as_json: bool, queue: str,
    concurrency: int | None, rate_limit: int | None, rate_period: int | None, partition_limit: int | None,
) -> None:  # fmt: skip
    """Set QUEUE's limits, all at once: a limit not given is removed."""
    with _db(data, module, as_) as (db, who, _):
        db.call("set_queue_limits", queue, concurrency, rate_limit, rate_period, partition_limit, sender=who)
        _show_queue(db, who, queue, as_json, f"queue {queue} limits")


# --- retention (issue 16) --------------------------------------------------------------------------


@tasks.command()
@common
@click.option("--status", type=click.Choice(["completed", "dead"]), default=None, help="Set this status's retention (else show both).")
@click.option("--max-age", type=click.IntRange(min=0, max=MAX_RETENTION_SECONDS), default=None, help="Seconds kept after finishing.")
@click.option("--max-count", type=click.IntRange(min=0, max=MAX_RETENTION_COUNT), default=None, help="At most this many kept.")
def retention(
    data: str, module: str | None, as_: str | None, as_json: bool, status: str | None, max_age: int | None, max_count: int | None
) -> None:
    """How long finished tasks are kept. With --status, replace its limits (one not given is
    removed) and prune what they allow now."""
    if status is None and (max_age is not None or max_count is not None):
        raise CommandError("--max-age and --max-count need --status")
    with _db(data, module, as_) as (db, who, q):
        if status is not None:
            db.call("set_retention", status, max_age, max_count, sender=who)
            db.run_due()  # the first batch now
        policies = q.retention(db, who)
    if as_json:
        print_json(policies)
        return
    cells = [[p.status, p.max_age_seconds, p.max_count] for p in policies]
    print_table([Column("status"), Column("max_age_seconds"), Column("max_count")], cells, title="retention")
