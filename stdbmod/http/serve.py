"""`serve`: publish the database at DATA_DIR if there is none, then serve it with uvicorn.

SIGTERM and SIGINT stop it cleanly: uvicorn stops accepting connections and finishes the
requests in flight (each one answered only after its commit), then the app's lifespan stops the
scheduler and closes the database, which commits what is still queued. LMDB commits are atomic,
so a call is either acknowledged and on disk or not there at all. An LMDB panic makes the server
exit with status 70.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

import uvicorn

from ..errors import DatabaseNotFound, StdbError, StoragePanic
from ..module import Module
from ..runtime import Database
from ..types import Identity
from . import inputs
from .app import create_app
from .auth import OWNER_TOKEN_FILE, SigningKey, load_or_create_key, write_secret_file

log = logging.getLogger("stdbmod.http")

EXIT_PANIC = 70


class ServeError(StdbError):
    """The server cannot start as asked (bad module, bad token, unusable data directory)."""

    status_code = 400


# --- modules --------------------------------------------------------------------------------------


def load_module(spec: str) -> Module:
    """The `Module` named by `spec`: ``path/to/file.py[:attr]`` or ``package.module[:attr]``.
    Without `attr`, the one `Module` (or object with a `.module` Module, like the task-retry
    module's `RetryModule`) defined at the top level."""
    where, _, attr = spec.partition(":") if not os.path.exists(spec) else (spec, "", "")
    try:
        source = _import(where)
    except StdbError:
        raise
    except Exception as e:
        raise ServeError(f"cannot import {where}: {type(e).__name__}: {e}") from None
    if attr:
        found: Any = getattr(source, attr, None)
        module = found.module if isinstance(getattr(found, "module", None), Module) else found
        if not isinstance(module, Module):
            raise ServeError(f"{where} has no Module named {attr}")
        return module
    direct = {n: v for n, v in vars(source).items() if isinstance(v, Module)}
    if not direct:
        direct = {n: v.module for n, v in vars(source).items() if isinstance(getattr(v, "module", None), Module)}
    if len(direct) != 1:
        names = ", ".join(sorted(direct)) or "none"
        raise ServeError(f"{where} must define exactly one Module (found: {names}); name it as {where}:NAME")
    return next(iter(direct.values()))


def _import(where: str) -> ModuleType:
    if where.endswith(".py") or os.sep in where:
        path = Path(where)
        if not path.is_file():
            raise ServeError(f"no such module file: {where}")
        name = f"stdbmod_user_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ServeError(f"cannot load {where}")
        source = importlib.util.module_from_spec(spec)
        sys.modules[name] = source
        spec.loader.exec_module(source)
        return source
    return importlib.import_module(where)


def default_module() -> Module:
    """The built-in task-retry module (no handlers: every task waits for workers)."""
    from ..retry import default_module as module

    return module


# --- publishing -----------------------------------------------------------------------------------


def _owner(key: SigningKey, data_dir: Path, owner: Identity | None, owner_token: str | None) -> Identity:
    """Who owns a newly published database: `owner`, else the identity of `owner_token` (signed
    with this server's key), else a fresh identity whose token goes to DATA_DIR/owner.token."""
    if owner is not None:
        return owner
    if owner_token:
        try:
            return key.verify_token(owner_token).identity
        except StdbError as e:
            raise ServeError(f"--owner-token: {e}") from None
    claims = key.claims()
    token = key.issue_token(claims)
    write_secret_file(data_dir / OWNER_TOKEN_FILE, token + "\n", replace=True)
    print(f"stdbmod: owner identity {claims.identity}; its token (keep it secret) is in {data_dir / OWNER_TOKEN_FILE}:", file=sys.stderr)
    print(token, file=sys.stderr)
    return claims.identity


def prepare(data_dir: Path, module: Module, key: SigningKey, *, owner: Identity | None = None, owner_token: str | None = None) -> None:
    """Publish `module` at `data_dir` unless a database is there; check an existing one opens
    with `module` (so a mismatch is one clear line, before the port is bound)."""
    try:
        Database.open(data_dir, module).close()
        return
    except DatabaseNotFound:
        pass
    who = _owner(key, data_dir, owner, owner_token)
    Database.create(data_dir, module, owner=who).close()
    print(f"stdbmod: published {module.name} at {data_dir}", file=sys.stderr)


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
    module: Module | None = None,
) -> int:
    """Serve the database at `data_dir` until SIGTERM/SIGINT; the process exit status."""
    path = Path(data_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ServeError(f"cannot use {path}: {e.strerror}") from None
    key = load_or_create_key(path)
    if module is None:
        module = load_module(module_path) if module_path else default_module()
    prepare(path, module, key, owner=owner, owner_token=owner_token)

    panicked = threading.Event()
    server: uvicorn.Server | None = None

    def on_panic(e: StoragePanic) -> None:
        log.critical("storage panic, shutting down: %s", e)
        panicked.set()
        if server is not None:
            server.should_exit = True

    app = create_app(lambda: Database.open(path, module), key=key, body_limit=body_limit, token_ttl=token_ttl, on_panic=on_panic)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on", timeout_graceful_shutdown=30)
    server = uvicorn.Server(config)
    with _quiet_signals():
        server.run()
    return EXIT_PANIC if panicked.is_set() else 0


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
