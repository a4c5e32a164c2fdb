"""The retry module's tables, its init hook, and inclusion into another module."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
import pytest

from stdbmod import Database, ManualClock, Module, PrimaryKey, ReducerContext, SenderError
from stdbmod.retry import RetryModule, Task, TaskStatus, create_retry_module, enqueue_in, queries
from tests.retry.support import ADMIN, STRANGER, WORKER

SEED_000_FIELDS = [
    "id", "created_at", "updated_at", "queue", "job_type", "payload", "status", "attempts", "max_attempts",
    "backoff_seconds", "run_after", "claimed_at", "claimed_by", "last_attempted_at", "last_error", "completed_at", "result",
]  # fmt: skip


def test_task_has_seed_000_fields_and_the_extras() -> None:
    fields = {f.name for f in msgspec.structs.fields(Task)}
    assert set(SEED_000_FIELDS) <= fields
    assert {"dead_reason", "lease_holder", "lease_expires_at", "priority", "idempotency_key"} <= fields


def test_tables_and_indexes(rm: RetryModule) -> None:
    tables = rm.module.tables
    assert {"task", "attempt", "retry_admin", "retry_worker", "retry_settings", "attempt_timer", "lease_sweep", "lease_timer"} <= set(tables)
    ix = tables["task"].indexes
    # seed 000: "Indexed on status, queue, run_after, created_at desc": run_after inside the claim
    # indexes (the only walk ordering by it), "desc" as the primary key's order
    for col in ("status", "queue", "created_at", "job_type", "idempotency_key", "unique_key", "error_fingerprint"):
        assert ix[col].columns == (col,)
    assert ix["by_claim_queue"].columns == ("status", "in_module", "queue", "neg_priority", "run_after")
    assert ix["by_claim"].columns == ("status", "in_module", "neg_priority", "run_after")
    assert ix["by_end"].columns == ("status", "finished_at", "lease_expires_at")  # retention and the lease sweep
    # nothing walks the others: each would cost every enqueue (and, led by status, every claim
    # and completion) an entry
    assert set(ix) == {
        "status", "queue", "created_at", "job_type", "idempotency_key", "unique_key", "error_fingerprint",
        "by_claim_queue", "by_claim", "by_end",
    }  # fmt: skip
    assert tables["attempt_timer"].scheduled == "run_attempt"
    assert tables["lease_sweep"].scheduled == "sweep_leases"
    assert tables["lease_timer"].scheduled == "reap_lease"  # legacy, kept so older databases open


def test_init_seeds_the_publisher_as_admin_and_default_settings(db: Database) -> None:
    assert queries.is_admin(db, ADMIN)
    assert not queries.is_admin(db, WORKER) and queries.is_worker(db, WORKER)
    with db.read() as view:
        s = view.db.retry_settings.id.find(0)
    assert (s.history_cap, s.default_lease_seconds) == (1000, 300)


def test_fresh_instances_do_not_share_handlers() -> None:
    a, b = create_retry_module(), create_retry_module()
    a.handler("x")(lambda ctx, p: None)
    assert "x" in a.handlers and "x" not in b.handlers


class Order(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    item: str


def _shop(rm: RetryModule) -> Module:
    shop = Module("shop")
    shop.include(rm.module)
    shop.table(Order)

    @shop.reducer
    def place_order(ctx: ReducerContext, item: str, fail_after: bool) -> int:
        order = ctx.db.order.insert(Order(0, item))
        rm.enqueue_in(ctx, "send_receipt", {"order": order.id})
        enqueue_in(ctx, "audit", {"order": order.id}, priority=5)  # the module-level form
        if fail_after:
            raise SenderError("payment declined")
        return int(order.id)

    return shop


def test_included_module_runs_init_and_enqueues_transactionally(tmp_path: Path) -> None:
    rm = create_retry_module()
    db = Database.create(tmp_path / "shop", _shop(rm), owner=ADMIN, clock=ManualClock(), durable=False)
    try:
        assert queries.is_admin(db, ADMIN)  # the retry module's init ran inside the shop's
        order_id = db.call("place_order", "book", False, sender=STRANGER)  # no role needed
        with pytest.raises(SenderError, match="payment declined"):
            db.call("place_order", "pen", True, sender=STRANGER)
        tasks = queries.list_tasks(db, ADMIN).items
        assert sorted((t.job_type, t.payload["order"], t.status) for t in tasks) == [
            ("audit", order_id, TaskStatus.QUEUED),
            ("send_receipt", order_id, TaskStatus.QUEUED),
        ]
        with db.read() as view:
            assert view.db.order.count() == 1  # the failed call left neither order nor tasks
    finally:
        db.close()


def test_the_default_instance_has_no_handlers(tmp_path: Path) -> None:
    from stdbmod.retry import default_module, default_retry

    assert default_retry.module is default_module and default_retry.handlers == {}
    db = Database.create(tmp_path / "default", default_module, owner=ADMIN, clock=ManualClock(), durable=False)
    try:
        t = db.call("submit", "anything", sender=ADMIN)
        assert not t.in_module and db.next_due() is None  # waits for workers
        assert db.call("claim", sender=ADMIN).id == t.id
    finally:
        db.close()
