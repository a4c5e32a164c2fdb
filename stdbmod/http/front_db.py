"""What an HTTP front of `serve --workers N` serves: a `Database` whose reads are its own and
whose writes are the writer process's.

`FrontDatabase` is the served database opened read-only in the front's process (LMDB serves
readers in many processes; each read is a snapshot as fresh as the last commit), so every read
route, token check and body validation runs here, and a call is checked here as `Database` checks
it (the reducer exists and the caller may call it, the arguments decode to its types) before its
commit-log bytes go to the writer (`WriterClient`, frames.py). The future a call returns resolves
when the writer's reply comes, after the commit is on disk, with the reducer's result or its
exception, so the app answers as it would in one process.

After its commits the writer sends a notice (frames.Notice): the front wakes its commit and log
taps and its storage's watchers, so subscriptions, the commit feed and `logs?follow=true` read
the new records from the log here. What needs the writer's own hooks (the metrics' call timings,
the scheduler) fails clearly (`NotInFront`, 501). With the writer gone, every call fails with
`WriterGone` (503) at once, queued ones included: nothing waits forever.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import pickle
import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, cast

from ..errors import StdbError
from ..runtime import Database
from ..runtime.calls import pass_on
from ..runtime.jobs import CallJob, Job
from ..runtime.writer import Outcome
from ..storage.lmdb_storage import LmdbStorage
from ..types import ConnectionId, Identity, Timestamp
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
    """This front's end of its link to the writer, run by the front's event loop (no thread of
    its own: a reply settles its request's future where the request awaits it). `request` may
    be called from any thread: on the loop it returns an asyncio future (what the app awaits:
    answers.py's `result`), elsewhere a concurrent one (the blocking callers in the thread
    pool: connect, disconnect, SQL writes)."""

    def __init__(self, sock: socket.socket, on_gone: Callable[[], None] | None = None) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._fd = sock.fileno()
        self._pending: dict[int, tuple[Outcome, CallJob | None]] = {}  # id -> (an asyncio or concurrent future or an outcome, the call)
        self.on_notice: Callable[[frames.Notice], None] | None = None
        self._ids = itertools.count(1)
        self._out = bytearray()
        self._flush_soon = False
        self._reader = frames.FrameReader()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self.gone: str | None = None
        self.on_gone = on_gone

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Serve the link on `loop` (the app's, from its lifespan)."""
        self._loop, self._loop_thread = loop, threading.get_ident()
        loop.add_reader(self._fd, self._readable)

    def request(self, make: Callable[[int], frames.Request], job: CallJob | None = None) -> Any:
        fut: Any = self._loop.create_future() if self._loop is not None and threading.get_ident() == self._loop_thread else Future()
        self.request_to(make, fut, job)
        return fut

    def request_to(self, make: Callable[[int], frames.Request], outcome: Outcome, job: CallJob | None = None) -> None:
        """`request`, settling the caller's `outcome` when the reply comes (on the loop): the
        app's own answer object (answers.py's `Answer`) without a future between them."""
        loop = self._loop
        if loop is None:
            outcome.set_exception(WriterGone("this front's link to the writer is not started"))
        elif threading.get_ident() == self._loop_thread:
            self._queue(make, outcome, job)
        else:
            try:
                loop.call_soon_threadsafe(self._queue, make, outcome, job)
            except RuntimeError:  # the loop is closed: the front is stopping
                outcome.set_exception(WriterGone("the front is stopping"))

    def call(self, job: CallJob) -> Any:
        return self.request(self._call_frame(job), job)

    def call_to(self, job: CallJob, outcome: Outcome) -> None:
        self.request_to(self._call_frame(job), outcome, job)

    @staticmethod
    def _call_frame(job: CallJob) -> Callable[[int], frames.Request]:
        sender = job.sender.to_bytes()
        conn = None if job.connection_id is None else job.connection_id.to_bytes()
        return lambda i: frames.Call(i, job.reducer, job.args_bytes, sender, conn)

    def close(self) -> None:
        self._lose("the front is stopping")

    # --- on the loop ----------------------------------------------------------------------------

    def _queue(self, make: Callable[[int], frames.Request], fut: Outcome, job: CallJob | None) -> None:
        if self.gone is not None:
            fut.set_exception(WriterGone(self.gone))
            return
        req_id = next(self._ids)
        try:
            self._out += frames.encode(make(req_id))
        except frames.FrameTooLarge as e:  # the caller's error; nothing sent
            fut.set_exception(e)
            return
        self._pending[req_id] = (fut, job)
        if not self._flush_soon:  # the frames of one loop iteration go out in one write
            self._flush_soon = True
            assert self._loop is not None
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_soon = False
        if not self._out or self.gone is not None:
            return
        try:
            sent = self._sock.send(self._out)
        except BlockingIOError:
            sent = 0
        except OSError as e:
            self._lose(f"the writer process is gone ({e.strerror or e}); the server is stopping or has failed")
            return
        del self._out[:sent]
        assert self._loop is not None
        if self._out:  # the socket's buffer is full: the rest when it drains
            self._loop.add_writer(self._fd, self._writable)

    def _writable(self) -> None:
        assert self._loop is not None
        self._loop.remove_writer(self._fd)
        self._flush()

    def _readable(self) -> None:
        why = "the writer process is gone (the link closed); the server is stopping or has failed"
        try:
            data = self._sock.recv(RECV)
            if data:
                for body in self._reader.feed(data):
                    self._settle(frames.reply_decoder.decode(body))
                return
        except BlockingIOError:
            return
        except (OSError, frames.FrameTooLarge) as e:
            why = f"the link to the writer process failed: {e}"
        except Exception as e:  # a reply that does not decode: the link is not to be trusted further
            log.error("a reply from the writer does not decode: %s", e)
            why = f"the link to the writer process failed: {e}"
        self._lose(why)

    def _settle(self, reply: frames.Reply | frames.Notice) -> None:
        if isinstance(reply, frames.Notice):
            if self.on_notice is not None:
                self.on_notice(reply)
            return
        fut, job = self._pending.pop(reply.id, (None, None))
        if job is not None:  # what a subscriber's call is told by (runtime/subscriptions.py)
            job.offset = reply.offset
            if reply.timestamp is not None:
                job.timestamp = Timestamp(reply.timestamp)
        if fut is None or fut.done():  # done: a request whose client went away (cancelled)
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
        if self.gone is not None:
            return
        self.gone = why
        pending, self._pending = self._pending, {}
        for fut, _ in pending.values():
            if not fut.done():
                fut.set_exception(WriterGone(f"{why}: the call's outcome is unknown here (it may have committed)"))
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.remove_reader(self._fd)
            loop.remove_writer(self._fd)
        try:
            self._sock.close()
        except OSError:
            pass
        if self.on_gone is not None:
            self.on_gone()


class FrontStorage(LmdbStorage):
    """The served LMDB directory opened read-only, whose `watch` hears of the writer process's
    commits (`announce`, from the link's notices), as PostgreSQL's LISTEN hears of another
    node's: the subscriptions' hub and the commit feed then read the records from the log."""

    def __init__(self, path: str) -> None:
        super().__init__(path, readonly=True)
        self._watchers: list[Callable[[str | None], None]] = []

    def watch(self, callback: Callable[[str | None], None]) -> Callable[[], None]:
        self._watchers.append(callback)
        return lambda: self._watchers.remove(callback) if callback in self._watchers else None

    def announce(self) -> None:
        for callback in list(self._watchers):
            callback(None)


class FrontDatabase(Database):
    """The served database as a front sees it: open it with `FrontDatabase.open(FrontStorage(path),
    module)`, then `attach` the link."""

    link: WriterClient | None = None

    def attach(self, link: WriterClient) -> None:
        self.link = link
        link.on_notice = self._announced

    def _announced(self, notice: frames.Notice) -> None:
        """The writer committed: wake what reads the log here, as this process's own commits
        would (the commit and log taps) and as another node's announcement does (`watch`: the
        subscriptions' hub reads the log from where it is)."""
        for tap in list(self.hooks.commit_taps):
            tap()
        storage = self.storage
        if isinstance(storage, FrontStorage):
            storage.announce()
        if notice.logged:
            for tap in list(self.hooks.log_taps):
                tap()

    def _client(self) -> WriterClient:
        if self.link is None:
            raise WriterGone("this front has no link to the writer process")
        return self.link

    def _submit(self, job: Job) -> Future[Any]:
        """The call's future: on the event loop an asyncio one, which `ServerContext` awaits
        as it is (answers.py's `result`); on another thread a concurrent one."""
        if isinstance(job, CallJob):
            return cast("Future[Any]", self._client().call(job))
        if job.kind == "sql":  # runtime/sql.py's SqlJob: planned and checked here, run there
            sender = job.sender.to_bytes()
            return cast("Future[Any]", self._client().request(lambda i: frames.Sql(i, job.args_bytes, sender)))
        raise NotInFront(f"{job.kind} jobs run in the writer process only")

    def _run(self, job: Job) -> Future[Any]:
        return self._submit(job)

    def _submit_to(self, job: Job, outcome: Outcome) -> None:
        if isinstance(job, CallJob):
            self._client().call_to(job, outcome)
            return
        fut = self._submit(job)
        fut.add_done_callback(lambda done: pass_on(done, outcome))

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

    def fire_due(self, *args: Any, **kwargs: Any) -> tuple[int, Any]:
        raise NotInFront("the scheduler runs in the writer process only")
