"""Accounts and transfers, with a scheduled interest payment: the runtime's example module."""

from __future__ import annotations

from typing import Annotated

import msgspec

from stdbmod import At, Every, Identity, Index, Module, PrimaryKey, ReducerContext, ScheduleAt, SenderError, TimeDuration, Unique

bank = Module("bank")


@bank.table(public=True)
class Account(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    owner: Annotated[Identity, Unique()]
    balance: int


@bank.table(indexes={"by_from_to": ("from_id", "to_id")})
class Transfer(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    from_id: int
    to_id: Annotated[int, Index()]
    amount: int


@bank.table(scheduled="pay_interest")
class InterestTimer(msgspec.Struct):
    scheduled_id: Annotated[int, PrimaryKey(auto_inc=True)]
    scheduled_at: ScheduleAt
    percent: int


@bank.table
class Config(msgspec.Struct):
    id: Annotated[int, PrimaryKey()]
    banker: Identity


@bank.init
def init(ctx: ReducerContext) -> None:
    ctx.db.config.insert(Config(0, ctx.sender))


@bank.reducer
def open_account(ctx: ReducerContext, deposit: int) -> int:
    if deposit < 0:
        raise SenderError("a deposit cannot be negative")
    if ctx.db.account.owner.find(ctx.sender) is not None:
        raise SenderError("you already have an account")
    account: Account = ctx.db.account.insert(Account(0, ctx.sender, deposit))
    return account.id


@bank.reducer
def transfer(ctx: ReducerContext, to_id: int, amount: int) -> None:
    src = ctx.db.account.owner.find(ctx.sender)
    dst = ctx.db.account.id.find(to_id)
    if src is None or dst is None:
        raise SenderError("no such account")
    if amount <= 0:
        raise SenderError("the amount must be positive")
    if src.balance < amount:
        raise SenderError("insufficient funds")
    ctx.db.account.id.update(msgspec.structs.replace(src, balance=src.balance - amount))
    dst = ctx.db.account.id.find(to_id)
    ctx.db.account.id.update(msgspec.structs.replace(dst, balance=dst.balance + amount))
    ctx.db.transfer.insert(Transfer(0, src.id, to_id, amount))


@bank.reducer
def schedule_interest(ctx: ReducerContext, percent: int, every_seconds: int, once: bool) -> None:
    """Banker only: pay `percent` interest once after, or every, `every_seconds`."""
    if ctx.db.config.id.find(0).banker != ctx.sender:
        raise SenderError("only the banker schedules interest")
    delay = TimeDuration.from_seconds(every_seconds)
    at: ScheduleAt = At(ctx.timestamp + delay) if once else Every(delay)
    ctx.db.interest_timer.insert(InterestTimer(0, at, percent))


@bank.reducer
def pay_interest(ctx: ReducerContext, timer: InterestTimer) -> None:
    ctx.require_scheduler()
    for acc in list(ctx.db.account.iter()):
        ctx.db.account.id.update(msgspec.structs.replace(acc, balance=acc.balance + acc.balance * timer.percent // 100))


@bank.reducer
def crash(ctx: ReducerContext) -> None:
    """Writes, then fails with an unexpected error: everything rolls back."""
    ctx.db.account.insert(Account(0, Identity.zero(), 1))
    raise RuntimeError("boom")
