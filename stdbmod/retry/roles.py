"""Who may do what: admins, and identities an admin granted the worker role.

Checks run inside the caller's transaction (a reducer's, or a read's snapshot), so a role removed
by one call is gone for every call after it.
"""

from __future__ import annotations

from typing import Any

from ..runtime import Database, ReducerContext
from ..runtime.dbview import DbView
from ..types import Identity
from .errors import NotAuthorized


def _has(db_or_view: Any, table: str, identity: Identity) -> bool:
    """`db_or_view`: `ctx.db`, anything with a `.db` (a context, a read view), or a Database
    (read in a snapshot of its own)."""
    if isinstance(db_or_view, Database):
        with db_or_view.read() as view:
            return _has(view.db, table, identity)
    tables = db_or_view if isinstance(db_or_view, DbView) else db_or_view.db
    return getattr(tables, table).identity.contains(identity)  # type: ignore[no-any-return]


def is_admin(db_or_view: Any, identity: Identity) -> bool:
    return _has(db_or_view, "retry_admin", identity)


def is_worker(db_or_view: Any, identity: Identity) -> bool:
    """Holds the worker role (admins may act as workers too, but are not workers by this test)."""
    return _has(db_or_view, "retry_worker", identity)


# The reducers' checks read ctx.db's tables directly (every call makes one or two): `_has` would
# first work out which kind of handle it was given.


def require_admin(ctx: ReducerContext, action: str) -> None:
    if not ctx.db.retry_admin.identity.contains(ctx.sender):
        raise NotAuthorized(f"{action}: only an admin may do this ({ctx.sender} is not one)")


def require_worker(ctx: ReducerContext, action: str) -> None:
    db, sender = ctx.db, ctx.sender
    if not (db.retry_worker.identity.contains(sender) or db.retry_admin.identity.contains(sender)):
        raise NotAuthorized(f"{action}: needs the worker role or admin ({sender} has neither)")
