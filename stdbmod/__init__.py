"""stdbmod: a SpacetimeDB-style module runtime over LMDB, with a durable task-retry module."""

from . import _mypyc  # noqa: F401  (first: it refuses a stale compiled build, _mypyc.check)
from .errors import (
    ArgumentError,
    ConstraintViolation,
    NoSuchReducer,
    ReducerFailed,
    RowNotFound,
    SchemaMismatch,
    SenderError,
    StdbError,
    UniqueConstraintViolation,
)
from .module import Module
from .runtime import Database, ManualClock, ProcedureContext, Range, ReducerContext, Scheduler, SystemClock
from .schema import Index, PrimaryKey, Unique
from .types import At, ConnectionId, Every, Identity, ScheduleAt, TimeDuration, Timestamp

__all__ = [
    "Module",
    "Database",
    "ReducerContext",
    "ProcedureContext",
    "Scheduler",
    "ManualClock",
    "SystemClock",
    "Range",
    "PrimaryKey",
    "Unique",
    "Index",
    "Identity",
    "ConnectionId",
    "Timestamp",
    "TimeDuration",
    "At",
    "Every",
    "ScheduleAt",
    "StdbError",
    "SenderError",
    "ReducerFailed",
    "ArgumentError",
    "NoSuchReducer",
    "ConstraintViolation",
    "UniqueConstraintViolation",
    "RowNotFound",
    "SchemaMismatch",
]
