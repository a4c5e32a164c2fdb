"""A database directory as the CLI sees it: the LMDB files plus ``stdbmod.json``.

The runtime stores a database's schema but not where its module's code lives, so `publish`
records the MODULE spec in ``DIR/stdbmod.json`` and every other command reads it back to open
the database (``--module`` overrides it, e.g. after the code moved).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import msgspec

from ..errors import DatabaseNotFound
from ..runtime import Database
from .modspec import LoadedModule, load_module

CONFIG_NAME = "stdbmod.json"


class DataDirConfig(msgspec.Struct, frozen=True):
    module: str
    name: str
    format: int = 1


def config_path(data: str | os.PathLike[str]) -> Path:
    return Path(data) / CONFIG_NAME


def write_config(data: str | os.PathLike[str], config: DataDirConfig) -> None:
    p = config_path(data)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_bytes(msgspec.json.format(msgspec.json.encode(config)) + b"\n")
    os.replace(tmp, p)


def read_config(data: str | os.PathLike[str]) -> DataDirConfig | None:
    try:
        raw = config_path(data).read_bytes()
    except FileNotFoundError:
        return None
    try:
        return msgspec.json.decode(raw, type=DataDirConfig)
    except msgspec.DecodeError as e:
        raise ValueError(f"{config_path(data)} is damaged: {e}") from None


def module_for(data: str, override: str | None) -> LoadedModule:
    if not os.path.isdir(data):
        raise DatabaseNotFound(f"no database at {data} (no such directory)")
    if override:
        return load_module(override)
    config = read_config(data)
    if config is None:
        if not os.path.exists(os.path.join(data, "data.mdb")):
            raise DatabaseNotFound(f"no database at {data} (publish one first)")
        raise DatabaseNotFound(f"{data} has no {CONFIG_NAME} naming its module; pass --module")
    return load_module(config.module)


@contextlib.contextmanager
def open_database(data: str, module: str | None = None) -> Iterator[tuple[Database, LoadedModule]]:
    """Open the database at `data` with its recorded module; closed on exit."""
    loaded = module_for(data, module)
    db = Database.open(data, loaded.module)
    try:
        yield db, loaded
    finally:
        db.close()
