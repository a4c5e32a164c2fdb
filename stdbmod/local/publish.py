"""Publishing a data directory: what `stdbmod publish` and `stdbmod serve` (on first start) do.

A published directory holds everything the CLI and the server need to open it again:

- ``data.mdb`` (and ``lock.mdb``, which LMDB makes on the first open): the database, its module's init already run;
- ``stdbmod.json``: which module's code opens it (the runtime stores the schema, not the code);
- ``jwt.key``: the server's signing key (0600);
- ``owner.token``: a token for the owner signed with that key (0600), when the owner is the CLI's
  own identity (an owner named by a token already holds one).

A publish that fails leaves the directory as it was: nothing it created stays behind.

A publish is atomic from the CLI's point of view: the database is made (its init run) in
``DIR/.publishing/``, ``stdbmod.json`` is written, and only then does ``data.mdb`` move into DIR,
in one rename. A process killed before that rename leaves no database (every command says "no
database at DIR"), and the next publish or `serve` removes what it left (`finish_interrupted`);
killed after it, the database is whole. Files are written under temporary names and renamed, so
none is ever half written, and temporaries of killed processes are removed the same way.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..errors import CallError
from ..runtime import Database
from ..storage import private
from ..types import Identity
from . import identity, place, serve_lock
from .datadir import CONFIG_NAME, DataDirConfig, read_config, write_config
from .modspec import RETRY_SPEC, LoadedModule, ModuleSpecError, canonical_spec, load_module
from .tokens import KEY_FILE, OWNER_TOKEN_FILE, SigningKey, load_or_create_key, write_secret_file

DATA_FILES = ("data.mdb", "lock.mdb")
"""LMDB's files in a data directory."""


class DatabaseExists(CallError):
    """The directory already holds a database."""

    status_code = 409


@dataclass(frozen=True)
class Published:
    data: str  # the directory, or the URL (without its password)
    spec: str  # as recorded in stdbmod.json
    name: str
    identity: Identity  # the database's own
    owner: Identity
    token_file: str | None  # DIR/owner.token (or the row of the database), when one was written


def module_to_publish(spec: str | None) -> tuple[str, LoadedModule]:
    """MODULE as it will be recorded (a file made absolute) and loaded; without one, the
    built-in task-retry module."""
    if spec is None:
        try:
            return RETRY_SPEC, load_module(RETRY_SPEC)
        except ModuleSpecError:
            raise ModuleSpecError("the built-in task-retry module (stdbmod.retry) is not available; name a MODULE") from None
    return canonical_spec(spec), load_module(spec)


STAGING = ".publishing"
"""Where `publish` makes the database before it moves into the directory."""


def finish_interrupted(path: Path) -> None:
    """Clean up after a publish killed midway (nothing to do for one that never ran): its
    staging directory; the stdbmod.json it recorded, if its database never moved in; the
    temporary files of processes that are gone. No other process may be publishing there."""
    if not path.is_dir():
        return
    staging = path / STAGING
    if staging.exists():
        if not place.holds_storage(path):
            place.remove_file(path, CONFIG_NAME)  # recorded just before the rename that never came
        shutil.rmtree(staging, ignore_errors=True)
    place.remove_stale_temps(path)


def holds_database(data: str | os.PathLike[str]) -> bool:
    """Whether `data` already holds a database (its LMDB file or its stdbmod.json)."""
    return place.holds_storage(data) or read_config(data) is not None


def publish(
    data: str | os.PathLike[str],
    spec: str,
    loaded: LoadedModule,
    *,
    owner: Identity | None = None,
    name: str | None = None,
    key: SigningKey | None = None,
) -> Published:
    """Create the database at `data` with `loaded` (recorded as `spec`) and run its init.

    The owner is `owner`, else the CLI's identity (made if there is none yet), for which a token
    signed with the directory's key (`key`, else DIR/jwt.key, made if absent) goes to
    DIR/owner.token. Refuses a directory that already holds a database (DatabaseExists).
    `data` may be a PostgreSQL URL: the files are then rows of the database (local/place.py)."""
    if place.is_url(data):
        return _publish_in_database(str(data), spec, loaded, owner=owner, name=name, key=key)
    path = Path(data)
    finish_interrupted(path)
    if holds_database(path):
        raise DatabaseExists(f"a database already exists at {path}")
    existed = path.is_dir()
    before = set(os.listdir(path)) if existed else set()
    try:
        private.make_dir(path)
        key = key or load_or_create_key(path)
        token_file: Path | None = None
        if owner is None:
            me = identity.load_or_create()
            owner = me.value
            token_file = path / OWNER_TOKEN_FILE
            write_secret_file(token_file, key.issue_token(key.claims(me.subject, issuer=me.issuer)) + "\n", replace=True)
        staging = path / STAGING
        db = Database.create(staging, loaded.module, owner=owner, name=name)
        try:
            done = Published(str(path), spec, db.name, db.identity, db.owner, str(token_file) if token_file else None)
        finally:
            db.close()
        write_config(path, DataDirConfig(module=spec, name=done.name))
        os.rename(staging / "data.mdb", path / "data.mdb")  # the moment the database exists
        place.sync_dir(path)
        shutil.rmtree(staging)  # and its lock.mdb: LMDB makes one beside data.mdb on first open
        return done
    except BaseException:
        _undo(path, existed, before)
        raise


def clear(data: str | os.PathLike[str], spec: str | None) -> Published:
    """`spacetime publish -c`: wipe every row of the database at `data` (an LMDB directory) and
    run init again, keeping its name, its own identity and its owner, with MODULE `spec` (None:
    the one stdbmod.json records). The old files go only once the new database is made beside
    them; a failure leaves the directory as it was. No server may be serving it meanwhile."""
    if place.is_url(data):
        raise CallError("--clear works on a directory; for PostgreSQL, publish into a fresh schema (?schema=NAME)")
    path = Path(data)
    config = read_config(path)
    if config is None or not place.holds_storage(path):
        raise CallError(f"no database at {path} to clear")
    spec = canonical_spec(spec) if spec is not None else config.module
    loaded = load_module(spec)
    lock = serve_lock.hold(path)  # no server may serve it meanwhile, nor start while it is cleared
    try:
        with Database.open(path, loaded.module) as old:  # the module must open it: same checks as ever
            meta = old.meta
        fresh = path / ".clearing"
        shutil.rmtree(fresh, ignore_errors=True)
        try:
            db = Database.create(fresh, loaded.module, owner=meta.owner, name=meta.name, identity=meta.identity)
            db.close()
            for f in DATA_FILES:
                os.replace(fresh / f, path / f)
        finally:
            shutil.rmtree(fresh, ignore_errors=True)
        write_config(path, DataDirConfig(module=spec, name=meta.name))
    finally:
        lock.release()
    return Published(str(path), spec, meta.name, meta.identity, meta.owner, None)


def _publish_in_database(
    data: str, spec: str, loaded: LoadedModule, *, owner: Identity | None, name: str | None, key: SigningKey | None
) -> Published:
    """`publish` into a PostgreSQL schema. A failure leaves no file rows it wrote; the storage
    tables it created stay, empty of any database (a publish later can use them)."""
    if holds_database(data):
        raise DatabaseExists(f"a database already exists at {place.show(data)}")
    before = {f for f in (KEY_FILE, OWNER_TOKEN_FILE, CONFIG_NAME) if place.read_file(data, f) is not None}
    try:
        key = key or load_or_create_key(data)
        token_file: str | None = None
        if owner is None:
            me = identity.load_or_create()
            owner = me.value
            place.write_file(data, OWNER_TOKEN_FILE, (key.issue_token(key.claims(me.subject, issuer=me.issuer)) + "\n").encode(), secret=True)
            token_file = place.describe(data, OWNER_TOKEN_FILE)
        db = Database.create(data, loaded.module, owner=owner, name=name)
        try:
            write_config(data, DataDirConfig(module=spec, name=db.name))
            return Published(place.show(data), spec, db.name, db.identity, db.owner, token_file)
        finally:
            db.close()
    except BaseException:
        for f in (KEY_FILE, OWNER_TOKEN_FILE, CONFIG_NAME):
            if f not in before:
                place.remove_file(data, f)
        raise


def _undo(path: Path, existed: bool, before: set[str]) -> None:
    """Put the directory back as it was before a failed publish."""
    if not existed:
        shutil.rmtree(path, ignore_errors=True)
        return
    shutil.rmtree(path / STAGING, ignore_errors=True)
    for f in (*DATA_FILES, KEY_FILE, OWNER_TOKEN_FILE, CONFIG_NAME):
        if f not in before:
            try:
                os.unlink(path / f)
            except FileNotFoundError:
                pass
