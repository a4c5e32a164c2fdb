"""A module for the WebSocket tests: who is online (client_connected / client_disconnected), a
ban list that client_connected enforces, and chat lines as events (an event table)."""

from __future__ import annotations

from typing import Annotated

import msgspec

from stdbmod import ConnectionId, Identity, Index, Module, PrimaryKey, ReducerContext, SenderError

lobby = Module("lobby")


@lobby.table(public=True)
class Online(msgspec.Struct):
    connection: Annotated[ConnectionId, PrimaryKey()]
    who: Annotated[Identity, Index()]


@lobby.table
class Banned(msgspec.Struct):
    who: Annotated[Identity, PrimaryKey()]


@lobby.table(public=True, event=True)
class Chat(msgspec.Struct):
    id: Annotated[int, PrimaryKey(auto_inc=True)]
    who: Identity
    text: str


@lobby.client_connected
def connected(ctx: ReducerContext) -> None:
    if ctx.db.banned.who.find(ctx.sender) is not None:
        raise SenderError("you are banned")
    assert ctx.connection_id is not None
    ctx.db.online.insert(Online(ctx.connection_id, ctx.sender))


@lobby.client_disconnected
def disconnected(ctx: ReducerContext) -> None:
    ctx.db.online.connection.delete(ctx.connection_id)


@lobby.reducer
def say(ctx: ReducerContext, text: str) -> None:
    if not text:
        raise SenderError("say something")
    ctx.db.chat.insert(Chat(0, ctx.sender, text))


@lobby.reducer
def ban(ctx: ReducerContext, who: Identity) -> None:
    ctx.db.banned.insert(Banned(who))
