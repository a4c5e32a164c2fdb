"""`stdbmod backup` between backends: an LMDB directory into PostgreSQL and back (or between two
PostgreSQL schemas), verified.

The source is read in one read transaction (a consistent snapshot: it may keep serving); every
space is copied key by key into the empty destination in transactions of `CHUNK` keys; then
the data place's files (stdbmod.json, jwt.key, owner.token) follow. Verified twice: the state
hash (`Database.state_hash`'s formula: every table's rows) and a digest of every space (rows,
indexes, sequences, schedules, both logs) are computed over the source snapshot while copying
and over the destination afterwards, and must agree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import blake3

from ..errors import CallError, DatabaseNotFound
from ..runtime.backup import check_target
from ..storage import LmdbStorage, ReadTxn, Storage
from ..storage.postgres_url import open_url
from . import place
from .datadir import CONFIG_NAME
from .tokens import KEY_FILE, OWNER_TOKEN_FILE

CHUNK = 5000
FILES = (CONFIG_NAME, KEY_FILE, OWNER_TOKEN_FILE)


@dataclass(frozen=True)
class Copied:
    keys: int
    state_hash: str
    digest: str


def open_place(data: str, *, new: bool) -> Storage:
    if place.is_url(data):
        if new and place.holds_storage(data):
            raise CallError(f"{place.show(data)} already holds a database; back up into an empty schema")
        if not new and not place.holds_storage(data):
            raise DatabaseNotFound(f"no database at {place.show(data)}")
        storage = open_url(data)
        if new:
            with storage.begin_read() as r:
                used = any(r.count(s) for s in storage.space_names())
            if used:
                storage.close()
                raise CallError(f"{place.show(data)} is not empty; back up into an empty schema")
        return storage
    if new:
        return LmdbStorage(check_target(data))
    if not os.path.isfile(os.path.join(data, "data.mdb")):
        raise DatabaseNotFound(f"no database at {data}")
    return LmdbStorage(data)


def hashes(txn: ReadTxn, names: list[str]) -> tuple[str, str]:
    """(the state hash, the digest of every space) of a snapshot."""
    state, everything = blake3.blake3(), blake3.blake3()
    for name in sorted(names):
        if name.startswith("t/"):
            state.update(name[2:].encode() + b"\x00")
        everything.update(name.encode() + b"\x00")
        for key, value in txn.scan(name):
            item = len(key).to_bytes(4, "big") + key + len(value).to_bytes(4, "big") + value
            everything.update(item)
            if name.startswith("t/"):
                state.update(item)
    return state.hexdigest(), everything.hexdigest()


def copy_between(source: str, dest: str) -> Copied:
    """Copy the database at `source` into the empty place `dest`; verified as the module says."""
    src = open_place(source, new=False)
    try:
        dst = open_place(dest, new=True)
        try:
            names = src.space_names()
            dst.ensure_spaces(names)
            keys = 0
            with src.begin_read() as r:
                for name in names:
                    batch: list[tuple[bytes, bytes]] = []
                    for item in r.scan(name):
                        batch.append(item)
                        if len(batch) >= CHUNK:
                            keys += _write(dst, name, batch)
                    keys += _write(dst, name, batch)
                want = hashes(r, names)
            with dst.begin_read() as r:
                got = hashes(r, names)
        finally:
            dst.close()
    finally:
        src.close()
    if got != want:
        raise CallError(f"the copy at {place.show(dest)} does not match its source (state hash {got[0]} != {want[0]})")
    copy_files(source, dest)
    return Copied(keys, *want)


def copy_files(source: str, dest: str) -> list[str]:
    """Copy the place's files a restore needs (the module it records, the key its tokens are
    signed with, the owner's token) from `source` to `dest`; the names copied."""
    copied = []
    for f in FILES:
        body = place.read_file(source, f)
        if body is not None:
            place.write_file(dest, f, body, secret=f != CONFIG_NAME)
            copied.append(f)
    return copied


def _write(dst: Storage, name: str, batch: list[tuple[bytes, bytes]]) -> int:
    if not batch:
        return 0
    w = dst.begin_write()
    try:
        w.put_many(name, batch)
        w.commit()
    except BaseException:
        w.abort()
        raise
    n = len(batch)
    batch.clear()
    return n
