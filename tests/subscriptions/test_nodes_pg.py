"""Subscriptions on PostgreSQL with several nodes: a subscriber on one node gets the commits made
on another, in the log's one order, with the same property as on one node (initial rows and
updates == the query after each commit). Skipped without a reachable PostgreSQL (failed under CI)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stdbmod import Database, Identity
from stdbmod.examples.bank import bank
from stdbmod.runtime.sql import run_sql
from stdbmod.runtime.subscriptions import Update

from ..postgres import server
from .helpers import Collector, key, rebuild

OWNER = Identity.from_claims("test", "owner")
PEOPLE = [Identity.from_claims("test", f"p{i}") for i in range(4)]
QUERY = "SELECT * FROM account WHERE balance > 10"


@pytest.fixture
def schema() -> Iterator[str]:
    with server.fresh_schema() as name:
        yield name


def _node(schema: str, create: bool = False) -> Database:
    from stdbmod.storage.postgres import PostgresStorage

    storage = PostgresStorage(server.DSN, schema=schema, readers=2)
    return Database.create(storage, bank, owner=OWNER) if create else Database.open(storage, bank)


def test_a_subscriber_gets_the_commits_of_every_node(schema: str) -> None:
    a = _node(schema, create=True)
    b = _node(schema)
    try:
        got = Collector()
        sub = a.subscribe([QUERY], got, sender=OWNER)
        for i, who in enumerate(PEOPLE):
            (b if i % 2 == 0 else a).call("open_account", 5 + 5 * i, sender=who)  # 5, 10, 15, 20
        b.call("transfer", 1, 9, sender=PEOPLE[3])  # made on b: account 1 (5 -> 14) joins, 4 (20 -> 11) stays
        assert got.wait(lambda es: sum(isinstance(e, Update) for e in es) >= 3)
        assert sub.sync()
        offsets = [u.offset for u in got.of(Update)]
        assert offsets == sorted(offsets)
        direct = run_sql(a, QUERY, OWNER)
        assert rebuild(got.events)[QUERY] == {key(bank.tables["account"].row_type(*r)) for r in direct.rows}
        assert {u.sender for u in got.of(Update)} >= {PEOPLE[2], PEOPLE[3]}  # commits of node b among them
    finally:
        a.close()
        b.close()
