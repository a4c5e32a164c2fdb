"""Recurring jobs (cron): the `recurring` table, its one timer row per entry, the transitions and
the admin reducers. docs/cron.md tells the story; cron.py parses expressions and walks instants.

Each enabled entry has one `recurring_timer` row, due at its next instant. When it fires, one
transaction enqueues a task for every instant due in (last_fired, now] that the catch-up policy
keeps, moves `last_fired` to the newest of them and re-arms the timer at the next instant after
now. The watermark and the tasks commit together, so an instant is enqueued exactly once: a
crash before the commit leaves the row due (it fires again after a restart, finding the same
instants), a crash after it leaves the watermark past them.

An instant is *on time* when the timer fires less than `ON_TIME_SECONDS` after it (the scheduler
fires a row within milliseconds on a running server); older ones were *missed* (the server was
down, or stopped) and the entry's `catch_up` decides: `skip` them, run `one` task for them all,
or run `each` of the newest `catch_up_limit`.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any

import msgspec

from ..errors import SenderError
from ..module import Module
from ..runtime import Database, ReducerContext
from ..schema import PrimaryKey, Unique
from ..types import At, Identity, ScheduleAt, TimeDuration, Timestamp
from . import cron, transitions
from .errors import InvalidArgument, NotAuthorized
from .limits import MAX_BATCH, check_int, check_name
from .roles import is_admin, require_admin
from .tables import NewTask, Task
from .transitions import Handlers

ON_TIME_SECONDS = 60
DEFAULT_CATCH_UP_LIMIT = 10
MAX_CATCH_UP_LIMIT = MAX_BATCH  # tasks one firing may enqueue: bounds its transaction


class CatchUp(str, enum.Enum):
    """What a firing does with instants missed while the server was down."""

    SKIP = "skip"  # enqueue nothing for them
    ONE = "one"  # one task for them all (for the newest)
    EACH = "each"  # one task each, for the newest catch_up_limit of them


class Recurring(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    name: Annotated[str, Unique()]
    cron: str  # the five-field expression (a name such as @hourly is stored expanded)
    timezone: str  # IANA
    job: NewTask  # what each instant enqueues (run_after and idempotency_key are set per instant)
    enabled: bool
    catch_up: CatchUp
    catch_up_limit: int  # for `each`
    last_fired: Timestamp  # the watermark: every instant up to here has been handled
    next_fire: Timestamp | None  # when the timer is due (None: disabled, or no instant within 50 years)
    created_at: Timestamp
    updated_at: Timestamp
    created_by: Identity


class RecurringTimer(msgspec.Struct):
    """Fires the next instant of recurring entry `recurring_id`."""

    scheduled_id: Annotated[int, PrimaryKey(auto_inc=True)]
    scheduled_at: ScheduleAt
    recurring_id: Annotated[int, Unique()]


class RecurringSpec(msgspec.Struct, forbid_unknown_fields=True):
    """A recurring entry to add: `add_recurring`'s arguments."""

    name: str
    cron: str
    job: NewTask
    timezone: str = "UTC"
    enabled: bool = True
    catch_up: CatchUp = CatchUp.SKIP
    catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT


class RecurringNotFound(SenderError, LookupError):
    status_code = 404

    def __init__(self, recurring_id: int) -> None:
        super().__init__(f"no recurring entry with id {recurring_id}")


def declare_recurring_tables(mod: Module) -> None:
    mod.table(Recurring)
    mod.table(RecurringTimer, scheduled="fire_recurring")


# --- checks ------------------------------------------------------------------------------------------


def _job(job: NewTask) -> NewTask:
    """The job an entry enqueues, checked; run_after and idempotency_key are the firing's."""
    if job.run_after is not None or job.idempotency_key is not None:
        raise InvalidArgument("job: run_after and idempotency_key are set by each firing; leave them out")
    try:
        return transitions.checked(job)
    except InvalidArgument as e:
        raise InvalidArgument(f"job: {e}") from None


def _catch_up(value: CatchUp | str) -> CatchUp:
    try:
        return CatchUp(value)
    except ValueError:
        raise InvalidArgument(f"catch_up must be one of {', '.join(c.value for c in CatchUp)}, not {value!r}") from None


def find(ctx: ReducerContext, recurring_id: int) -> Recurring:
    row: Recurring | None = ctx.db.recurring.id.find(recurring_id)
    if row is None:
        raise RecurringNotFound(recurring_id)
    return row


# --- transitions ---------------------------------------------------------------------------------


def arm(ctx: ReducerContext, entry: Recurring) -> Recurring:
    """Point the entry's one timer row at its next instant after max(now, last_fired), or drop it
    (disabled, or no instant ahead); the entry with `next_fire` saying so."""
    ctx.db.recurring_timer.recurring_id.delete(entry.id)
    nxt = None
    if entry.enabled:
        nxt = cron.next_after(entry.cron, cron.time_zone(entry.timezone), max(ctx.timestamp, entry.last_fired))
    if nxt is not None:
        ctx.db.recurring_timer.insert(RecurringTimer(0, At(nxt), entry.id))
    armed = msgspec.structs.replace(entry, next_fire=nxt)
    ctx.db.recurring.id.update(armed)
    return armed


def add(ctx: ReducerContext, spec: RecurringSpec) -> Recurring:
    name = check_name("name", spec.name)
    if ctx.db.recurring.name.find(name) is not None:
        raise InvalidArgument(f"a recurring entry named {name!r} exists already")
    expr = cron.expression(spec.cron)
    cron.time_zone(spec.timezone)
    now = ctx.timestamp
    entry: Recurring = ctx.db.recurring.insert(
        Recurring(
            id=0,
            name=name,
            cron=expr,
            timezone=spec.timezone,
            job=_job(spec.job),
            enabled=spec.enabled,
            catch_up=_catch_up(spec.catch_up),
            catch_up_limit=check_int("catch_up_limit", spec.catch_up_limit, 1, MAX_CATCH_UP_LIMIT),
            last_fired=now,  # instants from now on; none before the entry existed
            next_fire=None,
            created_at=now,
            updated_at=now,
            created_by=ctx.sender,
        )
    )
    return arm(ctx, entry)


def change(ctx: ReducerContext, entry: Recurring, **changes: Any) -> Recurring:
    """Change the given fields (None: unchanged). A new expression or zone counts from now: the
    old schedule's instants up to now are not caught up under the new one."""
    given = {k: v for k, v in changes.items() if v is not None}
    if "name" in given:
        given["name"] = check_name("name", given["name"])
        other = ctx.db.recurring.name.find(given["name"])
        if other is not None and other.id != entry.id:
            raise InvalidArgument(f"a recurring entry named {given['name']!r} exists already")
    if "cron" in given:
        given["cron"] = cron.expression(given["cron"])
    if "timezone" in given:
        cron.time_zone(given["timezone"])
    if "job" in given:
        given["job"] = _job(given["job"])
    if "catch_up" in given:
        given["catch_up"] = _catch_up(given["catch_up"])
    if "catch_up_limit" in given:
        check_int("catch_up_limit", given["catch_up_limit"], 1, MAX_CATCH_UP_LIMIT)
    now = ctx.timestamp
    changed = msgspec.structs.replace(entry, updated_at=now, **given)
    if changed.cron != entry.cron or changed.timezone != entry.timezone:
        changed = msgspec.structs.replace(changed, last_fired=max(now, entry.last_fired))
    return arm(ctx, changed)


def set_enabled(ctx: ReducerContext, entry: Recurring, enabled: bool) -> Recurring:
    """Enable or disable. Enabling counts from now: the instants that passed while the entry was
    disabled are not caught up (disabling says not to run them)."""
    if entry.enabled == enabled:
        return entry
    now = ctx.timestamp
    changed = msgspec.structs.replace(entry, enabled=enabled, updated_at=now)
    if enabled:
        changed = msgspec.structs.replace(changed, last_fired=max(now, entry.last_fired))
    return arm(ctx, changed)


def delete(ctx: ReducerContext, entry: Recurring) -> None:
    """The entry and its timer go; the tasks it enqueued stay (their recurring_id names it)."""
    ctx.db.recurring_timer.recurring_id.delete(entry.id)
    ctx.db.recurring.delete(entry)


def enqueue(ctx: ReducerContext, handlers: Handlers, entry: Recurring, instant: Timestamp | None) -> Task:
    """One task of the entry: for `instant` (its idempotency key names it: an instant is
    enqueued once, whatever happens), or a run-now (no instant)."""
    key = None if instant is None else f"recurring:{entry.id}:{instant.isoformat()}"
    spec = msgspec.structs.replace(entry.job, run_after=None, idempotency_key=key)
    return transitions.create_task(ctx, handlers, spec, recurring_id=entry.id)


def to_enqueue(entry: Recurring, now: Timestamp) -> list[Timestamp]:
    """The instants in (last_fired, now] a firing at `now` enqueues, oldest first: those on time,
    and of the missed ones what the catch-up policy keeps. Reads about catch_up_limit instants,
    however long the server was down (cron.due walks back from now)."""
    tz = cron.time_zone(entry.timezone)
    instants, _ = cron.due(entry.cron, tz, entry.last_fired, now, entry.catch_up_limit + 1)
    late = now + TimeDuration.from_seconds(-ON_TIME_SECONDS)
    on_time = [t for t in instants if t > late]
    missed = [t for t in instants if t <= late]
    if entry.catch_up is CatchUp.SKIP:
        missed = []
    elif entry.catch_up is CatchUp.ONE:
        missed = missed[-1:]
    else:
        missed = missed[-entry.catch_up_limit :]
    return missed + on_time


def fire(ctx: ReducerContext, handlers: Handlers, timer: RecurringTimer) -> list[Task]:
    """The timer of an entry fired: enqueue its due instants, move the watermark, re-arm."""
    ctx.db.recurring_timer.scheduled_id.delete(timer.scheduled_id)  # arm() writes the next one
    entry: Recurring | None = ctx.db.recurring.id.find(timer.recurring_id)
    if entry is None or not entry.enabled:
        return []
    now = ctx.timestamp
    made = [enqueue(ctx, handlers, entry, t) for t in to_enqueue(entry, now)]
    arm(ctx, msgspec.structs.replace(entry, last_fired=max(now, entry.last_fired)))
    return made


# --- reducers ------------------------------------------------------------------------------------


def declare_recurring_reducers(mod: Module, handlers: Handlers) -> None:
    @mod.reducer
    def fire_recurring(ctx: ReducerContext, timer: RecurringTimer) -> None:
        """Scheduled at an entry's next instant."""
        ctx.require_scheduler()
        fire(ctx, handlers, timer)

    @mod.reducer(spread=True)
    def add_recurring(ctx: ReducerContext, spec: RecurringSpec) -> Recurring:
        """A new recurring entry (admin); its first instant is the first after now."""
        require_admin(ctx, "add_recurring")
        return add(ctx, spec)

    @mod.reducer
    def change_recurring(
        ctx: ReducerContext,
        recurring_id: int,
        name: str | None = None,
        cron: str | None = None,
        timezone: str | None = None,
        job: NewTask | None = None,
        catch_up: CatchUp | None = None,
        catch_up_limit: int | None = None,
    ) -> Recurring:
        """Change an entry's fields (admin); None leaves a field as it is."""
        require_admin(ctx, "change_recurring")
        entry = find(ctx, recurring_id)
        return change(ctx, entry, name=name, cron=cron, timezone=timezone, job=job, catch_up=catch_up, catch_up_limit=catch_up_limit)

    @mod.reducer
    def enable_recurring(ctx: ReducerContext, recurring_id: int) -> Recurring:
        require_admin(ctx, "enable_recurring")
        return set_enabled(ctx, find(ctx, recurring_id), True)

    @mod.reducer
    def disable_recurring(ctx: ReducerContext, recurring_id: int) -> Recurring:
        require_admin(ctx, "disable_recurring")
        return set_enabled(ctx, find(ctx, recurring_id), False)

    @mod.reducer
    def delete_recurring(ctx: ReducerContext, recurring_id: int) -> None:
        require_admin(ctx, "delete_recurring")
        delete(ctx, find(ctx, recurring_id))

    @mod.reducer
    def run_recurring_now(ctx: ReducerContext, recurring_id: int) -> Task:
        """Enqueue the entry's job once now (admin), outside its schedule: the watermark and the
        next instant are unchanged. A disabled entry may be run now too."""
        require_admin(ctx, "run_recurring_now")
        return enqueue(ctx, handlers, find(ctx, recurring_id), None)


# --- reads ---------------------------------------------------------------------------------------


def list_recurring(db: Database, caller: Identity) -> list[Recurring]:
    """Every recurring entry, by id (admin)."""
    with db.read() as view:
        if not is_admin(view.db, caller):
            raise NotAuthorized(f"recurring: only an admin may read this ({caller} is not one)")
        return list(view.db.recurring.iter())


def get_recurring(db: Database, caller: Identity, recurring_id: int) -> Recurring:
    with db.read() as view:
        if not is_admin(view.db, caller):
            raise NotAuthorized(f"recurring: only an admin may read this ({caller} is not one)")
        row: Recurring | None = view.db.recurring.id.find(recurring_id)
    if row is None:
        raise RecurringNotFound(recurring_id)
    return row
