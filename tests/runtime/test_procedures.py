"""Procedures: outside the writer, their own logged transactions, reads, logs; called in process,
over HTTP and the CLI; from schedule tables at most once, also across a crash."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from stdbmod import At, Database, Identity, ReducerFailed, SenderError
from stdbmod.errors import NoSuchReducer
from tests.conftest import ALICE, OWNER

from .procedure_module import Fire, mod

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def db(make_db: Callable[..., Database]) -> Database:
    return make_db(mod)


def _notes(db: Database) -> list[str]:
    with db.read() as view:
        return [n.text for n in view.db.note.iter()]


def test_a_procedure_opens_logged_transactions_reads_and_logs(db: Database) -> None:
    assert db.call("note_twice", "hi", sender=ALICE) == [1, 2]
    assert _notes(db) == ["hi", "hi!"]
    records = db.commit_log()[-2:]
    assert [(r.kind, r.reducer, Identity(r.sender)) for r in records] == [("procedure", "note_twice", ALICE)] * 2
    line = db.logs(last=1)[0]
    assert (line.level, line.reducer, line.message) == ("debug", "note_twice", "saw 1 notes")
    described = next(r for r in db.describe()["reducers"] if r["name"] == "note_twice")
    assert described == {"name": "note_twice", "kind": "reducer", "params": [{"name": "text", "type": "str", "required": True}], "procedure": True}


def test_a_procedures_failures(db: Database) -> None:
    with pytest.raises(SenderError, match="no thanks"):
        db.call("refuse", "tx", sender=ALICE)
    assert _notes(db) == []  # the failed with_tx rolled back
    with pytest.raises(SenderError, match="refused outright"):
        db.call("refuse", "sender", sender=ALICE)
    with pytest.raises(ReducerFailed):
        db.call("refuse", "crash", sender=ALICE)
    lines = db.logs()
    assert [(x.level, x.reducer) for x in lines] == [("error", "refuse"), ("error", "refuse"), ("panic", "refuse")]
    assert [x.message for x in lines[:2]] == ["no thanks", "refused outright"] and "KeyError: 'secret'" in lines[2].message


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server


def test_a_procedure_blocked_on_a_socket_holds_nothing_other_calls_need(db: Database, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    waiting = db.submit("wait_on", port, sender=ALICE)
    conn, _ = listener.accept()  # the procedure is connected and now blocks in recv()
    with conn:
        for i in range(20):  # the writer keeps committing meanwhile
            assert db.call("add", f"n{i}", sender=OWNER) == i + 1
        assert not waiting.done()
        conn.sendall(b"pong")
        assert waiting.result(timeout=30) == "pong"
    assert _notes(db)[-1] == "got pong" and len(_notes(db)) == 21


def test_a_scheduled_procedure_runs_after_its_row_is_gone_and_only_the_owner_calls_it_directly(
    db: Database, tmp_path: Path
) -> None:
    marker = tmp_path / "runs"
    row_id = db.call("schedule_fire", str(marker), False, sender=ALICE)
    assert db.run_due() == 1
    assert marker.read_text() == f"run {row_id} row_there=False\n"
    assert _notes(db) == [f"fired {row_id}"]
    deleting, firing = db.commit_log()[-2:]
    assert (deleting.kind, deleting.reducer, [c.table for c in deleting.changes]) == ("scheduled", "fire", ["fire"])
    assert firing.kind == "procedure" and Identity(firing.sender) == db.identity
    assert db.run_due() == 0
    row = Fire(99, At(db.clock.now()), str(marker))
    with pytest.raises(NoSuchReducer):
        db.call("fire", row, sender=ALICE)
    db.call("fire", row, sender=OWNER)
    assert marker.read_text().splitlines()[-1] == "run 99 row_there=False"


def test_a_scheduled_procedure_runs_at_most_once_across_a_crash(tmp_path: Path) -> None:
    path, marker = tmp_path / "db", tmp_path / "runs"
    Database.create(path, mod, owner=OWNER).close()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-m", "tests.runtime.procedure_module", str(path), str(marker)], env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not (marker.exists() and marker.read_text()):  # the procedure started (and hangs)
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    with Database.open(path, mod) as again:
        assert again.run_due() == 0  # its row was deleted before it ran: nothing to run again
        with again.read() as view:
            assert view.db.fire.count() == 0 and view.db.note.count() == 0
    assert marker.read_text().count("run ") == 1


def test_procedures_over_http_and_the_cli(tmp_path: Path) -> None:
    from tests.cli.conftest import stdbmod
    from tests.http.servers import bearer, new_identity, start_server

    home, data = tmp_path / "home", str(tmp_path / "procs")
    p = stdbmod(home, "publish", "--data", data, "tests.runtime.procedure_module")
    assert p.returncode == 0, p.stderr
    p = stdbmod(home, "call", "--data", data, "note_twice", '"cli"')
    assert p.returncode == 0 and json.loads(p.stdout) == [1, 2], p
    p = stdbmod(home, "describe", "--data", data)
    assert "note_twice(text: str)  (a procedure)" in p.stdout and "fire (scheduled procedure)" in p.stdout, p.stdout
    p = stdbmod(home, "call", "--data", data, "refuse", '"sender"')
    assert (p.returncode, p.stderr) == (1, "Error: refused outright\n")
    server = start_server(Path(data), home=home)
    try:
        _, token = new_identity(server.base)
        r = httpx.post(f"{server.base}/v1/database/procs/call/note_twice", json={"text": "http"}, headers=bearer(token))
        assert (r.status_code, r.json()) == (200, [3, 4])
        r = httpx.post(f"{server.base}/v1/database/procs/call/refuse", json=["tx"], headers=bearer(token))
        assert (r.status_code, r.json()) == (530, {"error": "no thanks"})
    finally:
        assert server.stop() == 0


def test_close_waits_a_while_for_a_stuck_procedure_which_then_fails(
    make_db: Callable[..., Database], listener: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stdbmod.runtime import procedures

    monkeypatch.setattr(procedures, "CLOSE_WAIT", 0.2)
    db = make_db(mod)
    stuck = db.submit("wait_on", listener.getsockname()[1], sender=ALICE)
    conn, _ = listener.accept()
    with conn:
        db.close()  # returns although the procedure still waits on its socket
        conn.sendall(b"late")
        with pytest.raises(ReducerFailed):  # its transaction finds the database closed
            stuck.result(timeout=30)
