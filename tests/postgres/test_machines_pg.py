"""The runtime's Hypothesis machines (the bank model and the whole retry lifecycle) on
PostgreSQL, with fewer examples than on LMDB: each database is a fresh schema, reopened as a new
`PostgresStorage` (a new set of connections) by the machines' reopen rule."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings

from stdbmod.storage.postgres import PostgresStorage
from tests.postgres import server
from tests.retry.test_retry_machine import RetryMachine
from tests.runtime.test_machine import BankMachine

server.require_module()


class OnPostgres:
    """Mixed into a machine: its databases are schemas, dropped at teardown."""

    schemas: dict[str, str]

    def where(self, name: str) -> Any:
        if not hasattr(self, "schemas"):
            self.schemas = {}
        schema = self.schemas.setdefault(name, server.new_schema())
        return PostgresStorage(server.DSN, schema=schema, durable=False, readers=2)

    def teardown(self) -> None:
        try:
            super().teardown()  # type: ignore[misc]
        finally:
            for schema in self.schemas.values():
                server.drop_schema(schema)


class PgBankMachine(OnPostgres, BankMachine):
    pass


class PgRetryMachine(OnPostgres, RetryMachine):
    pass


PgBankMachine.TestCase.settings = settings(max_examples=12, stateful_step_count=30, deadline=None)
PgRetryMachine.TestCase.settings = settings(
    max_examples=8, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
TestBankMachineOnPostgres = PgBankMachine.TestCase
TestRetryMachineOnPostgres = PgRetryMachine.TestCase
