"""The dashboard's own state, apart from the database: its sessions (with their flashes), the
sign-in tickets already used, and the throughput counted from the commit feed.

It lives in one process, the one that runs the reducers: `LocalDesk` there (one-process `serve`,
or the writer process of `serve --workers N`). An HTTP front of `--workers N` reaches the
writer's over its link (`LinkDesk`, `frames.Dash`), so a browser signed in through one front is
signed in on all of them, signing out ends the session everywhere, and a ticket is used once
whichever front takes it. The methods a page calls on the event loop are coroutines;
`throughput` blocks (the overview calls it off the loop, beside its reads).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

from ...errors import StdbError
from ...local.tokens import SigningKey
from ...types import Identity
from .. import frames
from ..metrics_feed import Feed
from .sessions import Session, Sessions
from .throughput import Throughput
from .tickets import Tickets


class Desk(Protocol):
    ttl: float  # a session's lifetime, seconds (its cookie's max-age)

    async def session(self, cookie: str | None) -> Session | None: ...

    async def sign_in(self, identity: Identity) -> str:
        """A new session for `identity`: its cookie's value."""
        ...

    async def sign_out(self, session: Session) -> None: ...

    async def flash(self, session: Session, kind: str, text: str) -> None: ...

    async def take_flashes(self, session: Session) -> list[tuple[str, str]]: ...

    async def ticket_for(self, ticket: str) -> Identity:
        """Whom a ticket signs in, without using it up; BadTicket."""
        ...

    async def redeem(self, ticket: str) -> Identity:
        """Use a ticket up: whom it signs in; BadTicket."""
        ...

    def throughput(self, queues: list[str], now_micros: int) -> dict[str, dict[str, Any]]:
        """Each queue's `Throughput.summary` (blocking: call it off the event loop)."""
        ...


class LocalDesk:
    """The state itself, in the process whose commit feed counts the throughput."""

    def __init__(self, key: SigningKey, feed: Feed) -> None:
        self.sessions = Sessions(key)
        self.tickets = Tickets(key)
        self.counted = Throughput()
        self.ttl = self.sessions.ttl
        self._feed = feed
        feed.task_listeners.append(self.counted.on_tasks)

    async def session(self, cookie: str | None) -> Session | None:
        return self.sessions.get(cookie)

    async def sign_in(self, identity: Identity) -> str:
        return self.sessions.create(identity)[1]

    async def sign_out(self, session: Session) -> None:
        self.sessions.end(session)

    async def flash(self, session: Session, kind: str, text: str) -> None:
        session.flash(kind, text)

    async def take_flashes(self, session: Session) -> list[tuple[str, str]]:
        return session.take_flashes()

    async def ticket_for(self, ticket: str) -> Identity:
        return self.tickets.identity(ticket)

    async def redeem(self, ticket: str) -> Identity:
        return self.tickets.redeem(ticket)

    def throughput(self, queues: list[str], now_micros: int) -> dict[str, dict[str, Any]]:
        self._feed.drain()  # what every commit made so far counts
        return {q: self.counted.summary(q, now_micros) for q in queues}

    def answer(self, req: frames.Dash) -> Any:
        """A front's `frames.Dash` (the writer's side of `LinkDesk`): what its reply carries."""
        a, op = req.args, req.op
        if op == "throughput" and a:
            return self.throughput(a[1:], int(a[0]))
        if len(a) != _ARITY.get(op, -1):
            raise StdbError(f"no dashboard operation {op!r} of {len(a)} arguments")
        if op == "session":  # a copy without its flashes, which `take_flashes` hands over
            found = self.sessions.get(a[0])
            return None if found is None else dataclasses.replace(found, flashes=[])
        if op == "sign_in":
            return self.sessions.create(Identity.from_hex(a[0]))[1]
        if op in ("ticket_for", "redeem"):
            return (self.tickets.identity if op == "ticket_for" else self.tickets.redeem)(a[0]).to_hex()
        session = self.sessions.find(a[0])
        if op == "take_flashes":
            return [] if session is None else session.take_flashes()
        if session is not None:
            if op == "sign_out":
                self.sessions.end(session)
            else:  # flash
                session.flash(a[1], a[2])
        return None


_ARITY = {"session": 1, "sign_in": 1, "ticket_for": 1, "redeem": 1, "take_flashes": 1, "sign_out": 1, "flash": 3}


class LinkDesk:
    """An HTTP front's way to the writer's `LocalDesk`: each method one request on the link."""

    def __init__(self, request: Callable[[Callable[[int], frames.Request]], Any], ttl: float) -> None:
        """`request`: the front's `WriterClient.request` (an asyncio future on the loop, a
        concurrent one elsewhere)."""
        self._request = request
        self.ttl = ttl

    def _ask(self, op: str, *args: str) -> Any:
        return self._request(lambda i: frames.Dash(i, op, list(args)))

    async def session(self, cookie: str | None) -> Session | None:
        if not cookie:
            return None
        found: Session | None = await self._ask("session", cookie)
        return found

    async def sign_in(self, identity: Identity) -> str:
        cookie: str = await self._ask("sign_in", identity.to_hex())
        return cookie

    async def sign_out(self, session: Session) -> None:
        await self._ask("sign_out", session.sid)

    async def flash(self, session: Session, kind: str, text: str) -> None:
        await self._ask("flash", session.sid, kind, text)

    async def take_flashes(self, session: Session) -> list[tuple[str, str]]:
        flashes: list[tuple[str, str]] = await self._ask("take_flashes", session.sid)
        return flashes

    async def ticket_for(self, ticket: str) -> Identity:
        who: Identity = Identity.from_hex(await self._ask("ticket_for", ticket))
        return who

    async def redeem(self, ticket: str) -> Identity:
        who: Identity = Identity.from_hex(await self._ask("redeem", ticket))
        return who

    def throughput(self, queues: list[str], now_micros: int) -> dict[str, dict[str, Any]]:
        counted: dict[str, dict[str, Any]] = self._ask("throughput", str(now_micros), *queues).result()
        return counted
