"""A module with connection hooks: banned identities are refused at `client_connected`."""

from __future__ import annotations

from typing import Annotated

import msgspec

from stdbmod import Identity, Module, PrimaryKey, ReducerContext, SenderError

gate = Module("gate")


@gate.table
class Banned(msgspec.Struct):
    identity: Annotated[Identity, PrimaryKey()]


@gate.table
class Visits(msgspec.Struct):
    identity: Annotated[Identity, PrimaryKey()]
    connected: int
    disconnected: int


def _visits(ctx: ReducerContext) -> Visits:
    row: Visits | None = ctx.db.visits.identity.find(ctx.sender)
    return row or ctx.db.visits.insert(Visits(ctx.sender, 0, 0))


@gate.client_connected
def on_connect(ctx: ReducerContext) -> None:
    if ctx.db.banned.identity.find(ctx.sender) is not None:
        raise SenderError("you are banned")
    v = _visits(ctx)
    ctx.db.visits.identity.update(msgspec.structs.replace(v, connected=v.connected + 1))


@gate.client_disconnected
def on_disconnect(ctx: ReducerContext) -> None:
    v = _visits(ctx)
    ctx.db.visits.identity.update(msgspec.structs.replace(v, disconnected=v.disconnected + 1))


@gate.reducer
def ban(ctx: ReducerContext, who: Identity) -> None:
    ctx.db.banned.insert(Banned(who))


@gate.reducer
def visits(ctx: ReducerContext) -> list[int]:
    """[connected, disconnected] for the caller, this call's connection included."""
    v = _visits(ctx)
    return [v.connected, v.disconnected]
