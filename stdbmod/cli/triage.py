"""`stdbmod tasks dlq-groups | dlq-requeue | dlq-delete`: the dead-letter triage for admins
(retry/triage.py, docs/operations.md). A bulk action runs its batches to the end before the
command returns (each its own transaction); `--dry-run` only counts."""

from __future__ import annotations

import datetime as dt
from typing import Any

import click

from ..retry.triage import MAX_GROUPS, BulkAction, TriageFilter, dlq_groups, get_op, preview
from ..types import Timestamp
from .render import Column, console, print_json, print_table
from .tasks import TASK_COLUMNS, _db, _task_cells, common, tasks

GROUP_COLUMNS = [
    Column("fingerprint"), Column("count"), Column("held", 3), Column("job_types", 1), Column("last_seen", 2),
    Column("sample_error", 4, cut=True),
]


def _when(value: dt.datetime | None) -> Timestamp | None:
    if value is None:
        return None
    return Timestamp.from_datetime(value if value.tzinfo else value.replace(tzinfo=dt.UTC))


def _filter_options(f: Any) -> Any:
    for deco in (
        click.option("--dry-run", is_flag=True, help="count and show the first ones; change nothing"),
        click.option("--include-held", is_flag=True, help="also the held ones (dead again after a bulk requeue)"),
        click.option("--until", "finished_before", type=click.DateTime(), default=None, help="died at or before (UTC)"),
        click.option("--since", "finished_after", type=click.DateTime(), default=None, help="died at or after (UTC)"),
        click.option("--queue", default=None),
        click.option("--job-type", default=None),
        click.option("--group", default=None, help="a group's fingerprint (tasks dlq-groups)"),
    ):
        f = deco(f)
    return f


@tasks.command(name="dlq-groups")
@common
@click.option("--queue", default=None)
@click.option("--job-type", default=None)
@click.option("-n", "--limit", type=click.IntRange(1, MAX_GROUPS), default=50, show_default=True)
def groups(data: str, module: str | None, as_: str | None, as_json: bool, queue: str | None, job_type: str | None, limit: int) -> None:
    """The dead-letter tier grouped by error fingerprint, largest first."""
    with _db(data, module, as_) as (db, who, _):
        found = dlq_groups(db, who, queue=queue, job_type=job_type, limit=limit)
    if as_json:
        print_json(found)
        return
    rows = [[g.fingerprint, g.count, g.held, ", ".join(g.job_types), g.last_seen, g.sample_error] for g in found]
    print_table(GROUP_COLUMNS, rows, title="dead-letter groups")


def _bulk(action: BulkAction) -> None:
    @tasks.command(name=f"dlq-{action.value}", help=f"{action.value.capitalize()} the dead tasks the options select (all of them: every dead task).")
    @common
    @_filter_options
    def command(data: str, module: str | None, as_: str | None, as_json: bool, group: str | None, job_type: str | None, queue: str | None,
                finished_after: dt.datetime | None, finished_before: dt.datetime | None, include_held: bool, dry_run: bool) -> None:  # fmt: skip
        where = TriageFilter(group, job_type, queue, _when(finished_after), _when(finished_before), include_held)
        with _db(data, module, as_) as (db, who, _):
            if dry_run:
                p = preview(db, who, where)
            else:
                op = db.call("bulk_dlq", action, where, sender=who)
                db.run_due()  # the later batches: each its own transaction
                op = get_op(db, who, op.id)
        if dry_run:
            if as_json:
                print_json({"dry_run": True, "count": p.count, "sample": p.sample})
            else:
                print_table(TASK_COLUMNS, [_task_cells(t) for t in p.sample], title=f"dry run: {p.count} task(s) would be {action.value}d")
            return
        if as_json:
            print_json(op)
        else:
            console().print(f"{action.value}d {op.processed} task(s) in {op.batches} transaction(s)")


_bulk(BulkAction.REQUEUE)
_bulk(BulkAction.DELETE)
