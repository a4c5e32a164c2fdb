"""One WebSocket connection speaking `v1.json.spacetimedb`: its messages in, the runtime's
subscription events out, through a bounded outbox.

Requests are handled one at a time, in the order they arrive, and each answer is queued before
the next request is read, so answers leave in request order (a call's answer is its
`TransactionUpdate`, queued by the hub in commit order). Everything else the connection sends
comes from the hub: subscribed changes in commit order.

The outbox is filled from the hub's thread and emptied by one sender task. A client whose
outbox holds more than `Limits.max_queued` messages (or `max_queued_bytes`) is closed with a
reason saying so: its queued messages are dropped, nothing else waits for it, and the hub's
writer never does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import msgspec
from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from ...errors import StdbError
from ...runtime import Database
from ...runtime.subscriptions import Applied, CallOutcome, Dropped, Removed, Subscription, Update
from ...types import ConnectionId, Identity
from . import messages, sats
from .encode import Encoder

log = logging.getLogger("stdbmod.http.subscribe")

_json = msgspec.json.Encoder()

# WebSocket close codes (RFC 6455) and the reasons' length limit
NORMAL, POLICY, UNSUPPORTED, TOO_BIG, OVERLOADED = 1000, 1008, 1003, 1009, 1013
_REASON_BYTES = 123


@dataclass(frozen=True)
class Limits:
    """What one server allows each WebSocket client (docs/subscriptions.md, "Limits")."""

    max_connections: int = 2_000
    max_message: int = 1 << 20  # bytes in one client message
    max_queries: int = 256  # subscribed queries per connection
    max_queued: int = 1_000  # messages waiting to be sent before the client counts as too slow
    max_queued_bytes: int = 32 << 20
    idle_timeout: float = 300.0  # seconds without a message, for a connection subscribed to nothing


def _reason(text: str) -> str:
    data = text.encode()[:_REASON_BYTES]
    return data.decode(errors="ignore")


@dataclass
class _Call:
    request_id: int
    flags: int
    answered: asyncio.Future[None]


class Outbox:
    """Text frames for one client, filled from any thread, sent by `run` on the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limits: Limits, on_overflow: Any) -> None:
        self._loop = loop
        self._limits = limits
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._lock = threading.Lock()
        self._count = 0
        self._bytes = 0
        self._on_overflow = on_overflow
        self.closed = False

    def put(self, message: dict[str, Any] | str) -> None:
        """Queue a message (or its JSON text, already encoded)."""
        text = message if isinstance(message, str) else _json.encode(message).decode()
        with self._lock:
            if self.closed:
                return
            if self._count >= self._limits.max_queued or self._bytes + len(text) > self._limits.max_queued_bytes:
                self.closed = True
                reason = f"too far behind: more than {self._count} messages ({self._bytes} bytes) waiting; reconnect and subscribe again"
                self._call(self._on_overflow, reason)
                return
            self._count += 1
            self._bytes += len(text)
        self._call(self._queue.put_nowait, text)

    def _call(self, func: Any, *args: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(func, *args)
        except RuntimeError:  # the loop is closed: the server stopped
            pass

    async def run(self, ws: WebSocket) -> None:
        while True:
            text = await self._queue.get()
            await ws.send_text(text)
            with self._lock:
                self._count -= 1
                self._bytes -= len(text)

    def close(self) -> None:
        with self._lock:
            self.closed = True
        while not self._queue.empty():  # what a dropped client had queued goes now
            self._queue.get_nowait()


class Connection:
    def __init__(self, ws: WebSocket, db: Database, encoder: Encoder, identity: Identity, token: str, connection_id: ConnectionId, limits: Limits) -> None:
        self.ws = ws
        self.db = db
        self.enc = encoder
        self.identity = identity
        self.token = token
        self.connection_id = connection_id
        self.limits = limits
        self.sub: Subscription | None = None
        self.singles: dict[int, int] = {}  # SubscribeSingle query_id -> hub query set
        self.multis: dict[int, int] = {}  # SubscribeMulti query_id -> hub query set
        self.legacy: list[int] = []  # the query sets of `Subscribe` (replaced by the next one)
        self.queries = 0
        self._closing: asyncio.Task[None] | None = None

    # --- the connection's life ------------------------------------------------------------

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.outbox = Outbox(loop, self.limits, self._overflow)
        sender = asyncio.ensure_future(self._send())
        try:
            self.outbox.put(messages.identity_token(self.identity, self.token, self.connection_id))
            self.sub = await run_in_threadpool(
                self.db.subscribe, [], self._on_event, sender=self.identity, connection_id=self.connection_id, inline=True
            )
            await self._receive()
        finally:
            if self.sub is not None:
                self.sub.unsubscribe()
            self.outbox.close()
            sender.cancel()
            with contextlib.suppress(BaseException):
                await sender
            if self._closing is not None:
                with contextlib.suppress(BaseException):
                    await self._closing

    async def _send(self) -> None:
        with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
            await self.outbox.run(self.ws)

    def _overflow(self, reason: str) -> None:
        log.warning("closing the subscription of %s: %s", self.identity, reason)
        self.outbox.close()
        self._close_soon(POLICY, reason)

    def _close_soon(self, code: int, reason: str) -> None:
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close(code, reason))

    async def _close(self, code: int, reason: str) -> None:
        with contextlib.suppress(BaseException):
            if self.ws.application_state != WebSocketState.DISCONNECTED:
                await self.ws.close(code, _reason(reason))

    async def _receive(self) -> None:
        last = time.monotonic()
        while self._closing is None:
            idle = self.limits.idle_timeout if self.queries == 0 else None
            try:
                message = await asyncio.wait_for(self.ws.receive(), timeout=None if idle is None else max(0.0, idle - (time.monotonic() - last)))
            except TimeoutError:
                await self._close(NORMAL, f"idle: no message and no subscription for {self.limits.idle_timeout:g} s")
                return
            if message["type"] == "websocket.disconnect":
                return
            last = time.monotonic()
            if message.get("bytes") is not None:
                await self._close(UNSUPPORTED, f"binary frames are not part of {messages.PROTOCOL}: send JSON text")
                return
            text = message.get("text") or ""
            if len(text.encode()) > self.limits.max_message:
                await self._close(TOO_BIG, f"a message is at most {self.limits.max_message} bytes")
                return
            try:
                request = messages.decode(text)
            except messages.BadMessage as e:
                await self._close(POLICY, f"bad message: {e}")
                return
            await self._handle(request)

    # --- requests --------------------------------------------------------------------------

    async def _handle(self, m: messages.ClientMessage) -> None:
        assert self.sub is not None
        started = time.perf_counter()
        if isinstance(m, messages.CallReducer):
            await self._call(m)
        elif isinstance(m, messages.OneOffQuery):
            self.outbox.put(await run_in_threadpool(self._one_off, m, started))
        elif isinstance(m, messages.Subscribe):
            await self._subscribe(m.query_strings, ("initial", m.request_id, None, started), m.request_id, None, replace=True)
        elif isinstance(m, messages.SubscribeSingle):
            await self._subscribe([m.query], ("single", m.request_id, m.query_id.id, started), m.request_id, m.query_id.id, into=self.singles)
        elif isinstance(m, messages.SubscribeMulti):
            await self._subscribe(m.query_strings, ("multi", m.request_id, m.query_id.id, started), m.request_id, m.query_id.id, into=self.multis)
        elif isinstance(m, messages.Unsubscribe):
            await self._unsubscribe(self.singles, ("single", m.request_id, m.query_id.id, started), m.request_id, m.query_id.id)
        elif isinstance(m, messages.UnsubscribeMulti):
            await self._unsubscribe(self.multis, ("multi", m.request_id, m.query_id.id, started), m.request_id, m.query_id.id)

    async def _call(self, m: messages.CallReducer) -> None:
        assert self.sub is not None
        call = _Call(m.request_id, m.flags, self.loop.create_future())
        try:
            fut = self.sub.call_json(m.reducer, m.args.encode(), tag=call)
        except StdbError as e:  # no such reducer, arguments that do not decode: nothing ran
            self.outbox.put(self._failed(m.reducer, m.args, m.request_id, str(e), self.db.clock.now().micros))
            return
        with contextlib.suppress(Exception):
            await asyncio.wrap_future(fut)
        # its TransactionUpdate (from the hub, in commit order) is queued before the next answer
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(call.answered, 60.0)

    async def _subscribe(
        self, queries: list[str], tag: tuple[Any, ...], request_id: int, query_id: int | None,
        replace: bool = False, into: dict[int, int] | None = None,
    ) -> None:
        assert self.sub is not None
        if into is not None and query_id in into:
            self.outbox.put(messages.subscription_error(request_id, query_id, f"query_id {query_id} is already in use on this connection"))
            return
        held = 0 if replace else self.queries
        if held + len(queries) > self.limits.max_queries:
            self.outbox.put(messages.subscription_error(request_id, query_id, f"at most {self.limits.max_queries} queries per connection"))
            return
        if replace:  # Subscribe replaces every query set it made before (SpacetimeDB's legacy form)
            for old in self.legacy:
                await run_in_threadpool(self.sub.remove, old, tag=("silent",))
            self.legacy = []
        try:
            set_id = await run_in_threadpool(self.sub.add, queries, tag=tag)
        except StdbError as e:
            self.outbox.put(messages.subscription_error(request_id, query_id, str(e)))
            return
        if replace:
            self.legacy = [set_id]
            self.queries = sum(len(qs.queries) for qs in self.sub.sets.values())
            return
        assert into is not None and query_id is not None
        into[query_id] = set_id
        self.queries += len(queries)

    async def _unsubscribe(self, held: dict[int, int], tag: tuple[Any, ...], request_id: int, query_id: int) -> None:
        assert self.sub is not None
        set_id = held.pop(query_id, None)
        if set_id is None:
            self.outbox.put(messages.subscription_error(request_id, query_id, f"no subscription with query_id {query_id} on this connection"))
            return
        qs = self.sub.sets.get(set_id)
        self.queries -= len(qs.queries) if qs is not None else 0
        await run_in_threadpool(self.sub.remove, set_id, tag=tag)

    def _one_off(self, m: messages.OneOffQuery, started: float) -> dict[str, Any]:
        """A SELECT (or several) run once; its error, if any, goes in the answer."""
        from ...runtime.sql import SqlError, check_readable, select
        from ...runtime.sql_plan import Select, plan_all

        try:
            plans: list[Select] = []
            for plan in plan_all(m.query_string, self.db.module.tables):
                if not isinstance(plan, Select):
                    raise SqlError(f"a one-off query is a SELECT, not {type(plan).__name__.upper()}")
                plans.append(plan)
            tables = []
            with self.db.read() as snap:
                for plan in plans:
                    check_readable(self.db, self.identity, plan.tables(), snap.db)
                for plan in plans:
                    result = select(snap.db, plan)
                    encoders = [sats.encoder(t) for t in result.types]
                    rows = [_json.encode([e(v) for e, v in zip(encoders, row)]).decode() for row in result.rows]
                    tables.append({"table_name": result.table, "rows": rows})
            error = None
        except StdbError as e:
            tables, error = [], str(e)
        micros = round((time.perf_counter() - started) * 1e6)
        return messages.one_off_response(m.message_id, error, tables, micros)

    # --- events from the hub (its thread, or a request's: keep it short) ---------------------

    def _on_event(self, event: Any) -> None:
        if isinstance(event, Update):
            self._update(event)
        elif isinstance(event, CallOutcome):
            call: _Call = event.tag
            args = self.enc.args_text("call", event.reducer, event.args)
            ts = event.timestamp.micros if event.timestamp is not None else self.db.clock.now().micros
            if event.error is not None:
                self.outbox.put(self._failed(event.reducer, args, call.request_id, event.error, ts))
            elif call.flags == 0:  # committed, but changed nothing it subscribed to
                self.outbox.put(self._transaction(messages.committed([]), ts, event.reducer, args, call.request_id))
            self._answered(call)
        elif isinstance(event, Applied):
            self._applied(event)
        elif isinstance(event, Removed):
            self._removed(event)
        elif isinstance(event, Dropped):
            self.outbox.close()
            self._call_loop(self._close_soon, OVERLOADED, event.reason)

    def _update(self, u: Update) -> None:
        call: _Call | None = u.tag if isinstance(u.tag, _Call) else None
        if not u.changes and (call is None or call.flags == 1):
            if call is not None:
                self._answered(call)
            return
        def build() -> str:
            args = self.enc.args_text(u.kind, u.reducer, u.args, u.schedule_row)
            message = messages.transaction_update(
                status=messages.committed(self.enc.changes(u.changes, u.offset)), timestamp=u.timestamp.micros, caller=u.sender,
                connection_id=u.connection_id, reducer=u.reducer, reducer_id=self.enc.reducer_id(u.reducer), args=args,
                request_id=call.request_id if call else 0,
            )
            return _json.encode(message).decode()

        # the same commit seen through the same queries is the same message for every other client
        self.outbox.put(build() if call is not None else self.enc.shared(u.offset, tuple(c.query for c in u.changes), build))
        if call is not None:
            self._answered(call)

    def _applied(self, e: Applied) -> None:
        kind, request_id, query_id, started = e.tag
        micros = round((time.perf_counter() - started) * 1e6)
        tables = self.enc.rows(e.rows)
        if kind == "initial":
            self.outbox.put(messages.initial_subscription(tables, request_id, micros))
        elif kind == "single":
            self.outbox.put(messages.subscribe_applied(request_id, query_id, micros, tables[0]))
        else:
            self.outbox.put(messages.subscribe_multi_applied(request_id, query_id, micros, tables))

    def _removed(self, e: Removed) -> None:
        if e.tag[0] == "silent":
            return
        kind, request_id, query_id, started = e.tag
        micros = round((time.perf_counter() - started) * 1e6)
        tables = self.enc.rows(e.rows, deleted=True)
        if kind == "single":
            self.outbox.put(messages.unsubscribe_applied(request_id, query_id, micros, tables[0]))
        else:
            self.outbox.put(messages.unsubscribe_multi_applied(request_id, query_id, micros, tables))

    def _transaction(self, status: dict[str, Any], ts: int, reducer: str, args: str, request_id: int) -> dict[str, Any]:
        return messages.transaction_update(
            status=status, timestamp=ts, caller=self.identity, connection_id=self.connection_id,
            reducer=reducer, reducer_id=self.enc.reducer_id(reducer), args=args, request_id=request_id,
        )

    def _failed(self, reducer: str, args: str, request_id: int, error: str, ts: int) -> dict[str, Any]:
        return self._transaction(messages.failed(error), ts, reducer, args, request_id)

    def _answered(self, call: _Call) -> None:
        def settle() -> None:
            if not call.answered.done():
                call.answered.set_result(None)

        self._call_loop(settle)

    def _call_loop(self, func: Any, *args: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(func, *args)
        except RuntimeError:
            pass
