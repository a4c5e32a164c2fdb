"""The owner's tools and any stored time (issue 13, defect 5): `tasks list`, `tasks show`, `sql`
and `log` show a time a datetime cannot hold (stored by an older stdbmod, or computed by a
module) instead of failing with an internal OverflowError; and the CLI's own doors (`call`
arguments, SQL literals) refuse such a time as the server does."""

from __future__ import annotations

import msgspec

from stdbmod import Database
from stdbmod.codec import msgpack_encoder
from stdbmod.keys import encode_key
from stdbmod.local.modspec import RETRY_SPEC, load_module
from stdbmod.runtime import spaces
from stdbmod.types import Timestamp

from .conftest import Invoke, as_json

FAR = 2**62  # microseconds: year 148,108
BEFORE = -(2**62)


def _store_extreme_times(data: str) -> None:
    """Task 1's run_after and created_at set to times outside years 1 to 9999, written under the
    runtime (no reducer takes them any more)."""
    with Database.open(data, load_module(RETRY_SPEC).module) as db:
        with db.read() as v:
            task = v.db.task.id.find(1)
        w = db.storage.begin_write()
        changed = msgspec.structs.replace(task, run_after=Timestamp(FAR), created_at=Timestamp(BEFORE))
        w.put(spaces.rows("task"), encode_key((1,)), msgpack_encoder.encode(changed))
        w.commit()


def test_tools_show_any_stored_time(invoke: Invoke, retry_dir: str) -> None:
    invoke("call", "--data", retry_dir, "submit", '"email"', "null", '{"to": 1}')
    _store_extreme_times(retry_dir)
    far, before = Timestamp(FAR).isoformat(), Timestamp(BEFORE).isoformat()
    assert far.startswith("+148108-") and before.startswith("-144169-")
    listed = invoke("tasks", "list", "--data", retry_dir).stdout
    assert "email" in listed and "+148108" in listed
    shown = invoke("tasks", "show", "--data", retry_dir, "1").stdout
    assert far in shown and before in shown
    assert as_json(invoke("tasks", "show", "--data", retry_dir, "1", "--json"))["run_after"] == FAR
    rows = invoke("sql", "--data", retry_dir, "SELECT id, run_after, created_at FROM task").stdout
    assert "+148108" in rows and "-144169" in rows
    assert as_json(invoke("sql", "--data", retry_dir, "SELECT run_after FROM task", "--json")) == [{"run_after": FAR}]
    invoke("log", "--data", retry_dir)


def test_the_cli_refuses_times_outside_years_1_to_9999(invoke: Invoke, retry_dir: str) -> None:
    r = invoke("call", "--data", retry_dir, "submit", '"email"', "null", "null", "null", "null", str(FAR), code=2)
    assert "years 1 to 9999" in r.stderr
    r = invoke("call", "--data", retry_dir, "submit", '"email"', "null", "null", "null", "null", '"9999-12-31T23:59:59-01:00"', code=2)
    assert "years 1 to 9999" in r.stderr
    invoke("call", "--data", retry_dir, "submit", '"email"')
    r = invoke("sql", "--data", retry_dir, f"UPDATE task SET run_after = {FAR} WHERE id = 1", code=2)
    assert "is not a Timestamp" in r.stderr
    assert as_json(invoke("tasks", "show", "--data", retry_dir, "1", "--json"))["run_after"] < Timestamp.MAX_MICROS
