"""`ctx.db` and `ctx.db.<table>`: the attribute-per-table and attribute-per-index views over the
table handles (runtime/tables.py).

Interpreted in the optional compiled build, where `TableHandle` is a native class: these answer
unknown attributes (`__getattr__`, keeping what they made as instance attributes), which a class
derived from a native one can do only when it is not compiled itself.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from ..errors import NoSuchAttribute, NoSuchTable
from ..schema import TableDef
from .tables import BTreeIndex, TableHandle, UniqueColumn
from .transaction import TxView

R = TypeVar("R", bound=msgspec.Struct)  # a table's row type


class Columns(TableHandle[R]):
    """The handle `ctx.db.<table>` gives: a `TableHandle` whose index accessors are attributes,
    each made on first use and kept as an instance attribute. (Set with `object.__setattr__`:
    derived from a native class, an instance has a dict but no `__dict__` attribute.)"""

    def __getattr__(self, name: str) -> Any:
        t = self._t
        if name == t.primary_key:
            assert t.pk_index is not None
            acc: Any = UniqueColumn(self, t.pk_index, primary=True)
        elif name in t.indexes:
            ix = t.indexes[name]
            acc = UniqueColumn(self, ix) if ix.unique else BTreeIndex(self, ix)
        else:
            raise NoSuchAttribute(f"table {t.name} has no column or index {name!r} with an index on it")
        object.__setattr__(self, name, acc)
        return acc


class DbView:
    """`ctx.db`: one attribute per table."""

    def __init__(self, view: TxView, tables: dict[str, TableDef]) -> None:
        self._view = view
        self._tables = tables
        self._handles: list[TableHandle[Any]] = []

    def __getattr__(self, name: str) -> Columns[Any]:
        try:
            table = self._tables[name]
        except KeyError:
            raise NoSuchTable(f"no table named {name!r}") from None
        handle: Columns[Any] = Columns(self._view, table)
        self.__dict__[name] = handle
        self._handles.append(handle)
        return handle

    def rebind(self, view: TxView) -> None:
        """Point this view and the handles made so far at another transaction. The writer keeps
        one DbView for all its calls (they run one at a time): building handles and accessors
        afresh for every call cost more than many a reducer's own work."""
        if view is self._view:  # the writer's jobs share one Transaction (Transaction.reset)
            return
        self._view = view
        for handle in self._handles:
            handle._view = view

    def table(self, name: str) -> Columns[Any]:
        return getattr(self, name)  # type: ignore[no-any-return]

    def of(self, row_type: type[R]) -> Columns[R]:
        """The table of `row_type` rows, typed: `ctx.db.of(Task).insert(task)` takes and returns
        a `Task` for editors and type checkers (`ctx.db.task` is the same handle, untyped). A row
        type declared as several tables is the first of them; name the others."""
        for table in self._tables.values():
            if table.row_type is row_type:
                return getattr(self, table.name)  # type: ignore[no-any-return]
        raise NoSuchTable(f"no table holds {row_type.__name__} rows")
