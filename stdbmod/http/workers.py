"""`serve --workers N`: this process is the writer, N front processes do the HTTP work.

The writer owns the `Database` (its writer thread and group commit, the scheduler, the log
keeper, DIR/serve.lock, held by `serve`) and serves no HTTP. Each front (front.py, started as
`python -m stdbmod.http.front`) inherits the listening socket, so the kernel hands each new
connection to one of them, and one end of a socketpair made for it: its link (frames.py,
writer_link.py). A front parses, authenticates, validates, reads (its own read-only LMDB
environment) and renders; each write goes over its link and is answered after its commit.

A front that dies (killed, crashed) is started again; what it had sent commits or fails as in
one process, and its clients, whose connections died with it, were never told it did. A front
that could not start (exit status `front.CANNOT_START`) is not started again; when none is left
the server stops. SIGTERM/SIGINT stop the fronts first (each finishes its requests, whose
commits the writer still makes), then the scheduler and the database. A storage panic stops
everything with status 70, as in one process.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import FrameType
from typing import TYPE_CHECKING, Any

import msgspec

from ..errors import StoragePanic
from ..local.tokens import SigningKey
from ..runtime import Database, Scheduler
from . import frames
from .errors import HttpError
from .metrics_extras import DASHBOARD_MISSING, METRICS_MISSING, installed
from .metrics_feed import Feed
from .writer_link import WriterLink

if TYPE_CHECKING:
    from .dashboard.desk import LocalDesk
    from .metrics_fronts import WriterMetrics

log = logging.getLogger("stdbmod.http")

EXIT_PANIC = 70
STOP_WAIT = 40.0  # seconds for a front to finish its requests (uvicorn's own limit is 30)


class FrontConfig(msgspec.Struct, kw_only=True):
    """What a front needs to serve as `serve` would (passed as JSON on its command line)."""

    data: str
    module: str
    body_limit: int
    token_ttl: float | None
    log_level: str
    access_log: bool
    max_connections: int
    header_timeout: float
    keep_alive_timeout: int
    listen_fd: int = -1
    link_fd: int = -1
    metrics_fd: int = -1  # --metrics-port's socket, served by the first front
    metrics_dir: str | None = None  # where the front keeps its metrics (metrics_fronts.py); None: no metrics
    # seconds a front keeps answering 503 after its writer went away, before it exits itself
    writer_grace: float = 10.0


class _Stop:
    """A flag the signal handlers, the panic hook and the front watchers set, and the main
    thread waits for: a pipe, since a signal handler must not take a lock the thread it
    interrupts may hold (threading.Event's). It is also the signals' wake-up descriptor
    (`signal.set_wakeup_fd`): the kernel may deliver SIGTERM to any thread, and only a byte on
    the pipe then gets the main thread out of its read to run the handler."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)  # set_wakeup_fd's rule
        self._set = False

    @property
    def wakeup_fd(self) -> int:
        return self._w

    def set(self) -> None:
        if self._set:
            return  # written once: after `close` the descriptor may be another file's
        self._set = True
        try:
            os.write(self._w, b"x")
        except OSError:
            pass

    def is_set(self) -> bool:
        return self._set

    def wait(self) -> None:
        while not self._set:
            os.read(self._r, 1)

    def close(self) -> None:
        os.close(self._r)
        os.close(self._w)


class _Front:
    def __init__(self, index: int) -> None:
        self.index = index
        self.proc: subprocess.Popen[bytes] | None = None


class Writer:
    def __init__(self, db: Database, sock: socket.socket, config: FrontConfig, metrics_sock: socket.socket | None) -> None:
        self.db = db
        self.metrics_sock = metrics_sock
        self.metrics: WriterMetrics | None = None  # the fronts' /metrics (metrics_fronts.py); none without prometheus-client
        self.desk: LocalDesk | None = None  # the fronts' dashboard state (dashboard/desk.py); none without jinja2
        self.sock = sock
        self.config = config
        self.stop = _Stop()
        self.panicked = threading.Event()
        self.lifecycle = ThreadPoolExecutor(4, thread_name_prefix="stdbmod-lifecycle")
        self.fronts: list[_Front] = []
        self._lock = threading.Lock()

    def spawn(self, front: _Front) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            fds = [self.sock.fileno(), theirs.fileno()]
            if front.index == 0 and self.metrics_sock is not None:
                fds.append(self.metrics_sock.fileno())
            config = msgspec.structs.replace(
                self.config, listen_fd=fds[0], link_fd=fds[1], metrics_fd=fds[2] if len(fds) > 2 else -1,
                metrics_dir=None if self.metrics is None else self.metrics.dir,
            )
            with self._lock:
                if self.stop.is_set():
                    mine.close()
                    return
                front.proc = subprocess.Popen(
                    [sys.executable, "-m", "stdbmod.http.front", msgspec.json.encode(config).decode()],
                    pass_fds=fds,
                    env=None if self.metrics is None else self.metrics.front_env(),
                )
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        link = WriterLink(self.db, mine, self.lifecycle, self.scrape, self.dash)
        threading.Thread(target=link.run, name=f"stdbmod-link-{front.index}", daemon=True).start()
        threading.Thread(target=self._watch, args=(front, front.proc), name=f"stdbmod-front-{front.index}", daemon=True).start()

    def _watch(self, front: _Front, proc: subprocess.Popen[bytes]) -> None:
        from .front import CANNOT_START

        code = proc.wait()
        _clear_stale_readers(self.db)  # a front killed in a read leaves its LMDB reader slot behind
        if self.metrics is not None:
            self.metrics.front_ended(proc.pid)
        if self.stop.is_set():
            return
        if code == CANNOT_START:
            log.error("HTTP front %d could not start; it is not started again", front.index)
            with self._lock:
                front.proc = None
                if all(f.proc is None for f in self.fronts):
                    log.critical("no HTTP front is left: stopping")
                    self.stop.set()
            return
        log.warning("HTTP front %d (pid %d) ended with status %s; starting another", front.index, proc.pid, code)
        self.spawn(front)

    def scrape(self) -> bytes:
        if self.metrics is None:
            raise HttpError(501, METRICS_MISSING)
        return self.metrics.render()

    def dash(self, req: frames.Dash) -> Any:
        if self.desk is None:
            raise HttpError(501, DASHBOARD_MISSING.strip())
        return self.desk.answer(req)

    def on_panic(self, e: StoragePanic) -> None:
        log.critical("storage panic, shutting down: %s", e)
        self.panicked.set()
        self.stop.set()

    def stop_fronts(self) -> None:
        with self._lock:
            procs = [f.proc for f in self.fronts if f.proc is not None]
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(STOP_WAIT)
            except subprocess.TimeoutExpired:
                log.error("HTTP front pid %d did not stop within %.0f s: killing it", p.pid, STOP_WAIT)
                p.kill()
                p.wait()


def run(
    open_database: Callable[[], Database], sock: socket.socket, workers: int, config: FrontConfig, metrics_sock: socket.socket | None, key: SigningKey
) -> int:
    """Serve until SIGTERM/SIGINT with `workers` fronts (the first also serves `metrics_sock`,
    --metrics-port, if given); the exit status (0, or 70 after a storage panic). `key`: the
    server's signing key (the dashboard's sessions and tickets are signed with keys derived from it)."""
    db = open_database()
    writer = Writer(db, sock, config, metrics_sock)
    db.hooks.on_panic = writer.on_panic
    scheduler: Scheduler | None = None
    saved: dict[int, object] = {}
    saved_wakeup = -1
    own_feed: Feed | None = None
    try:
        writer.metrics = _writer_metrics(db)
        if installed("jinja2"):
            from .dashboard.desk import LocalDesk

            if writer.metrics is not None:  # its feed counts the dashboard's throughput too
                feed = writer.metrics.feed
            else:
                feed = own_feed = Feed()
                feed.attach(db)
            writer.desk = LocalDesk(key, feed)
        db.disconnect_dangling()  # before any front: connections a crash left open
        scheduler = Scheduler(db).start()

        def on_signal(sig: int, frame: FrameType | None) -> None:
            writer.stop.set()

        if threading.current_thread() is threading.main_thread():
            saved = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
            saved_wakeup = signal.set_wakeup_fd(writer.stop.wakeup_fd)
        writer.fronts = [_Front(i) for i in range(workers)]
        for front in writer.fronts:
            writer.spawn(front)
        print(f"stdbmod: serving with {workers} HTTP front process(es) and this writer (pid {os.getpid()})", file=sys.stderr)
        writer.stop.wait()
    finally:
        writer.stop.set()
        writer.stop_fronts()
        if scheduler is not None:
            scheduler.stop()
        writer.lifecycle.shutdown(wait=True)
        if writer.metrics is not None:
            writer.metrics.close()
        if own_feed is not None:
            own_feed.detach()
        db.close()
        if saved:
            signal.set_wakeup_fd(saved_wakeup)
        for s, handler in saved.items():
            signal.signal(s, handler)  # type: ignore[arg-type]
        writer.stop.close()
    return EXIT_PANIC if writer.panicked.is_set() else 0


def _writer_metrics(db: Database) -> WriterMetrics | None:
    if not installed("prometheus_client"):
        return None
    from .metrics_fronts import WriterMetrics

    return WriterMetrics(db)


def _clear_stale_readers(db: Database) -> None:
    clear = getattr(db.storage, "clear_stale_readers", None)
    if clear is not None:
        try:
            clear()
        except Exception as e:  # only housekeeping: the next front's reads still work
            log.warning("could not clear stale LMDB readers: %s", e)
