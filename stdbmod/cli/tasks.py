"""`stdbmod tasks ...`: the task-retry module for admins, as tables.

Reads go through `stdbmod.retry.queries` (which check the caller is an admin, or a worker for
`show`); requeue and delete are the module's admin reducers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from ..retry import queries
from ..runtime import Database
from ..types import Identity
from ..local.datadir import open_database
from .options import (
    CommandError,
    as_option,
    caller,
    data_option,
    json_option,
    module_option,
)
from .render import console, print_json, record_table, rows_table

F = TypeVar("F", bound=Callable[..., Any])

TASK_COLUMNS = ["id", "job_type", "queue", "status", "attempts", "max_attempts", "run_after", "dead_reason", "last_error", "claimed_by"]
HISTORY_COLUMNS = ["id", "task_id", "job_type", "attempt", "outcome", "error", "worker", "finished_at"]


@contextmanager
def _db(data: str, module: str | None, as_: str | None) -> Iterator[tuple[Database, Identity, Any]]:
    who = caller(as_)
    with open_database(data, module) as (db, _):
        if "task" not in db.module.tables:
            raise CommandError(f"the database at {data} has no task-retry module (no task table)")
        yield db, who, queries


def common(f: F) -> F:
    for deco in (json_option, as_option, module_option, data_option):
        f = deco(f)
    return f


def _first_line(text: Any) -> Any:
    """Tracebacks make tables unreadable: a list shows the last line of an error."""
    if isinstance(text, str) and "\n" in text:
        return text.strip().splitlines()[-1]
    return text


def _page(page: Any, as_json: bool, title: str) -> None:
    if as_json:
        print_json(page)
        return
    rows = [{c: _first_line(getattr(t, c, None)) for c in TASK_COLUMNS} for t in page.items]
    c = console()
    c.print(rows_table(rows, TASK_COLUMNS, title=title, short_ids=True))
    pages = max(1, -(-page.total // page.per_page))
    c.print(f"page {page.page} of {pages} ({page.total} task{'s' if page.total != 1 else ''})")


@click.group(short_help="The task-retry module for admins.")
def tasks() -> None:
    """The task-retry module for admins: list, show, dead-letter tier, requeue, delete, history."""


@tasks.command(name="list")
@common
@click.option("--status", type=click.Choice(["queued", "running", "completed", "dead"]), default=None)
@click.option("--queue", default=None)
@click.option("--job-type", default=None)
@click.option("--page", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--per-page", type=click.IntRange(min=1, max=1000), default=50, show_default=True)
def list_(data: str, module: str | None, as_: str | None, as_json: bool, status: str | None, queue: str | None, job_type: str | None, page: int, per_page: int) -> None:
    """Tasks, filtered by status, queue and job type."""
    with _db(data, module, as_) as (db, who, q):
        result = q.list_tasks(db, who, status=status, queue=queue, job_type=job_type, page=page, per_page=per_page)
    _page(result, as_json, "tasks")


@tasks.command()
@common
@click.argument("task_id", type=int)
def show(data: str, module: str | None, as_: str | None, as_json: bool, task_id: int) -> None:
    """One task, every column."""
    with _db(data, module, as_) as (db, who, q):
        task = q.get_task(db, who, task_id)
    if as_json:
        print_json(task)
    else:
        console().print(record_table(task, title=f"task {task_id}"))


@tasks.command()
@common
@click.option("--queue", default=None)
@click.option("--page", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--per-page", type=click.IntRange(min=1, max=1000), default=50, show_default=True)
def dlq(data: str, module: str | None, as_: str | None, as_json: bool, queue: str | None, page: int, per_page: int) -> None:
    """The dead-letter tier: dead tasks (exhausted, gave up or cancelled)."""
    with _db(data, module, as_) as (db, who, q):
        result = q.dead_letter(db, who, queue=queue, page=page, per_page=per_page)
    _page(result, as_json, "dead-letter tier")


@tasks.command()
@common
@click.argument("task_id", type=int)
def requeue(data: str, module: str | None, as_: str | None, as_json: bool, task_id: int) -> None:
    """Put a dead task back in the queue with its attempts reset."""
    with _db(data, module, as_) as (db, who, _):
        task = db.call("requeue", task_id, sender=who)
        db.run_due()
    if as_json:
        print_json(task)
    else:
        console().print(record_table(task, title=f"task {task_id} requeued"))


@tasks.command()
@common
@click.argument("task_id", type=int)
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
@click.option("-n", "--limit", type=click.IntRange(min=1), default=50, show_default=True)
def history(data: str, module: str | None, as_: str | None, as_json: bool, limit: int) -> None:
    """The attempt history across all job types, newest first."""
    with _db(data, module, as_) as (db, who, q):
        entries = q.history(db, who, limit=limit)
    if as_json:
        print_json(entries)
        return
    rows = [{c: _first_line(getattr(e, c, None)) for c in HISTORY_COLUMNS} for e in entries]
    console().print(rows_table(rows, HISTORY_COLUMNS, title="attempt history (newest first)", short_ids=True))
