"""One error tree for the whole of stdbmod.

Every error stdbmod raises is a `StdbError`. Each class also subclasses the builtin it is closest
to (as msgspec's `DecodeError` is a `ValueError`) and carries the HTTP status it answers with
(`status_code`): that is the one error-to-status mapping, so the HTTP layer needs a single
handler (http/errors.py) and the CLI a single translation (exit 1 for a reducer's refusal or
crash, 2 for the rest). One rule sits on top, at SpacetimeDB's own call route
(`POST /v1/database/{db}/call/{reducer}`): a reducer's refusal or crash is its 530 there.
"""

from __future__ import annotations


class StdbError(Exception):
    """Root of every error stdbmod raises."""

    status_code: int = 500


# --- Errors a reducer call reports to its caller -----------------------------------------------


class SenderError(StdbError):
    """Raised by a reducer to refuse a call: the transaction rolls back and the caller sees the
    message (SpacetimeDB's `SenderError` / `Err(String)`). A bad request, unless a subclass says
    otherwise."""

    status_code = 400


class ReducerFailed(StdbError):
    """A reducer raised something other than `SenderError`: everything rolled back, the caller sees
    a generic message and the traceback went to the database log."""

    status_code = 500
    generic_message = "The instance encountered a fatal error."

    def __init__(self, reducer: str) -> None:
        super().__init__(self.generic_message)
        self.reducer = reducer


class ConstraintViolation(SenderError, ValueError):
    """A write broke a table constraint. A `SenderError`, so the caller sees which one."""

    status_code = 409


class UniqueConstraintViolation(ConstraintViolation):
    def __init__(self, table: str, column: str, value: object) -> None:
        super().__init__(f"duplicate value {value!r} for unique column {table}.{column}")
        self.table, self.column, self.value = table, column, value


class RowNotFound(SenderError, LookupError):
    """`update` of a row whose primary key is not in the table."""


class KeyTooLarge(SenderError, ValueError):
    """An indexed value encodes to a key over LMDB's 511-byte limit."""

    status_code = 400


class AutoIncOverflow(ConstraintViolation):
    pass


# --- Errors in how a call was made ---------------------------------------------------------------


class CallError(StdbError):
    """The call itself is wrong; no reducer ran."""

    status_code = 400


class ArgumentError(CallError, ValueError):
    """The arguments do not decode to the reducer's parameter types, or the arity is wrong."""


class NoSuchReducer(CallError, LookupError):
    """No reducer the caller may call has this name (a scheduled reducer counts as none for
    anyone but the owner, as in SpacetimeDB 2.x)."""

    status_code = 404


class LifecycleCall(CallError):
    """A direct call of a lifecycle reducer (init, client_connected, client_disconnected): 400
    with SpacetimeDB's message, which names its `Lifecycle` variant."""

    status_code = 400
    VARIANTS = {"init": "Init", "client_connected": "OnConnect", "client_disconnected": "OnDisconnect"}

    def __init__(self, kind: str) -> None:
        super().__init__(f"can't directly call special {self.VARIANTS.get(kind, kind)} lifecycle reducer")
        self.kind = kind


class ScheduleTooFar(ConstraintViolation):
    """A schedule row due further ahead than SpacetimeDB's scheduler accepts (64^6 - 1 ms, about
    2.18 years): the insert or update fails, as SpacetimeDB's `ScheduleError::DelayTooLong`."""

    status_code = 400


class NoSuchTable(CallError, LookupError):
    status_code = 404


class PermissionDenied(CallError, PermissionError):
    status_code = 403


# --- Values stdbmod's own API refuses ------------------------------------------------------------


class ReadOnlyError(StdbError, PermissionError):
    """A write outside a reducer (a view or a read-only context tried to change a table)."""

    status_code = 403


class InvalidValue(StdbError, ValueError):
    """A value stdbmod cannot take: an identity's hex, a time outside the 64-bit microsecond
    range, an integer outside the indexable range, a filter longer than its index..."""

    status_code = 400


class WrongType(StdbError, TypeError):
    """A value of the wrong type: a row of another table's type, a time that is not integer
    microseconds..."""

    status_code = 400


class NoSuchAttribute(StdbError, AttributeError):
    """`ctx.<name>` or `ctx.db.<table>.<name>` names nothing there."""


# --- Errors of module declarations and schemas ---------------------------------------------------


class SchemaError(StdbError, TypeError):
    """A module declares something stdbmod cannot store (bad column type, two primary keys...)."""


class SchemaMismatch(StdbError):
    """The stored schema and the module's differ in a way no migration rule covers."""

    status_code = 409


# --- Storage -------------------------------------------------------------------------------------


class StorageError(StdbError, OSError):
    """The storage layer failed; the call that met it was not committed."""

    status_code = 503


class TransientStorageError(StorageError):
    """The transaction did not commit and running it again may succeed: a serialization failure,
    a deadlock, or a database connection lost before the commit was sent (PostgreSQL)."""


class DatabaseAlreadyOpen(StorageError):
    status_code = 409


class DatabaseNotFound(StorageError, FileNotFoundError):
    status_code = 404


class StoragePanic(StorageError):
    """LMDB reported MDB_PANIC: the environment is unusable and the process must restart."""


class DatabaseClosed(StorageError):
    pass
