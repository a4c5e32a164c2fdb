"""The writer's end of one front's link (frames.py): calls in, each answered after its commit.

Two threads per front: one reads frames and queues each call on the database's writer (so
calls from every front share its group commits), one sends the replies, coalescing those that
are ready into one write. The writer thread itself only puts a call's outcome on the sender's
queue (`_Settled`, not a `Future`): pickling and sending stay off it. A front that goes away
leaves its queued calls to commit or fail as they would have; their replies go nowhere (its
clients never got an answer).
"""

from __future__ import annotations

import logging
import pickle
import queue
import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import msgspec

from ..errors import ArgumentError, StdbError
from ..runtime import Database
from ..runtime.calls import pass_on
from ..runtime.jobs import CallJob
from ..types import ConnectionId, Identity
from . import frames

log = logging.getLogger("stdbmod.http")

RECV = 1 << 16


def failure(e: BaseException) -> frames.Failure:
    """An exception as a reply carries it: its class and state pickled when they pickle (the
    front raises the same exception, so the app maps it to the same answer), and its status,
    code and message always (for a front that cannot rebuild it)."""
    try:
        pickled = pickle.dumps((type(e), e.args, dict(vars(e))), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        pickled = b""
    return frames.Failure(type(e).__name__, str(e), int(getattr(e, "status_code", 500)), getattr(e, "code", None), pickled)


COMMITTED, LOGGED = "committed", "logged"
# a reply (request id, value, error, the call's job), a commit or log tap's mark, or None: closed
_Item = tuple[int, Any, "BaseException | None", "CallJob | None"] | str | None


class _Settled:
    """Where the writer settles one call of the link (`Database.submit_job_to`): straight onto
    the sender's queue. A `Future` in its place built a condition variable and took its lock at
    each step, on the writer's thread and the sender's."""

    __slots__ = ("_ready", "_id", "_job", "_done")

    def __init__(self, ready: queue.SimpleQueue[_Item], req_id: int, job: CallJob | None) -> None:
        self._ready = ready
        self._id = req_id
        self._job = job
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, value: Any) -> None:
        self._done = True
        self._ready.put((self._id, value, None, self._job))

    def set_exception(self, error: BaseException) -> None:
        self._done = True
        self._ready.put((self._id, None, error, self._job))


class WriterLink:
    """Serves one front's socket until it closes; `run` blocks (call it on a thread of its own)."""

    def __init__(
        self, db: Database, sock: socket.socket, lifecycle: ThreadPoolExecutor, scrape: Callable[[], bytes], dash: Callable[[frames.Dash], Any]
    ) -> None:
        """`scrape`: a front's /metrics (metrics_fronts.py); `dash`: a front's question to the
        dashboard's state (dashboard/desk.py); each returns its answer or raises the error to answer."""
        self.db = db
        self.sock = sock
        self._lifecycle = lifecycle  # connect/disconnect wait for their commit, a scrape counts: off the reading thread
        self._scrape = scrape
        self._dash = dash
        # replies ready to send; None: the link closed. A SimpleQueue's put is C code that wakes
        # the sender without the Python-level Condition of threading.Event, whose set() had
        # taken ~10% of the writer thread's time.
        # Besides replies: COMMITTED and LOGGED, put by the database's commit and log taps.
        self._ready: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._marked: set[str] = set()  # the marks in `_ready`

    def run(self) -> None:
        sender = threading.Thread(target=self._send_loop, name="stdbmod-link-send", daemon=True)
        sender.start()
        reader = frames.FrameReader()
        taps = self.db.hooks
        committed, logged = (lambda: self._mark(COMMITTED)), (lambda: self._mark(LOGGED))
        taps.commit_taps.append(committed)
        taps.log_taps.append(logged)
        try:
            while True:
                try:
                    data = self.sock.recv(RECV)
                except OSError:
                    break
                if not data:
                    break
                for body in reader.feed(data):
                    self._take(frames.request_decoder.decode(body))
        except (frames.FrameTooLarge, msgspec.DecodeError) as e:
            # A frame this side cannot read has an id it cannot answer: closing the link fails
            # every call the front still waits for (503) at once, and the front is replaced.
            log.error("a front sent a frame this writer cannot read; closing its link: %s", e)
        finally:
            taps.commit_taps.remove(committed)
            taps.log_taps.remove(logged)
            self._ready.put(None)
            sender.join()
            self.sock.close()

    def _take(self, req: frames.Request) -> None:
        try:
            if isinstance(req, frames.Call):
                job = self._job(req)
                self.db.submit_job_to(job, _Settled(self._ready, req.id, job))
                return
            if isinstance(req, frames.Sql):
                from ..runtime.sql import SqlJob  # sqlglot is slow to import: only when SQL comes

                self.db.submit_job_to(SqlJob.from_record(self.db, req.args, Identity(req.sender)), _Settled(self._ready, req.id, None))
                return
            fut: Future[Any]
            if isinstance(req, frames.Connect):
                fut = self._lifecycle.submit(self._connect, Identity(req.sender))
            elif isinstance(req, frames.Disconnect):
                fut = self._lifecycle.submit(self.db.disconnect, Identity(req.sender), ConnectionId(req.connection_id))
            elif isinstance(req, frames.Dash):
                fut = self._lifecycle.submit(self._dash, req)
            else:
                fut = self._lifecycle.submit(self._scrape)
        except Exception as e:  # refused before it was queued (unknown reducer, bad arguments)
            self._ready.put((req.id, None, e, None))
            return
        settled = _Settled(self._ready, req.id, None)
        fut.add_done_callback(lambda f: pass_on(f, settled))

    def _connect(self, sender: Identity) -> bytes:
        return self.db.connect(sender).to_bytes()

    def _job(self, req: frames.Call) -> CallJob:
        """The call as `Database.submit` would have made it: the front already decoded and
        checked the arguments against the reducer's types, and sent the commit log's bytes of
        them; decoding those here is the one check left (a front is our own process, but its
        bytes are still read as data)."""
        sender = Identity(req.sender)
        r = self.db.reducer(req.reducer, sender)
        try:
            args = msgspec.structs.astuple(r.msgpack_decoder.decode(req.args))
        except msgspec.DecodeError as e:
            raise ArgumentError(r.explain(e)) from None
        conn = None if req.connection_id is None else ConnectionId(req.connection_id)
        return CallJob(kind="call", reducer=req.reducer, sender=sender, connection_id=conn, args_bytes=req.args, reducer_def=r, args=args)

    def _mark(self, what: str) -> None:
        """A commit tap (on the writer thread): one mark of each kind waits at most, so a front
        that stops reading costs the writer its unsent replies, not one item per commit."""
        if what not in self._marked:
            self._marked.add(what)
            self._ready.put(what)

    def _send_loop(self) -> None:
        ready = self._ready
        while True:
            batch = [ready.get()]
            while not ready.empty():  # what else is ready goes in the same write
                batch.append(ready.get())
            out = [self._reply(*item) for item in batch if isinstance(item, tuple)]
            marks = [m for m in batch if isinstance(m, str)]
            self._marked.difference_update(marks)  # before the send: a commit from now on marks again
            if marks:  # one wake-up for the commits of this round
                out.append(frames.encode(frames.Notice(logged=LOGGED in batch)))
            if out:
                try:
                    self.sock.sendall(b"".join(out))
                except OSError:
                    return  # the front is gone: the reading side ends too
            if None in batch:
                return

    @staticmethod
    def _reply(req_id: int, value: Any, error: BaseException | None, job: CallJob | None) -> bytes:
        # what a subscriber's call is told by (runtime/subscriptions.py): its record, its time
        offset = None if job is None else job.offset
        ts = None if job is None or job.timestamp is None else job.timestamp.micros
        if error is not None:
            return frames.encode(frames.Reply(req_id, failure=failure(error), offset=offset, timestamp=ts))
        try:
            return frames.encode(frames.Reply(req_id, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), offset=offset, timestamp=ts))
        except Exception as err:  # committed, but its result cannot travel: say so rather than hang
            log.error("the result of a call cannot be sent to its front: %s", err)
            lost = StdbError(f"the call committed, but its result cannot be sent to the HTTP front: {err}")
            return frames.encode(frames.Reply(req_id, failure=failure(lost)))
