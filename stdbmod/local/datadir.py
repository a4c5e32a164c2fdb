"""A database directory as the CLI sees it: the LMDB files plus ``stdbmod.json``.

The runtime stores a database's schema but not where its module's code lives, so `publish`
records the MODULE spec in ``DIR/stdbmod.json`` and every other command reads it back to open
the database. ``--module`` overrides it (the code moved, or a new version of it): opening with
another module stores that module's schema (an automatic migration), after which the recorded
module may no longer open the database, so the record follows: a database opened with an
override records the override (`keep_in_step`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

import msgspec

from ..errors import DatabaseNotFound
from ..runtime import Database
from . import place
from .modspec import LoadedModule, canonical_spec, load_module

CONFIG_NAME = "stdbmod.json"


class DataDirConfig(msgspec.Struct, frozen=True):
    module: str
    name: str
    format: int = 1


def write_config(data: str | os.PathLike[str], config: DataDirConfig) -> None:
    place.write_file(data, CONFIG_NAME, msgspec.json.format(msgspec.json.encode(config)) + b"\n")


def read_config(data: str | os.PathLike[str]) -> DataDirConfig | None:
    raw = place.read_file(data, CONFIG_NAME)
    if raw is None:
        return None
    try:
        return msgspec.json.decode(raw, type=DataDirConfig)
    except msgspec.DecodeError as e:
        raise ValueError(f"{place.describe(data, CONFIG_NAME)} is damaged: {e}") from None


def module_for(data: str, override: str | None) -> LoadedModule:
    if not place.exists(data):
        raise DatabaseNotFound(f"no database at {data} (no such directory)")
    if override:
        return load_module(override)
    config = read_config(data)
    if config is None:
        if not place.holds_storage(data):
            raise DatabaseNotFound(f"no database at {place.show(data)} (publish one first)")
        raise DatabaseNotFound(f"{place.show(data)} has no {CONFIG_NAME} naming its module; pass --module")
    return load_module(config.module)


def keep_in_step(data: str | os.PathLike[str], db: Database, spec: str) -> bool:
    """After `db` opened with the module `spec`: record `spec` in DIR/stdbmod.json if it records
    another (the open stored that module's schema); whether it did. Says so on stderr."""
    spec = canonical_spec(spec)
    config = read_config(data)
    if config is not None and config.module == spec:
        return False
    write_config(data, DataDirConfig(module=spec, name=db.name))
    was = f" (was {config.module})" if config is not None else ""
    print(f"stdbmod: {place.describe(data, CONFIG_NAME)} now records the module {spec}{was}", file=sys.stderr)
    return True


@contextlib.contextmanager
def open_database(data: str, module: str | None = None, *, readonly: bool = False) -> Iterator[tuple[Database, LoadedModule]]:
    """Open the database at `data` with its recorded module, or `module` (which is then recorded,
    see `keep_in_step`, unless `readonly`: a command that only reads opens it so, and works on
    read-only media); closed on exit."""
    loaded = module_for(data, module)
    db = Database.open(data, loaded.module, readonly=True) if readonly and not place.is_url(data) else Database.open(data, loaded.module)
    try:
        if module and not readonly:
            keep_in_step(data, db, module)
        yield db, loaded
    finally:
        db.close()
