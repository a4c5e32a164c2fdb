"""One spelling of each concept: the enqueue options are `NewTask`'s fields wherever they appear,
the bounds come from limits.py wherever they are enforced or described, and the built-in
instance is made on first use."""

from __future__ import annotations

import inspect
import subprocess
import sys
from typing import Any

import msgspec
import pytest

from stdbmod import Database, TimeDuration
from stdbmod.http import wire
from stdbmod.retry import InvalidArgument, NewTask, RetryModule, limits, queries
from stdbmod.retry.reducers import declare_reducers
from stdbmod.retry.tables import TaskStatus, UniqueSpec
from stdbmod.retry.transitions import checked
from tests.retry.support import ADMIN, WORKER

FIELDS = list(NewTask.__struct_fields__)


def test_the_enqueue_options_are_new_tasks_fields_everywhere(rm: RetryModule) -> None:
    for reducer in ("enqueue", "submit"):
        assert [p["name"] for p in rm.module.reducers[reducer].describe()["params"]] == FIELDS
    assert list(wire.EnqueueBody.__struct_fields__) == FIELDS  # the HTTP body, field for field
    options = [p.name for p in inspect.signature(rm.enqueue_in).parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert ["job_type", "payload", *options] == ["job_type", "payload", *(f for f in FIELDS if f not in ("job_type", "payload"))]


def test_the_defaults_pass_the_checks_they_skip() -> None:
    # transitions.checked puts a default in place of None without checking it
    assert limits.check_name("queue", limits.DEFAULT_QUEUE) == limits.DEFAULT_QUEUE
    assert limits.check_int("max_attempts", limits.DEFAULT_MAX_ATTEMPTS, 1, limits.MAX_ATTEMPTS_LIMIT)
    assert limits.check_int("backoff_seconds", limits.DEFAULT_BACKOFF_SECONDS, 0, limits.MAX_BACKOFF_SECONDS)


def test_enqueue_takes_the_fields_or_one_new_task(db: Database) -> None:
    when = db.clock.now()
    by_fields = db.call("enqueue", "email", "q", {"to": "a"}, 3, 7, when, 2, "k1", sender=WORKER)
    by_spec = db.call("enqueue", NewTask("email", "q", {"to": "a"}, 3, 7, when, 2, "k2"), sender=WORKER)
    same = ("queue", "job_type", "payload", "max_attempts", "backoff_seconds", "run_after", "priority")
    assert [getattr(by_fields, f) for f in same] == [getattr(by_spec, f) for f in same]
    assert db.call("submit", NewTask("email"), sender=ADMIN).queue == limits.DEFAULT_QUEUE
    with pytest.raises(InvalidArgument, match="priority must be an integer"):
        db.call("enqueue", NewTask("email", priority=2**40), sender=WORKER)


def test_every_enqueue_option_reaches_its_column(db: Database) -> None:
    """`checked` and `create_or_existing` take a NewTask apart by position
    (retry/transitions.py): each option, set to a value no other has, lands in its own column."""
    when = db.clock.now() + TimeDuration.from_seconds(60)
    spec = NewTask(
        job_type="email", queue="q", payload={"to": "a"}, max_attempts=3, backoff_seconds=7, run_after=when, priority=2,
        idempotency_key="k1", max_backoff_seconds=90, backoff_jitter=0.25, partition_key="p1", timeout_seconds=11,
        unique=UniqueSpec(["job_type", "payload", "queue"], 600, [TaskStatus.QUEUED, TaskStatus.RUNNING, TaskStatus.COMPLETED]),
    )  # fmt: skip
    assert checked(spec) == spec  # every value valid: none is changed, none moved
    task = db.call("enqueue", spec, sender=WORKER)
    assert (task.job_type, task.queue, task.payload, task.max_attempts, task.backoff_seconds) == ("email", "q", {"to": "a"}, 3, 7)
    assert (task.run_after, task.priority, task.neg_priority, task.idempotency_key) == (when, 2, -2, "k1")
    assert (task.max_backoff_seconds, task.backoff_jitter, task.partition_key, task.timeout_seconds) == (90, 0.25, "p1", 11)
    assert task.unique_key is not None


def test_the_http_bounds_are_the_limits() -> None:
    schema: Any = msgspec.json.schema_components([wire.EnqueueBody, wire.ListQuery, wire.ClaimManyBody, wire.HistoryQuery])[1]
    enqueue = schema["EnqueueBody"]["properties"]
    assert enqueue["job_type"]["maxLength"] == limits.MAX_NAME_CHARS
    assert enqueue["max_attempts"]["anyOf"][0]["maximum"] == limits.MAX_ATTEMPTS_LIMIT
    assert enqueue["priority"]["maximum"] == limits.PRIORITY_LIMIT
    assert schema["ListQuery"]["properties"]["per_page"]["maximum"] == limits.MAX_PER_PAGE
    assert schema["ClaimManyBody"]["properties"]["limit"]["maximum"] == limits.MAX_BATCH
    assert schema["HistoryQuery"]["properties"]["limit"]["maximum"] == limits.MAX_HISTORY_READ


def test_the_module_refuses_a_page_past_the_same_limit(db: Database) -> None:
    assert queries.list_tasks(db, ADMIN, per_page=limits.MAX_PER_PAGE).per_page == limits.MAX_PER_PAGE
    with pytest.raises(InvalidArgument, match=f"per_page must be an integer from 1 to {limits.MAX_PER_PAGE}"):
        queries.list_tasks(db, ADMIN, per_page=limits.MAX_PER_PAGE + 1)


def test_reducers_take_the_handler_mapping_not_the_instance(db: Database) -> None:
    """declare_reducers needs a Module and a mapping: the reducers module never imports the
    RetryModule class (no retry_module <-> reducers circle)."""
    assert list(inspect.signature(declare_reducers).parameters) == ["mod", "handlers"]
    import stdbmod.retry.reducers as reducers

    assert "retry_module" not in inspect.getsource(reducers)


def test_the_built_in_instance_is_made_on_first_use() -> None:
    code = (
        "import stdbmod.retry as r, stdbmod.retry.retry_module as m\n"
        "assert len(m._owners) == 0, 'made at import'\n"
        "assert r.default_retry is r.default_retry and r.default_module is r.default_retry.module\n"
        "assert len(m._owners) == 1\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
