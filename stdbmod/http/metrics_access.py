"""Who may read `/metrics` and the dashboard: an admin of the served database, checked in a read
snapshot through the runtime's read path (the task-retry module's admin table; for a module
without it, the database's owner)."""

from __future__ import annotations

from typing import Any

from ..retry.roles import is_admin
from ..retry.tables import Task
from ..runtime import Database
from ..types import Identity


def has_tasks(db: Database) -> bool:
    """Whether the served module holds the task-retry module's tables."""
    task = db.module.tables.get("task")
    return task is not None and task.row_type is Task and "retry_admin" in db.module.tables


def admin_in(db: Database, tables: Any, caller: Identity) -> bool:
    """Whether `caller` is an admin, read in `tables` (a read view's `.db`): the snapshot the
    caller's data is then read from."""
    if has_tasks(db):
        return is_admin(tables, caller)
    return caller == db.owner


def is_admin_now(db: Database, caller: Identity) -> bool:
    """`admin_in`, in a snapshot of its own."""
    with db.read() as view:
        return admin_in(db, view.db, caller)
