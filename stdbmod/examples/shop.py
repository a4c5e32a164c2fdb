"""A shop that includes the task-retry module: placing an order queues a receipt email in the
same transaction, and an in-module handler "sends" it by writing a row to `outbox`.

    stdbmod publish --data ./shop stdbmod.examples.shop
    stdbmod call --data ./shop place_order '"book"' '"ann@example.com"'

Scenario files script the handler's outcomes to show which writes survive which outcome: a
return or a give-up keeps the outbox row, a failure or an exception rolls it back.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from stdbmod import Index, Module, PrimaryKey, ReducerContext, SenderError, Timestamp
from stdbmod.retry import GiveUp, HandlerContext, create_retry_module

retry = create_retry_module()
shop = Module("shop")
shop.include(retry.module)


@shop.table(public=True)
class Order(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    item: str
    email: str
    placed_at: Timestamp
    task_id: int  # the receipt's task


@shop.table
class Outbox(msgspec.Struct):
    """Emails the handler sent (a real one would call a mail API and record the message id)."""

    id: Annotated[int, PrimaryKey(auto_inc=True)]
    order_id: Annotated[int, Index()]
    to: str
    subject: str


@shop.reducer
def place_order(ctx: ReducerContext, item: str, email: str) -> int:
    """Record the order and queue its receipt, atomically: both or neither."""
    if not item or "@" not in email:
        raise SenderError("an order needs an item and an email address")
    order = ctx.db.order.insert(Order(0, item, email, ctx.timestamp, 0))
    task = retry.enqueue_in(ctx, "send_receipt", {"order_id": order.id}, max_attempts=3, backoff_seconds=10)
    ctx.db.order.id.update(msgspec.structs.replace(order, task_id=task.id))
    return int(order.id)


@retry.handler("send_receipt")
def send_receipt(ctx: HandlerContext, payload: Any) -> dict[str, Any]:
    order = ctx.db.order.id.find(payload["order_id"])
    if order is None:
        raise GiveUp(f"order {payload['order_id']} does not exist")
    sent = ctx.db.outbox.insert(Outbox(0, order.id, order.email, f"Your receipt for {order.item}"))
    return {"outbox_id": sent.id}
