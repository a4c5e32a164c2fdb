"""`Database.submit_typed_to`: a call's outcome settled into the caller's own object (the HTTP
server's event loop has one), after the commit, on the writer thread; a procedure's passed on."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from stdbmod import Database, SenderError
from stdbmod.retry import create_retry_module
from stdbmod.runtime.writer import Outcome
from tests.conftest import ALICE

from .procedure_module import mod


class Box:
    """An outcome that records what it was told, on which thread, and what was committed then."""

    def __init__(self, db: Database, table: str = "note") -> None:
        self.db = db
        self.table = table
        self.told: list[tuple[str, Any]] = []
        self.rows_then: list[Any] | None = None
        self.thread: int | None = None
        self.settled = threading.Event()

    def done(self) -> bool:
        return self.settled.is_set()

    def set_result(self, value: Any) -> None:
        self._tell("result", value)

    def set_exception(self, error: BaseException) -> None:
        self._tell("error", error)

    def _tell(self, how: str, what: Any) -> None:
        self.thread = threading.get_ident()
        with self.db.read() as view:
            self.rows_then = list(getattr(view.db, self.table).iter())
        self.told.append((how, what))
        self.settled.set()


@pytest.fixture
def db(make_db: Callable[..., Database]) -> Database:
    return make_db(mod)


def _settled(box: Box) -> tuple[str, Any]:
    assert box.settled.wait(30)
    assert len(box.told) == 1  # once
    return box.told[0]


def test_the_outcome_is_settled_after_the_commit_on_the_writer_thread(db: Database) -> None:
    box = Box(db)
    outcome: Outcome = box
    db.submit_typed_to("add", ("hello",), outcome, sender=ALICE)
    how, value = _settled(box)
    assert (how, value) == ("result", 1)
    assert [n.text for n in box.rows_then or []] == ["hello"]  # the commit was visible when it was told
    assert box.thread != threading.get_ident()


def test_a_refused_call_is_an_exception_and_writes_nothing(make_db: Callable[..., Database]) -> None:
    db = make_db(create_retry_module().module)
    box = Box(db, "task")
    db.submit_typed_to("enqueue", ("email", "mail", {"to": "a"}), box, sender=ALICE)  # ALICE has no role
    how, error = _settled(box)
    assert how == "error" and isinstance(error, SenderError) and "worker role" in str(error)
    assert box.rows_then == []


def test_a_procedure_passes_its_outcome_on(db: Database) -> None:
    box = Box(db)
    db.submit_typed_to("note_twice", ("hi",), box, sender=ALICE)
    assert _settled(box) == ("result", [1, 2])
    failed = Box(db)
    db.submit_typed_to("refuse", ("sender",), failed, sender=ALICE)
    how, error = _settled(failed)
    assert how == "error" and isinstance(error, SenderError) and str(error) == "refused outright"
