"""The zeros a durable LMDB environment keeps past its last page (storage/zero_ahead.py): there,
commits leave the file's size alone; nothing in use is overwritten; fsync off writes none; a
failed or unaffordable extension changes nothing and is not retried on every transaction."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import lmdb
import pytest

from stdbmod.storage import LmdbStorage, zero_ahead
from stdbmod.storage.zero_ahead import LOW_WATER, MIN_CHUNK, ZeroAhead


def _used(path: Path) -> int:
    """LMDB's pages in use, in bytes, as a second reader sees them."""
    env = lmdb.open(str(path), readonly=True, lock=False)
    try:
        return (int(env.info()["last_pgno"]) + 1) * int(env.stat()["psize"])
    finally:
        env.close()


def _tail_is_zeros(path: Path, start: int) -> bool:
    with open(path / "data.mdb", "rb") as f:
        f.seek(start)
        return not f.read().strip(b"\0")


def _commit(s: LmdbStorage, items: dict[bytes, bytes]) -> None:
    w = s.begin_write()
    for k, v in items.items():
        w.put("a", k, v)
    w.commit()


def test_commits_inside_the_zeros_leave_the_file_size_alone(tmp_path: Path) -> None:
    s = LmdbStorage(str(tmp_path))
    s.ensure_spaces(["a"])
    _commit(s, {b"first": b"x"})
    size = os.path.getsize(tmp_path / "data.mdb")
    assert s._ahead is not None and s._ahead.extensions == 1
    for i in range(50):  # ~50 small commits: new pages, all inside the zeros
        _commit(s, {i.to_bytes(4, "big"): b"v" * 200})
    assert os.path.getsize(tmp_path / "data.mdb") == size
    assert s._ahead.extensions == 1
    s.close()
    used = _used(tmp_path)
    assert size - used >= LOW_WATER and _tail_is_zeros(tmp_path, used)


def test_the_zeros_move_ahead_and_overwrite_nothing_in_use(tmp_path: Path) -> None:
    """~6 MB of values written in 60 commits cross several extensions; every value reads back
    after a reopen, and each commit began with at least `LOW_WATER` of zeros past the pages in use."""
    s = LmdbStorage(str(tmp_path))
    s.ensure_spaces(["a"])
    assert s._ahead is not None
    page = s._ahead.page_size
    written: dict[bytes, bytes] = {}
    used = (int(s._env.info()["last_pgno"]) + 1) * page
    for i in range(60):
        batch = {f"{i:03}-{j:02}".encode(): os.urandom(2_000) for j in range(50)}
        _commit(s, batch)
        written.update(batch)
        before, used = used, (int(s._env.info()["last_pgno"]) + 1) * page
        # what this commit added came out of the zeros it began with
        assert os.path.getsize(tmp_path / "data.mdb") - used >= LOW_WATER - (used - before)
    assert s._ahead.extensions >= 3
    s.close()
    s = LmdbStorage(str(tmp_path))
    with s.begin_read() as r:
        assert dict(r.scan("a")) == written
    s.close()
    assert _tail_is_zeros(tmp_path, _used(tmp_path))


def test_fsync_off_writes_no_zeros(tmp_path: Path) -> None:
    s = LmdbStorage(str(tmp_path), durable=False)
    s.ensure_spaces(["a"])
    assert s._ahead is None
    _commit(s, {b"k": b"v" * 1000})
    s.close()
    assert os.path.getsize(tmp_path / "data.mdb") - _used(tmp_path) < LOW_WATER


def _file(tmp_path: Path, pages: int) -> tuple[Path, bytes]:
    path = tmp_path / "data.mdb"
    content = os.urandom(pages * 4096)
    path.write_bytes(content)
    return path, content


def test_an_extension_appends_zeros_and_keeps_what_the_file_held(tmp_path: Path) -> None:
    path, content = _file(tmp_path, 3)
    ahead = ZeroAhead(str(path), 4096)
    ahead.before_write(2)  # pages 0-2 in use: the file's end
    data = path.read_bytes()
    assert data[: len(content)] == content
    assert len(data) == len(content) + MIN_CHUNK and not data[len(content) :].strip(b"\0")
    assert ahead.extensions == 1


def test_a_failed_extension_is_cut_back_and_not_retried_at_every_transaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, content = _file(tmp_path, 3)
    flushes = []

    def no_room(fd: int) -> None:
        flushes.append(fd)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(zero_ahead, "_flush", no_room)
    ahead = ZeroAhead(str(path), 4096)
    ahead.before_write(2)
    assert path.read_bytes() == content  # cut back to where it ended
    assert len(flushes) == 1 and ahead.extensions == 0
    for _ in range(10):  # the pages in use have not grown a chunk: no second try
        ahead.before_write(2)
    assert len(flushes) == 1
    ahead.before_write(2 + MIN_CHUNK // 4096)  # they have: it tries again
    assert len(flushes) == 2


def test_a_nearly_full_disk_gets_no_zeros(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, content = _file(tmp_path, 3)
    monkeypatch.setattr(zero_ahead, "SPARE_AFTER", 1 << 62)  # more than any disk has free
    ahead = ZeroAhead(str(path), 4096)
    ahead.before_write(2)
    assert path.read_bytes() == content and ahead.extensions == 0


def test_zeros_another_process_wrote_are_used_as_they_are(tmp_path: Path) -> None:
    path, content = _file(tmp_path, 3)
    with open(path, "ab") as f:
        f.write(bytes(2 * LOW_WATER))
    ahead = ZeroAhead(str(path), 4096)
    ahead.before_write(2)
    assert ahead.extensions == 0 and os.path.getsize(path) == len(content) + 2 * LOW_WATER
