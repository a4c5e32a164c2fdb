"""`Module`: the registry a module author fills with decorators.

    mod = Module("chat")

    @mod.table(public=True)
    class Message(msgspec.Struct): ...

    @mod.reducer
    def send(ctx: ReducerContext, text: str) -> None: ...

A module can `include` another (the task-retry module, say) so that both share one database and
one transaction per call; their `init` hooks all run, in inclusion order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from .errors import SchemaError
from .schema import Index, ReducerDef, ReducerKind, TableDef, build_reducer, build_table

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T", bound=type)


@dataclass(frozen=True)
class Reader:
    """Who besides the owner may read private tables (SQL, subscriptions): `check(db, identity)`
    runs in a read snapshot (`db` as `ctx.db`); `who` names them in refusals."""

    check: Callable[[Any, Any], bool]
    who: str
    tables: frozenset[str] | None = None  # None: every private table

    def covers(self, table: str) -> bool:
        return self.tables is None or table in self.tables


class Module:
    def __init__(self, name: str) -> None:
        self.name = name
        self.tables: dict[str, TableDef] = {}
        self.reducers: dict[str, ReducerDef] = {}
        self.lifecycle: dict[str, list[ReducerDef]] = {"init": [], "client_connected": [], "client_disconnected": []}
        self.included: list[Module] = []
        self.readers: list[Reader] = []
        self._by_type: dict[type, TableDef] = {}

    # --- tables --------------------------------------------------------------------------------

    def table(
        self,
        row_type: T | None = None,
        *,
        name: str | None = None,
        public: bool = False,
        indexes: Mapping[str, tuple[str, ...] | Index] | None = None,
        scheduled: str | Callable[..., Any] | None = None,
        event: bool = False,
        cached: bool = False,
    ) -> Any:
        """Declare a table (`@mod.table` or `@mod.table(public=True, ...)`).

        `scheduled` names the reducer (or is the function) its rows fire. `event=True`: an event
        table (SpacetimeDB 2.x), whose rows exist only inside the transaction that inserts them:
        subscribers and the commit log get them as inserts, the tables never keep them.
        `cached=True`: a small table read far more often than written (roles, settings); the
        writer keeps the rows reducers read by key (find, contains) from one call to the next,
        until the table is written, a call fails or another writer commits (docs/performance.md)."""

        def register(cls: T) -> T:
            target = scheduled if scheduled is None or isinstance(scheduled, str) else scheduled.__name__
            self._add_table(build_table(cls, name=name, public=public, indexes=indexes, scheduled=target, event=event, cached=cached))
            return cls

        return register(row_type) if row_type is not None else register

    def _add_table(self, table: TableDef) -> None:
        if table.name in self.tables:
            raise SchemaError(f"module {self.name} declares table {table.name} twice")
        self.tables[table.name] = table
        self._by_type.setdefault(table.row_type, table)

    # --- reducers ------------------------------------------------------------------------------

    @overload
    def reducer(self, func: F) -> F: ...
    @overload
    def reducer(self, *, name: str | None = None, spread: bool = False) -> Callable[[F], F]: ...

    def reducer(self, func: F | None = None, *, name: str | None = None, spread: bool = False) -> Any:
        """Declare a client-callable reducer (or the target of a schedule table).

        `spread=True`: the function takes one Struct after the context, and the reducer's
        parameters are that Struct's fields, in order, with its defaults. Callers pass the
        fields as arguments (a JSON array over HTTP and the CLI), or from Python one instance."""

        def register(f: F) -> F:
            self._add_reducer(build_reducer(f, "reducer", name, self._localns(), spread=spread))
            return f

        return register(func) if func is not None else register

    @overload
    def procedure(self, func: F) -> F: ...
    @overload
    def procedure(self, *, name: str | None = None) -> Callable[[F], F]: ...

    def procedure(self, func: F | None = None, *, name: str | None = None) -> Any:
        """Declare a procedure (SpacetimeDB 2.x): `(ctx: ProcedureContext, args...)`, run outside
        any transaction on the procedure pool, so it may do I/O; `ctx.with_tx(fn)` writes.
        Called as a reducer is, or fired by a schedule table (its row deleted first: at most
        once). See runtime/procedures.py and docs/modules.md."""

        def register(f: F) -> F:
            r = build_reducer(f, "reducer", name, self._localns())
            r.procedure = True
            self._add_reducer(r)
            return f

        return register(func) if func is not None else register

    def _add_reducer(self, r: ReducerDef) -> None:
        if r.name in self.reducers:
            raise SchemaError(f"module {self.name} declares reducer {r.name} twice")
        self.reducers[r.name] = r

    def _lifecycle(self, kind: ReducerKind, func: F) -> F:
        self.lifecycle[kind].append(build_reducer(func, kind, None, self._localns()))
        return func

    def init(self, func: F) -> F:
        """Runs once, when the database is created, with `ctx.sender` = the publisher."""
        return self._lifecycle("init", func)

    def client_connected(self, func: F) -> F:
        return self._lifecycle("client_connected", func)

    def client_disconnected(self, func: F) -> F:
        return self._lifecycle("client_disconnected", func)

    def _localns(self) -> dict[str, Any]:
        return {t.row_type.__name__: t.row_type for t in self.tables.values()}

    # --- who reads private tables -----------------------------------------------------------

    def reader(self, who: str, tables: tuple[str, ...] | None = None) -> Callable[[F], F]:
        """Let the identities for which `func(db, identity)` is true read this module's private
        tables (or only `tables`) with SQL and subscriptions, as the owner can (`who` names them
        in refusals):

            @mod.reader("admins")
            def admins_read(db, identity) -> bool:
                return db.admin.identity.contains(identity)
        """

        def register(func: F) -> F:
            self.readers.append(Reader(func, who, None if tables is None else frozenset(tables)))
            return func

        return register

    # --- composition ---------------------------------------------------------------------------

    def include(self, other: Module) -> None:
        """Add another module's tables, reducers and lifecycle hooks to this one."""
        for t in other.tables.values():
            self._add_table(t)
        for r in other.reducers.values():
            self._add_reducer(r)
        for kind, hooks in other.lifecycle.items():
            self.lifecycle[kind].extend(hooks)
        self.readers.extend(other.readers)
        self.included.append(other)

    def lifecycle_kind(self, name: str) -> str | None:
        """The lifecycle kind `name` calls (a kind's own name or a hook's function name), if any."""
        if name in self.lifecycle:
            return name
        return next((kind for kind, hooks in self.lifecycle.items() if any(h.name == name for h in hooks)), None)

    def table_for(self, row_type: type) -> TableDef:
        try:
            return self._by_type[row_type]
        except KeyError:
            raise SchemaError(f"{row_type.__name__} is not a table of module {self.name}") from None

    def finalize(self) -> None:
        """Check cross-references (schedule tables name existing reducers); mark scheduled ones."""
        for t in self.tables.values():
            if t.scheduled is None:
                continue
            r = self.reducers.get(t.scheduled)
            if r is None:
                raise SchemaError(f"schedule table {t.name} names unknown reducer {t.scheduled}")
            if len(r.params) != 1:
                raise SchemaError(f"scheduled reducer {r.name} must take exactly one row of {t.name}")
            r.kind = "scheduled"

    def describe(self) -> dict[str, Any]:
        return {
            "module": self.name,
            "tables": [t.describe() for t in self.tables.values()],
            "reducers": [r.describe() for r in self.reducers.values()]
            + [r.describe() for hooks in self.lifecycle.values() for r in hooks],
        }
