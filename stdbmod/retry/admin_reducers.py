"""Admin-only reducers: tasks (submit, requeue, delete, cancel), roles and settings.

Each checks the caller inside its transaction and refuses with NotAuthorized, changing nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from ..module import Module
from ..runtime import ReducerContext
from ..types import Identity
from . import transitions
from .errors import InvalidArgument, InvalidTransition
from .limits import MAX_HISTORY_CAP, MAX_LEASE_SECONDS, check_int
from .roles import require_admin
from .worker_reducers import find_task, task_creator
from .tables import RetryAdmin, RetryWorker, Task, settings_of

if TYPE_CHECKING:
    from .retry_module import RetryModule



def _save_settings(ctx: ReducerContext, **changes: Any) -> None:
    current = ctx.db.retry_settings.id.find(0)
    if current is None:  # the module was added to a database created without it
        ctx.db.retry_settings.insert(msgspec.structs.replace(settings_of(ctx.db), **changes))
    else:
        ctx.db.retry_settings.id.update(msgspec.structs.replace(current, **changes))


def register(mod: Module, rm: RetryModule) -> None:
    mod.reducer(task_creator(rm, "submit", require_admin, "Add a task directly (admin). A job type with a handler gets its first attempt now."))

    @mod.reducer
    def requeue(ctx: ReducerContext, task_id: int) -> Task:
        """A dead task back to queued, due now, attempts reset."""
        require_admin(ctx, "requeue")
        return transitions.requeue(ctx, rm.handlers, find_task(ctx, task_id))

    @mod.reducer
    def delete_task(ctx: ReducerContext, task_id: int) -> None:
        """Delete a dead task (its history rows stay)."""
        require_admin(ctx, "delete_task")
        transitions.delete(ctx, find_task(ctx, task_id))

    @mod.reducer
    def cancel(ctx: ReducerContext, task_id: int, reason: str | None = None) -> Task:
        """A queued task to dead/cancelled; `reason` goes to last_error."""
        require_admin(ctx, "cancel")
        return transitions.cancel(ctx, find_task(ctx, task_id), reason)

    @mod.reducer
    def add_admin(ctx: ReducerContext, identity: Identity) -> None:
        require_admin(ctx, "add_admin")
        if ctx.db.retry_admin.identity.find(identity) is None:
            ctx.db.retry_admin.insert(RetryAdmin(identity, ctx.timestamp, ctx.sender))

    @mod.reducer
    def remove_admin(ctx: ReducerContext, identity: Identity) -> None:
        """Remove an admin (yourself included), but never the last one."""
        require_admin(ctx, "remove_admin")
        row = ctx.db.retry_admin.identity.find(identity)
        if row is None:
            raise InvalidArgument(f"{identity} is not an admin")
        if ctx.db.retry_admin.count() <= 1:
            raise InvalidTransition("the last admin cannot be removed; add another admin first")
        ctx.db.retry_admin.delete(row)

    @mod.reducer
    def grant_worker(ctx: ReducerContext, identity: Identity) -> None:
        require_admin(ctx, "grant_worker")
        if ctx.db.retry_worker.identity.find(identity) is None:
            ctx.db.retry_worker.insert(RetryWorker(identity, ctx.timestamp, ctx.sender))

    @mod.reducer
    def revoke_worker(ctx: ReducerContext, identity: Identity) -> None:
        """Take the worker role away. Leases it holds run out and the reaper requeues them."""
        require_admin(ctx, "revoke_worker")
        row = ctx.db.retry_worker.identity.find(identity)
        if row is None:
            raise InvalidArgument(f"{identity} does not have the worker role")
        ctx.db.retry_worker.delete(row)

    @mod.reducer
    def set_history_cap(ctx: ReducerContext, cap: int) -> None:
        """Keep at most `cap` attempt rows; a lower cap trims the oldest now."""
        require_admin(ctx, "set_history_cap")
        check_int("cap", cap, 0, MAX_HISTORY_CAP)
        _save_settings(ctx, history_cap=cap)
        transitions.trim_history(ctx, cap)

    @mod.reducer
    def set_default_lease(ctx: ReducerContext, seconds: int) -> None:
        """The lease a claim takes when it names none (leases already taken keep theirs)."""
        require_admin(ctx, "set_default_lease")
        check_int("seconds", seconds, 1, MAX_LEASE_SECONDS)
        _save_settings(ctx, default_lease_seconds=seconds)
