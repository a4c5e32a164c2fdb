"""What an HTTP front of `serve --workers N` serves: a `Database` whose reads are its own and
whose writes are the writer process's.

`FrontDatabase` is the served database opened read-only in the front's process (LMDB serves
readers in many processes; each read is a snapshot as fresh as the last commit), so every read
route, token check and body validation runs here, and a call is checked here as `Database` checks
it (the reducer exists and the caller may call it, the arguments decode to its types) before its
commit-log bytes go to the writer (`WriterClient`, frames.py). The future a call returns resolves
when the writer's reply comes, after the commit is on disk, with the reducer's result or its
exception, so the app answers as it would in one process.

What needs the writer's own state fails clearly here (`NotInFront`, 501): subscriptions, the
dashboard's live page, log streams (`logs?follow=true`), the commit feed. With the writer gone,
every call fails with `WriterGone` (503) at once, queued ones included: nothing waits forever.
"""

from __future__ import annotations

import itertools
import logging
import pickle
import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ..errors import StdbError
from ..runtime import Database
from ..runtime.jobs import CallJob, Job
from ..types import ConnectionId, Identity
from . import frames

log = logging.getLogger("stdbmod.http")

RECV = 1 << 16


class WriterGone(StdbError):
    """The writer process stopped answering: a call's outcome is unknown to this front."""

    status_code = 503


class NotInFront(StdbError):
    """Something only the writer process can serve (it holds the commit stream)."""

    status_code = 501


ADVICE = "serve with --workers 0 (one process) for it"


class WriterError(StdbError):
    """A failure from the writer whose exception could not be rebuilt here: its status, its
    message and its code still reach the client."""

    def __init__(self, f: frames.Failure) -> None:
        super().__init__(f.message)
        self.status_code = f.status
        self.code = f.code


def rebuild(f: frames.Failure) -> BaseException:
    """The writer's exception, as the same class with the same state when it unpickles."""
    if f.pickled:
        try:
            cls, args, attrs = pickle.loads(f.pickled)
            if isinstance(cls, type) and issubclass(cls, BaseException):
                e = cls.__new__(cls)
                e.args = args
                e.__dict__.update(attrs)
                return e
        except Exception as err:
            log.warning("cannot rebuild the writer's %s here (%s); answering with its status and message", f.name, err)
    return WriterError(f)


class WriterClient:
    """This front's end of its link to the writer. `request` may be called from any thread."""

    def __init__(self, sock: socket.socket, on_gone: Callable[[], None] | None = None) -> None:
        self._sock = sock
        self._pending: dict[int, Future[Any]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.gone: str | None = None
        self.on_gone = on_gone
        threading.Thread(target=self._read_loop, name="stdbmod-front-link", daemon=True).start()

    def request(self, make: Callable[[int], frames.Request]) -> Future[Any]:
        fut: Future[Any] = Future()
        with self._lock:
            if self.gone is not None:
                fut.set_exception(WriterGone(self.gone))
                return fut
            req_id = next(self._ids)
            data = frames.encode(make(req_id))  # FrameTooLarge: the caller's error, nothing sent
            self._pending[req_id] = fut
            try:
                self._sock.sendall(data)
            except OSError as e:
                lost = f"the writer process is gone ({e.strerror or e}); the server is stopping or has failed"
            else:
                return fut
        self._lose(lost)
        return fut

    def call(self, job: CallJob) -> Future[Any]:
        sender = job.sender.to_bytes()
        conn = None if job.connection_id is None else job.connection_id.to_bytes()
        return self.request(lambda i: frames.Call(i, job.reducer, job.args_bytes, sender, conn))

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._lose("the front is stopping")

    def _read_loop(self) -> None:
        reader = frames.FrameReader()
        why = "the writer process is gone (the link closed); the server is stopping or has failed"
        try:
            while True:
                data = self._sock.recv(RECV)
                if not data:
                    break
                for body in reader.feed(data):
                    self._settle(frames.reply_decoder.decode(body))
        except (OSError, frames.FrameTooLarge) as e:
            why = f"the link to the writer process failed: {e}"
        except Exception as e:  # a reply that does not decode: the link is not to be trusted further
            log.error("a reply from the writer does not decode: %s", e)
            why = f"the link to the writer process failed: {e}"
        self._lose(why)

    def _settle(self, reply: frames.Reply) -> None:
        with self._lock:
            fut = self._pending.pop(reply.id, None)
        if fut is None:
            return
        if reply.failure is not None:
            fut.set_exception(rebuild(reply.failure))
            return
        try:
            value = pickle.loads(reply.value)
        except Exception as e:
            fut.set_exception(StdbError(f"the call committed, but its result cannot be read here: {e}"))
            return
        fut.set_result(value)

    def _lose(self, why: str) -> None:
        with self._lock:
            first = self.gone is None
            if first:
                self.gone = why
            pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(WriterGone(f"{why}: the call's outcome is unknown here (it may have committed)"))
        if first:
            try:
                self._sock.close()
            except OSError:
                pass
            if self.on_gone is not None:
                self.on_gone()


class FrontDatabase(Database):
    """The served database as a front sees it: open it with `FrontDatabase.open(path, module,
    readonly=True)`, then `attach` the link."""

    link: WriterClient | None = None

    def attach(self, link: WriterClient) -> None:
        self.link = link

    def _client(self) -> WriterClient:
        if self.link is None:
            raise WriterGone("this front has no link to the writer process")
        return self.link

    def _submit(self, job: Job) -> Future[Any]:
        if isinstance(job, CallJob):
            return self._client().call(job)
        if job.kind == "sql":  # runtime/sql.py's SqlJob: planned and checked here, run there
            sender = job.sender.to_bytes()
            return self._client().request(lambda i: frames.Sql(i, job.args_bytes, sender))
        raise NotInFront(f"{job.kind} jobs run in the writer process only")

    def _run(self, job: Job) -> Future[Any]:
        return self._submit(job)

    def connect(self, sender: Identity) -> ConnectionId:
        raw = self._client().request(lambda i: frames.Connect(i, sender.to_bytes())).result()
        return ConnectionId(raw)

    def disconnect(self, sender: Identity, connection_id: ConnectionId) -> None:
        try:
            self._client().request(lambda i: frames.Disconnect(i, sender.to_bytes(), connection_id.to_bytes())).result()
        except StdbError:
            pass

    def disconnect_dangling(self) -> int:
        return 0  # the writer process does it, once, before any front starts

    def subscribe(self, *args: Any, **kwargs: Any) -> Any:
        raise NotInFront(f"subscriptions are not served by the HTTP fronts of --workers N; {ADVICE}")

    def follow_commits(self, *args: Any, **kwargs: Any) -> Callable[[], None]:
        raise NotInFront(f"the commit feed is not served by the HTTP fronts of --workers N; {ADVICE}")

    def on_log(self, tap: Callable[[], None]) -> Callable[[], None]:
        raise NotInFront(f"following the database log is not served by the HTTP fronts of --workers N; {ADVICE}")

    def fire_due(self, *args: Any, **kwargs: Any) -> tuple[int, Any]:
        raise NotInFront("the scheduler runs in the writer process only")
