"""A data directory and its files are private to their owner (0700, 0600): the database holds
every row, and the signing key and owner token sit beside it. Everything stdbmod creates there
(LMDB's data.mdb and lock.mdb, stdbmod.json, jwt.key, owner.token, a backup's copy) is created
with these modes; a directory or file that already existed keeps the modes it had."""

from __future__ import annotations

import os

DIR_MODE = 0o700
FILE_MODE = 0o600


def make_dir(path: str | os.PathLike[str]) -> None:
    """Create `path` (and missing parents, as `mkdir -p`) private to the owner; an existing one
    is left as it is."""
    os.makedirs(path, mode=DIR_MODE, exist_ok=True)
