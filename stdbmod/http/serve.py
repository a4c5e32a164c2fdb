"""`serve`: bind the port, publish the database at DATA_DIR if there is none, then serve it with
uvicorn.

SIGTERM and SIGINT stop it cleanly: uvicorn stops accepting connections and finishes the
requests in flight (each one answered only after its commit), then the app's lifespan stops the
scheduler and closes the database, which commits what is still queued. LMDB commits are atomic,
so a call is either acknowledged and on disk or not there at all. An LMDB panic makes the server
exit with status 70.
"""

from __future__ import annotations

import gc
import importlib
import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any, NamedTuple

import uvicorn

from ..errors import DatabaseNotFound, StdbError, StoragePanic
from ..local import identity, place, serve_lock
from ..local.datadir import keep_in_step, read_config
from ..local.modspec import RETRY_SPEC, LoadedModule, ModuleSpecError, canonical_spec, load_module
from ..local.publish import finish_interrupted, publish
from ..local.tokens import SigningKey, load_or_create_key
from ..runtime import Database
from ..runtime.logtrim import DEFAULT_LOG_KEEP, LogKeeper
from ..storage import private
from ..types import Identity
from . import inputs
from . import limits as limits_
from . import metrics_port as metrics_port_
from .app import create_app
from .lanes import Lanes
from .limits import DEFAULT_LIMITS, ConnectionLimits

log = logging.getLogger("stdbmod.http")

EXIT_PANIC = 70


class ServeError(StdbError):
    """The server cannot start as asked (bad module, bad token, unusable data directory)."""

    status_code = 400


# --- modules and owners ---------------------------------------------------------------------------


def resolve_module(data_dir: Path, module_path: str | None) -> LoadedModule:
    """The module to serve: MODULE if given, else the one DIR/stdbmod.json records (what `stdbmod
    publish` wrote), else the built-in task-retry module. Its `spec` is as stdbmod.json records
    it (a file made absolute)."""
    if module_path:
        spec = canonical_spec(module_path)
    else:
        try:
            config = read_config(data_dir)
        except ValueError as e:
            raise ServeError(str(e)) from None
        spec = config.module if config is not None else RETRY_SPEC
    try:
        loaded = load_module(spec)
    except ModuleSpecError as e:
        raise ServeError(str(e)) from None
    except Exception as e:  # the module's own code failed while importing
        raise ServeError(f"cannot load {spec}: {type(e).__name__}: {e}") from None
    return LoadedModule(spec, loaded.module, loaded.handlers)


def _owner(key: SigningKey, owner: Identity | None, owner_token: str | None) -> Identity | None:
    """Who owns a newly published database: `owner`, else the identity of `owner_token` (signed
    with this server's key), else None: the CLI's identity, as `stdbmod publish` makes it."""
    if owner is not None or not owner_token:
        return owner
    try:
        return key.verify_token(owner_token).identity
    except StdbError as e:
        raise ServeError(f"--owner-token: {e}") from None


def prepare(
    data_dir: Path, loaded: LoadedModule, key: SigningKey, *, owner: Identity | None = None, owner_token: str | None = None
) -> None:
    """Publish `loaded` at `data_dir` unless a database is there (as `stdbmod publish` does), and
    check that an existing one opens with it, so a mismatch is one clear line before the server
    starts. An existing database opened with another module than DIR/stdbmod.json records now
    records it (`keep_in_step`)."""
    try:
        db = Database.open(data_dir, loaded.module)
    except DatabaseNotFound:
        pass
    else:
        try:
            keep_in_step(data_dir, db, loaded.spec)
        finally:
            db.close()
        return
    who = _owner(key, owner, owner_token)
    try:
        done = publish(data_dir, loaded.spec, loaded, owner=who, key=key)
    except (identity.IdentityFileError, OSError) as e:
        raise ServeError(str(e)) from None
    if done.token_file is not None:
        print(
            f"stdbmod: the owner is the CLI's identity {done.owner.to_hex()}; a token for this server is in "
            f"{done.token_file} (keep it secret; `stdbmod identity show --data {data_dir}` prints one too)",
            file=sys.stderr,
        )
    print(f"stdbmod: published {loaded.spec} as {done.name} at {data_dir}", file=sys.stderr)


def start(
    path: Any, module_path: str | None, *, owner: Identity | None = None, owner_token: str | None = None
) -> tuple[LoadedModule, SigningKey, serve_lock.ServeLock | None]:
    """What `serve` does before it serves: take the directory (made private if new) for this
    process alone, finish a first start that was killed midway, then publish or check the
    database (`prepare`). The module, the signing key, and the lock to hold while serving (None
    for a PostgreSQL URL)."""
    lock = None
    try:
        if isinstance(path, Path):
            try:
                private.make_dir(path)
            except OSError as e:
                raise ServeError(f"cannot use {path}: {e.strerror}") from None
            lock = serve_lock.hold(path)  # one server per directory, before anything is published
            finish_interrupted(path)
        loaded = resolve_module(path, module_path)
        key = load_or_create_key(path)
        prepare(path, loaded, key, owner=owner, owner_token=owner_token)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    return loaded, key, lock


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to `host`:`port`, before anything is published: a port in use is one
    line, and the data directory stays as it was."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: restarts need not wait for TIME_WAIT
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ServeError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.set_inheritable(True)
    return sock


def _url(host: str, sock: socket.socket) -> str:
    return f"http://[{host}]:{sock.getsockname()[1]}" if ":" in host else f"http://{host}:{sock.getsockname()[1]}"


# --- serving --------------------------------------------------------------------------------------


def serve(
    data_dir: str | os.PathLike[str],
    host: str = "127.0.0.1",
    port: int = 3000,
    module_path: str | None = None,
    *,
    owner: Identity | None = None,
    owner_token: str | None = None,
    token_ttl: float | None = None,
    body_limit: int = inputs.DEFAULT_BODY_LIMIT,
    log_level: str = "info",
    access_log: bool = False,
    metrics_port: int | None = None,
    limits: ConnectionLimits = DEFAULT_LIMITS,
    log_keep: int = DEFAULT_LOG_KEEP,
    log_keep_interval: float = 60.0,
    workers: int = 0,
) -> int:
    """Serve the database at `data_dir` on `host`:`port` until SIGTERM/SIGINT, publishing
    `module_path` (see `resolve_module`) first when there is none, owned by `owner`, or the
    identity of `owner_token`, or the CLI's identity. Returns the exit status: 0, or 70 after a
    storage panic. Raises ServeError (and other StdbErrors) when it cannot start. `access_log`
    logs a line per request (at info level), which costs CPU on every request. `metrics_port`
    also serves GET /metrics without a token on 127.0.0.1:`metrics_port` (metrics_port.py).
    `limits` bound request heads, slow and idle connections and their number (guard.py).
    `workers` > 0 does the HTTP work in that many front processes beside this one, the writer
    (workers.py; docs/http.md "Choosing --workers")."""
    # a directory, or a PostgreSQL URL (several nodes may serve one database: docs/scaling.md)
    path: Any = data_dir if place.is_url(data_dir) else Path(data_dir)
    if workers and not isinstance(path, Path):
        raise ServeError("--workers needs a data directory (LMDB), not a PostgreSQL URL: serve it with --workers 0")
    sock = listen(host, port)
    metrics_socket = None
    try:
        if metrics_port is not None:
            try:
                metrics_socket = listen(metrics_port_.LOOPBACK, metrics_port)
            except ServeError as e:
                raise ServeError(f"--metrics-port {metrics_port}: {e}") from None
        loaded, key, lock = start(path, module_path, owner=owner, owner_token=owner_token)
    except BaseException:
        sock.close()
        if metrics_socket is not None:
            metrics_socket.close()
        raise
    # the bound port, so `--port 0` (a port the kernel picks, free by construction) can be found
    print(f"stdbmod: listening on {_url(host, sock)}", file=sys.stderr)
    if metrics_socket is not None:
        print(f"stdbmod: metrics without a token on {_url(metrics_port_.LOOPBACK, metrics_socket)}/metrics", file=sys.stderr)

    panicked = threading.Event()
    server: uvicorn.Server | None = None

    def on_panic(e: StoragePanic) -> None:
        log.critical("storage panic, shutting down: %s", e)
        panicked.set()
        if server is not None:
            server.should_exit = True

    limits, note = limits_.fit_descriptors(limits)
    if note is not None:
        print(f"stdbmod: {note}", file=sys.stderr)
    def open_database() -> Database:
        db = Database.open(path, loaded.module)
        if log_keep:
            LogKeeper(db, log_keep, log_keep_interval).start()  # ends with the database (runtime/logtrim.py)
        return db

    if workers:
        from . import workers as workers_

        # Each front holds its share of --max-connections (rounded up): the kernel spreads the
        # connections among them, so the server's total stays near the cap, not N times it.
        front = workers_.FrontConfig(
            data=str(path), module=loaded.spec, body_limit=body_limit, token_ttl=token_ttl, log_level=log_level, access_log=access_log,
            max_connections=-(-limits.max_connections // workers), header_timeout=limits.header_timeout, keep_alive_timeout=limits.keep_alive_timeout,
        )
        try:
            return workers_.run(open_database, sock, workers, front, metrics_socket, key)
        finally:
            sock.close()
            if metrics_socket is not None:
                metrics_socket.close()
            if lock is not None:
                lock.release()  # after the writer closed the database

    app = create_app(open_database, key=key, body_limit=body_limit, token_ttl=token_ttl, on_panic=on_panic)
    config = uvicorn_config(
        app, host=host, port=port, log_level=log_level, access_log=access_log, limits=limits, body_limit=body_limit, lanes=app.state.lanes
    )
    server = uvicorn.Server(config)
    _end_streams_on_exit(server, app)
    _tune_gc()
    try:
        with _quiet_signals():
            if metrics_socket is None:
                server.run(sockets=[sock])
            else:
                metrics_port_.run_both(server, sock, metrics_port_.side_server(app.state.metrics_app, config), metrics_socket)
    finally:
        if lock is not None:
            lock.release()  # after the app closed the database
    return EXIT_PANIC if panicked.is_set() else 0


def uvicorn_config(
    app: Any, *, host: str, port: int, log_level: str, access_log: bool, limits: ConnectionLimits, body_limit: int,
    lanes: Lanes | None = None,
) -> uvicorn.Config:
    """How `serve` (and each HTTP front of `serve --workers N`: front.py) runs uvicorn. `lanes`:
    the job routes' POSTs served by the protocol itself (lanes.py), not with `access_log` (its
    line is written on the ASGI way)."""
    stack = fast_stack()
    return uvicorn.Config(
        app, host=host, port=port, log_level=log_level, lifespan="on", timeout_graceful_shutdown=30, access_log=access_log,
        proxy_headers=False,  # nothing here reads the client's address; one ASGI layer less per request
        http=_protocol(stack, limits, None if access_log else lanes, body_limit), loop=stack.loop,
        timeout_keep_alive=limits.keep_alive_timeout,
        h11_max_incomplete_event_size=limits.max_head,  # h11 (without httptools) bounds a head by itself: a 400
        ws_max_size=body_limit,  # one WebSocket message at most, as a request body; pings (20 s) find dead peers
    )


def _end_streams_on_exit(server: uvicorn.Server, app: Any) -> None:
    """uvicorn waits up to its graceful timeout for open responses before it stops, and a
    `logs?follow=true` stream never ends by itself: end them when the stop signal comes."""
    handle_exit = server.handle_exit

    def on_exit(sig: int, frame: FrameType | None) -> None:
        app.state.context.stop_followers()
        handle_exit(sig, frame)

    server.handle_exit = on_exit  # type: ignore[method-assign]


GC_GEN0_THRESHOLD = 10_000


def _tune_gc() -> None:
    """Each request allocates a few hundred container objects that reference counting frees,
    yet with CPython's default threshold (700) the cycle collector still ran about every 20
    requests, walking what had just been allocated: ~75 ms per 6,000 requests under load, and
    ~15-30 ms with a 10,000 threshold. Freezing what startup made (modules, the app) keeps it
    out of every later full collection. Garbage cycles are still collected, just in bigger
    rounds."""
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


class Stack(NamedTuple):
    http: str  # uvicorn's `http` setting
    loop: str  # and its `loop`


def fast_stack() -> Stack:
    """uvicorn's C-backed stack (`uvicorn[standard]`: the httptools parser, the uvloop event
    loop) when it is installed, else its pure-Python one (h11, asyncio). httptools parses a
    request for a fraction of h11's CPU, and uvloop does its socket I/O without giving up the GIL,
    so the event loop never queues behind the writer thread for it."""
    return Stack(http="httptools" if _importable("httptools") else "h11", loop="uvloop" if _importable("uvloop") else "asyncio")


def _protocol(stack: Stack, limits: ConnectionLimits, lanes: Lanes | None, body_limit: int) -> Any:
    """uvicorn's `http` setting: with httptools, its protocol bounded by `limits` (guard.py,
    imported only then: it subclasses httptools' protocol), serving `lanes` if given. h11 bounds
    a head's size by itself (`h11_max_incomplete_event_size`, a 400), and has uvicorn's
    keep-alive timeout, but no head deadline, no connection cap (docs/reliability.md) and no lanes."""
    if stack.http != "httptools":
        return stack.http
    from .guard import protocol

    if lanes is None:
        return protocol(limits)
    from .laned_protocol import laned

    return laned(protocol(limits), lanes, body_limit)


def _importable(name: str) -> bool:
    """Whether `name` imports: not only installed, but loadable (a wheel built for another
    platform is installed and still fails), since uvicorn would fail at startup otherwise."""
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


class _quiet_signals:
    """uvicorn re-raises the SIGTERM/SIGINT that stopped it once it is done, which would turn a
    clean shutdown into death by signal (or a KeyboardInterrupt traceback). Absorb that one."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __enter__(self) -> None:
        self._saved: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            self._saved = {s: signal.signal(s, self._absorb) for s in self.SIGNALS}

    @staticmethod
    def _absorb(sig: int, frame: FrameType | None) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._saved.items():
            signal.signal(s, handler)
