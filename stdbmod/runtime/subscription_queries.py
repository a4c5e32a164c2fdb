"""What one subscribed query holds, and how one commit changes it.

A query over one table holds nothing: a commit's deleted and inserted rows of that table are
filtered by its WHERE, and that is the update. A query over a join (`SELECT s.* FROM a JOIN b ON
a.x = b.y WHERE ...`) cannot be answered from the changed rows alone (a change to `b` adds or
removes rows of `a`), and the database has moved on by the time the update is computed, so it
keeps its own copy of both sides (only rows that pass the WHERE terms on their own side), indexed
by the join key, and for every row of the `*` side how many pairs hold it in the result. A commit
is applied to that copy side by side, deletes first; the update is the difference in the result
before and after. The result is a set: a row with several partners is in it (and delivered)
once.

Rows here are column-value tuples; `Changes` maps a table to its (deleted, inserted) rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .dbview import DbView
from .sql_plan import Bound, Select, Values

Changes = dict[str, tuple[list[Values], list[Values]]]
Delta = tuple[list[Values], list[Values]]  # (deleted rows, inserted rows) of the query's result


def _passes(bounds: list[Bound], row: Values) -> bool:
    for b in bounds:
        v = row[b.col[1]]
        if v is None or b.value is None:
            return False
        try:
            if not b.op(v, b.value):
                return False
        except TypeError:
            return False
    return True


class QueryState:
    """One query of one subscription. `initial(view)` reads its rows from a snapshot (and sets up
    what it keeps); `apply(changes)` folds in one commit and answers the query's delta."""

    def __init__(self, plan: Select) -> None:
        assert plan.star is not None
        self.plan = plan
        self.table = plan.sources[plan.star].table
        self.tables = {s.table.name for s in plan.sources}

    def initial(self, view: DbView) -> list[Values]:
        raise NotImplementedError

    def apply(self, changes: Changes) -> Delta:
        raise NotImplementedError


class TableQuery(QueryState):
    """SELECT * FROM t WHERE ...: the changed rows that match."""

    def initial(self, view: DbView) -> list[Values]:
        from .sql import select_rows

        return select_rows(view, self.plan)

    def apply(self, changes: Changes) -> Delta:
        deleted, inserted = changes.get(self.table.name, ((), ()))
        match = self.plan.matches
        return [r for r in deleted if match((r,))], [r for r in inserted if match((r,))]


class _Side:
    """The rows of one side of a join that pass its own WHERE terms, by primary key and by join key."""

    def __init__(self, plan: Select, index: int, key_position: int) -> None:
        self.table = plan.sources[index].table
        self.pk = self.table.row_id  # the primary key's value (a table without one: the row's hash)
        self.key = key_position
        self.bounds = [b for b in plan.bounds if b.col[0] == index]
        self.by_pk: dict[Any, Values] = {}
        self.by_key: dict[Any, dict[Any, Values]] = {}

    def add(self, row: Values) -> bool:
        if row[self.key] is None or not _passes(self.bounds, row):
            return False
        self.by_pk[self.pk(row)] = row
        self.by_key.setdefault(row[self.key], {})[self.pk(row)] = row
        return True

    def remove(self, row: Values) -> Values | None:
        old = self.by_pk.pop(self.pk(row), None)
        if old is not None:
            group = self.by_key[old[self.key]]
            del group[self.pk(old)]
            if not group:
                del self.by_key[old[self.key]]
        return old

    def partners(self, key: Any) -> Iterable[Values]:
        return self.by_key.get(key, {}).values()


class JoinQuery(QueryState):
    """SELECT s.* FROM a JOIN b ON a.x = b.y WHERE ...: both sides kept, pairs counted."""

    def __init__(self, plan: Select) -> None:
        super().__init__(plan)
        assert plan.join is not None and plan.star is not None
        (_, left), (_, right) = plan.join
        self.sides = (_Side(plan, 0, left), _Side(plan, 1, right))
        self.star = plan.star
        self.support: dict[Any, int] = {}  # primary key of a `*` row -> pairs holding it

    def initial(self, view: DbView) -> list[Values]:
        from .sql import candidate_rows

        for i, side in enumerate(self.sides):
            for row in candidate_rows(view, self.plan, i):
                side.add(row)
        for row in list(self.sides[0].by_pk.values()):
            self._pair(0, row, +1)
        star = self.sides[self.star]
        return [star.by_pk[pk] for pk in self.support]

    def _pair(self, index: int, row: Values, sign: int) -> None:
        """Count (sign +1) or uncount (-1) the pairs `row` of side `index` makes that pass."""
        other = self.sides[1 - index]
        star_pk = self.sides[self.star].pk
        match = self.plan.matches
        for partner in list(other.partners(row[self.sides[index].key])):
            pair = (row, partner) if index == 0 else (partner, row)
            if not match(pair):
                continue
            pk = star_pk(pair[self.star])
            n = self.support.get(pk, 0) + sign
            if n:
                self.support[pk] = n
            else:
                del self.support[pk]

    def apply(self, changes: Changes) -> Delta:
        star = self.sides[self.star]
        touched: dict[Any, Values | None] = {}  # pk -> the `*` row in the result before, or None

        def note(pk: Any) -> None:
            if pk not in touched:
                touched[pk] = star.by_pk.get(pk) if pk in self.support else None

        for phase in ("deletes", "inserts"):
            for i, side in enumerate(self.sides):
                deleted, inserted = changes.get(side.table.name, ((), ()))
                for row in deleted if phase == "deletes" else inserted:
                    self._note_partners(i, row, note)
                    if phase == "deletes":
                        old = side.remove(row)
                        if old is not None:
                            self._note_partners(i, old, note)
                            self._pair(i, old, -1)  # its pairs are with the other side: still there
                    elif side.add(row):
                        self._pair(i, row, +1)
        gone, came = [], []
        for pk, before in touched.items():
            after = star.by_pk.get(pk) if pk in self.support else None
            if before is not None and (after is None or after != before):
                gone.append(before)
            if after is not None and (before is None or after != before):
                came.append(after)
        return gone, came

    def _note_partners(self, index: int, row: Values, note: Any) -> None:
        """Remember, before they change, the result rows `row` can affect: itself if it is on the
        `*` side, else its partners there."""
        if index == self.star:
            note(self.sides[index].pk(row))
            return
        star = self.sides[self.star]
        for partner in list(star.partners(row[self.sides[index].key])):
            note(star.pk(partner))


def state_for(plan: Select) -> QueryState:
    return JoinQuery(plan) if plan.join is not None else TableQuery(plan)
