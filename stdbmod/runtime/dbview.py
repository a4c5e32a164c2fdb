"""`ctx.db` and `ctx.db.<table>`: the attribute-per-table and attribute-per-index views over the
table handles (runtime/tables.py).

Two ways to make the attributes, one behaviour:
- a read view (`LazyDbView`: an HTTP read, a subscription's evaluation, a replay) makes each handle
  and index accessor on first use (`__getattr__`), as most reads touch one or two tables;
- the writer's view (`DbView.whole`), made once and rebound to every call's transaction, makes
  them all up front, so that its class has no `__getattr__`: CPython sends every attribute read of
  an object whose class defines one through a slower hook, found or not (~26 reads a retry call,
  -2.8% of its instructions). What the writer's view does not hold raises a plain
  AttributeError, which `explain` turns into the read view's error for the call's log.

Interpreted in the optional compiled build, where `TableHandle` is a native class: a class
deriving from a native one can answer unknown attributes only when it is not compiled itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from ..errors import NoSuchAttribute, NoSuchTable
from ..schema import TableDef
from .tables import BTreeIndex, TableHandle, UniqueColumn
from .transaction import TxView

R = TypeVar("R", bound=msgspec.Struct)  # a table's row type


def _accessor(handle: TableHandle[Any], name: str) -> UniqueColumn[Any] | BTreeIndex[Any]:
    """The index accessor `ctx.db.<table>.<name>`: NoSuchAttribute if no index is on `name`."""
    t = handle.definition
    if name == t.primary_key:
        assert t.pk_index is not None
        return UniqueColumn(handle, t.pk_index, primary=True)
    if name in t.indexes:
        ix = t.indexes[name]
        return UniqueColumn(handle, ix) if ix.unique else BTreeIndex(handle, ix)
    raise NoSuchAttribute(f"table {t.name} has no column or index {name!r} with an index on it")


class Columns(TableHandle[R]):
    """The handle `ctx.db.<table>` gives: a `TableHandle` whose index accessors are attributes.
    The writer's are all made with it (`whole`); a read view's on first use (`_LazyColumns`).
    (Set with `object.__setattr__`: derived from a native class, an instance has a dict but no
    `__dict__` attribute.)"""

    @classmethod
    def whole(cls, view: TxView, table: TableDef) -> Columns[Any]:
        handle: Columns[Any] = cls(view, table)
        for name in dict.fromkeys([*([table.primary_key] if table.primary_key else []), *table.indexes]):
            object.__setattr__(handle, name, _accessor(handle, name))  # schema.py refused method names
        return handle

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any: ...


class _LazyColumns(Columns[R]):
    def __getattr__(self, name: str) -> Any:
        acc = _accessor(self, name)
        object.__setattr__(self, name, acc)
        return acc


class DbView:
    """`ctx.db`: one attribute per table. `DbView.whole` makes the writer's; `LazyDbView` a read's."""

    def __init__(self, view: TxView, tables: dict[str, TableDef]) -> None:
        self._view = view
        self._tables = tables
        self._handles: dict[str, Columns[Any]] = {}

    @classmethod
    def whole(cls, view: TxView, tables: dict[str, TableDef]) -> DbView:
        """A view holding every table's handle and every index accessor as attributes."""
        db = cls(view, tables)
        for name, table in tables.items():
            db._keep(name, Columns.whole(view, table))
        return db

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Columns[Any]: ...

    def rebind(self, view: TxView) -> None:
        """Point this view and the handles made so far at another transaction. The writer keeps
        one DbView for all its calls (they run one at a time): building handles and accessors
        afresh for every call cost more than many a reducer's own work."""
        if view is self._view:  # the writer's jobs share one Transaction (Transaction.reset)
            return
        self._view = view
        for handle in self._handles.values():
            handle._view = view

    def table(self, name: str) -> Columns[Any]:
        """The table `name`'s handle: `ctx.db.<name>`, or the one way to reach a table named like
        this class's own methods (`table`, `of`, ...)."""
        handle = self._handles.get(name)
        return self._made(name) if handle is None else handle

    def _made(self, name: str) -> Columns[Any]:
        try:
            table = self._tables[name]
        except KeyError:
            raise NoSuchTable(f"no table named {name!r}") from None
        return self._keep(name, _LazyColumns(self._view, table))

    def _keep(self, name: str, handle: Columns[Any]) -> Columns[Any]:
        self._handles[name] = handle
        if not hasattr(type(self), name):  # an attribute would hide the method
            self.__dict__[name] = handle
        return handle

    def of(self, row_type: type[R]) -> Columns[R]:
        """The table of `row_type` rows, typed: `ctx.db.of(Task).insert(task)` takes and returns
        a `Task` for editors and type checkers (`ctx.db.task` is the same handle, untyped). A row
        type declared as several tables is the first of them; name the others."""
        for table in self._tables.values():
            if table.row_type is row_type:
                return self.table(table.name)
        raise NoSuchTable(f"no table holds {row_type.__name__} rows")


class LazyDbView(DbView):
    """A read's `db`: each table's handle made on first use."""

    def __getattr__(self, name: str) -> Columns[Any]:
        return self._made(name)


def explain(error: Exception) -> Exception:
    """The error a read view would have raised for an attribute the writer's view or one of its
    handles does not hold (NoSuchTable, NoSuchAttribute), else `error` itself."""
    if type(error) is AttributeError and isinstance(error.name, str):
        if isinstance(error.obj, DbView):
            return NoSuchTable(f"no table named {error.name!r}")
        if isinstance(error.obj, Columns):
            try:
                _accessor(error.obj, error.name)
            except NoSuchAttribute as e:
                return e
    return error
