"""The dashboard's live stream: `/dashboard/live/socket`, a WebSocket that tells a signed-in
admin's pages the commit log's end each time a commit lands, so a page re-reads its live part
at once instead of polling.

It is fed by the runtime's commit feed (`Database.follow_commits`: every node's commits, after
they are durable, nothing polls), one follower for all of the server's sockets, started with the
first and stopped with the last. It carries versions, not rows: a page re-renders from its own
read (filters, pagination, counts from the indexes), so a query subscription's initial rows (a
scan of a million tasks for "every task") would buy nothing. A socket is sent at most one version
every `GAP` seconds, the newest, however fast commits come, and a slow browser costs one pending
integer, never a queue. `GET /dashboard/live` (a poll) stays, for browsers whose socket fails.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from urllib.parse import urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocket, WebSocketDisconnect

from ...runtime import Database
from ...runtime.commitlog import CommitRecord
from ..metrics_access import is_admin_now
from ..upgrade import deny_upgrade
from .desk import Desk
from .sessions import COOKIE

log = logging.getLogger("stdbmod.http.dashboard")

GAP = 0.25  # seconds between two versions sent to one socket
MAX_SOCKETS = 100  # live sockets per server; past it pages poll


class _Listener:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.moved = asyncio.Event()

    def wake(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self.moved.set)
        except RuntimeError:  # its loop is closed: the socket is gone
            pass


class LiveFeed:
    """One commit follower shared by every live socket of a database."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: set[_Listener] = set()
        self._stop: Callable[[], None] | None = None

    @property
    def sockets(self) -> int:
        return len(self._listeners)

    def add(self, db: Database, listener: _Listener) -> bool:
        """Listen to `db`'s commits; False when the server has its `MAX_SOCKETS` already."""
        with self._lock:
            if len(self._listeners) >= MAX_SOCKETS:
                return False
            self._listeners.add(listener)
            if self._stop is None:
                self._stop = db.follow_commits(self._on_records)
            return True

    def remove(self, listener: _Listener) -> None:
        with self._lock:
            self._listeners.discard(listener)
            stop = self._stop if not self._listeners else None
            if stop is not None:
                self._stop = None
        if stop is not None:
            stop()

    def _on_records(self, records: list[CommitRecord]) -> None:
        """The follower's thread: wake every socket (each reads the end itself when it sends)."""
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener.wake()


async def serve_socket(ws: WebSocket, db: Database, desk: Desk, feed: LiveFeed) -> None:
    """One page's socket: refused before the upgrade unless the browser has a live session of an
    admin and the page is this server's own (the Origin header, against cross-site WebSocket
    hijacking; the session cookie is SameSite=Strict too)."""
    session = await desk.session(ws.cookies.get(COOKIE))
    if session is None:
        return await deny_upgrade(ws, 401, "not signed in")
    if not same_origin(ws):
        return await deny_upgrade(ws, 403, "the page is not this server's")
    if not await run_in_threadpool(is_admin_now, db, session.identity):
        return await deny_upgrade(ws, 403, "not allowed")
    listener = _Listener(asyncio.get_running_loop())
    if not feed.add(db, listener):
        return await deny_upgrade(ws, 503, f"the server has {MAX_SOCKETS} live dashboard sockets, its limit: the page polls instead")
    try:
        await ws.accept()
        closed = asyncio.ensure_future(_closed(ws))
        try:
            while not closed.done():
                if await desk.session(ws.cookies.get(COOKIE)) is None:  # signed out (or expired) meanwhile
                    await ws.close(4401, "signed out")
                    return
                await ws.send_json({"version": await run_in_threadpool(db.commit_log_end)})
                listener.moved.clear()
                waiting = asyncio.ensure_future(listener.moved.wait())
                await asyncio.wait({waiting, closed}, return_when=asyncio.FIRST_COMPLETED)
                waiting.cancel()
                await asyncio.sleep(GAP)  # at most one version per GAP: the newest
        except (WebSocketDisconnect, RuntimeError, OSError):
            pass  # the browser went away mid-send
        finally:
            closed.cancel()
    finally:
        feed.remove(listener)


async def _closed(ws: WebSocket) -> None:
    """Returns when the browser closes (it sends nothing else; anything it sends is ignored)."""
    while True:
        message = await ws.receive()
        if message["type"] == "websocket.disconnect":
            return


def same_origin(ws: WebSocket) -> bool:
    """A browser always sends Origin on a WebSocket upgrade: it must name the host the request was
    sent to. A client without one (not a browser) is let through: it holds the cookie anyway."""
    origin = ws.headers.get("origin")
    if origin is None:
        return True
    host = ws.headers.get("host", "")
    return urlsplit(origin).netloc.lower() == host.lower() and host != ""
