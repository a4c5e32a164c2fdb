"""The runtime: databases, transactions, table handles, contexts, the scheduler, the logs."""

from .backup import backup_directory
from .clock import Clock, ManualClock, SystemClock
from .commitlog import CommitRecord, TableChange
from .context import ReducerContext
from .database import Database, ReadView
from .dblog import LogLine
from .procedures import ProcedureContext
from .replay import apply_changes, reexecute, undo_changes
from .scheduler import Scheduler
from .tables import Range

__all__ = [
    "backup_directory",
    "Clock",
    "ManualClock",
    "SystemClock",
    "CommitRecord",
    "TableChange",
    "ReducerContext",
    "Database",
    "ReadView",
    "ProcedureContext",
    "LogLine",
    "apply_changes",
    "reexecute",
    "undo_changes",
    "Scheduler",
    "Range",
]
