"""The dashboard's reads. Each opens one read snapshot, checks there that the caller is an admin
(`NotAllowed` otherwise: the page then shows nothing), and reads what the page shows from that
same snapshot.

Job lists are keyset pages, newest first, walked along one index and never counted: the
`created_at` index when a time filter is set (the cursor is (created_at, id)), else the `status`,
`job_type` or `queue` index (in that order of preference), else the primary key; the cursor is
the last id shown, and the next page starts right below it (a non-unique index's keys end with
the primary key, so "below it" is a seek). Filters the walk's index does not cover and the
search (a case-insensitive substring of the payload's JSON or the last error) are checked row by
row, and one page examines at most `BUDGET` rows: when they hold fewer matches than a page, the
page says how far down it looked and its cursor continues from there. So every page costs at
most one seek and `BUDGET` row reads, whether the table holds a thousand rows or ten million.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import msgspec

from ... import codec
from ...errors import StdbError
from ...retry.tables import Attempt, RetryAdmin, RetryQueue, RetryWorker, Task, TaskStatus
from ...runtime import Database, Range
from ...types import Identity, Timestamp
from ..metrics_access import admin_in, has_tasks

PAGE = 50
BUDGET = 5000
HISTORY = 100
MAX_ROLE_ROWS = 500
MAX_QUEUES = 1000  # controlled queues shown on the overview
MAX_SEARCH = 200


class NotAllowed(StdbError):
    status_code = 403


class NoTasks(StdbError):
    """The served module has no task-retry tables: nothing for the dashboard to show."""

    status_code = 404


class JobFilter(msgspec.Struct, frozen=True):
    status: TaskStatus | None = None
    queue: str | None = None
    job_type: str | None = None
    since: Timestamp | None = None  # created at or after
    until: Timestamp | None = None  # created at or before
    search: str | None = None

    def matches(self, t: Task) -> bool:
        if self.status is not None and t.status is not self.status:
            return False
        if self.queue is not None and t.queue != self.queue:
            return False
        if self.job_type is not None and t.job_type != self.job_type:
            return False
        if self.since is not None and t.created_at < self.since:
            return False
        if self.until is not None and t.created_at > self.until:
            return False
        if self.search:
            needle = self.search.lower()
            text = codec.json_encoder.encode(t.payload).decode("utf-8", "replace").lower()
            if needle not in text and needle not in (t.last_error or "").lower():
                return False
        return True

    @property
    def timed(self) -> bool:
        return self.since is not None or self.until is not None


class Cursor(msgspec.Struct, frozen=True):
    """Where a page ends: the last id (and, on the time walk, its created_at)."""

    id: int
    created: int | None = None

    def encode(self) -> str:
        return str(self.id) if self.created is None else f"{self.created}.{self.id}"

    @classmethod
    def parse(cls, text: str) -> Cursor:
        try:
            if "." in text:
                created, _, ident = text.partition(".")
                return cls(int(ident), int(created))
            return cls(int(text))
        except ValueError:
            raise ValueError(f"not a page cursor: {text!r}") from None


class JobsPage(msgspec.Struct):
    items: list[Task]
    next: Cursor | None  # the next page's cursor (None: this was the last)
    examined: int  # rows read for this page
    searched_out: bool  # the budget ran out before the page filled


def _require(db: Database, tables: Any, caller: Identity) -> None:
    if not has_tasks(db):
        raise NoTasks("this database's module has no task-retry tables")
    if not admin_in(db, tables, caller):
        raise NotAllowed(f"{caller} is not an admin of this database")


def check(db: Database, caller: Identity) -> dict[str, RetryQueue]:
    """The check, and each controlled queue's controls (paused, limits) read in its snapshot (the
    overview's counts come from a shared snapshot)."""
    with db.read() as view:
        _require(db, view.db, caller)
        return {row.queue: row for row in itertools.islice(view.db.retry_queue.iter(), MAX_QUEUES)}


def _walk(tasks: Any, f: JobFilter, before: Cursor | None) -> Iterator[Task]:
    """Candidate rows, newest first, from `before` down (exclusive), along one index."""
    if f.timed:
        lo = ... if f.since is None else f.since
        hi = ... if f.until is None else f.until
        if before is not None and before.created is not None:
            at = Timestamp(before.created)
            yield from tasks.created_at.filter((at, Range(hi=before.id)), reverse=True)
            yield from tasks.created_at.filter(Range(lo=lo, hi=at), reverse=True)
        else:
            yield from tasks.created_at.filter(Range(lo=lo, hi=hi, hi_inclusive=True), reverse=True)
        return
    below = Range() if before is None else Range(hi=before.id)
    for column in ("status", "job_type", "queue"):
        value = getattr(f, column)
        if value is not None:
            yield from getattr(tasks, column).filter((value, below), reverse=True)
            return
    yield from tasks.id.filter(below, reverse=True)


def _cursor(f: JobFilter, t: Task) -> Cursor:
    return Cursor(t.id, t.created_at.micros if f.timed else None)


def jobs(db: Database, caller: Identity, f: JobFilter, before: Cursor | None = None, per_page: int = PAGE, budget: int = BUDGET) -> JobsPage:
    """One page of matching jobs below `before`, newest first, reading at most `budget` rows."""
    with db.read() as view:
        _require(db, view.db, caller)
        items: list[Task] = []
        examined = 0
        walk = _walk(view.db.task, f, before)
        last: Task | None = None
        for t in walk:
            if last is not None and examined >= budget:  # rows are left below, unread: continue from the last one read
                return JobsPage(items, _cursor(f, last), examined, True)
            examined += 1
            last = t
            if f.matches(t):
                items.append(t)
                if len(items) == per_page:
                    more = next(walk, None) is not None  # one row more tells whether a next page can exist
                    return JobsPage(items, _cursor(f, t) if more else None, examined, False)
        return JobsPage(items, None, examined, False)


class JobView(msgspec.Struct):
    task: Task
    history: list[Attempt]


def job(db: Database, caller: Identity, task_id: int) -> JobView | None:
    with db.read() as view:
        _require(db, view.db, caller)
        task: Task | None = view.db.task.id.find(task_id)
        if task is None:
            return None
        history = list(itertools.islice(view.db.attempt.task_id.filter(task_id, reverse=True), HISTORY))
    return JobView(task, history)


class Roles(msgspec.Struct):
    admins: list[RetryAdmin]
    workers: list[RetryWorker]
    admin_count: int
    worker_count: int


def roles(db: Database, caller: Identity) -> Roles:
    with db.read() as view:
        _require(db, view.db, caller)
        a, w = view.db.retry_admin, view.db.retry_worker
        return Roles(list(itertools.islice(a.iter(), MAX_ROLE_ROWS)), list(itertools.islice(w.iter(), MAX_ROLE_ROWS)), a.count(), w.count())
