"""Zeros kept written ahead of LMDB's last page, so that a durable commit's flush does not also
commit a new file size.

LMDB on Linux never preallocates its data file: a commit whose new pages lie past the end of
data.mdb grows the file, and that commit's fdatasync must then also put the new size and the new
blocks through the file system's journal. On ext4 under a virtio disk this made the flush of such
a commit ~2x slower, and a durable batch of 14 enqueues take 819 us instead of 538
(docs/performance.md, "Twenty-seventh round"). So a durable environment keeps at least `LOW_WATER`
bytes of written zeros past its last page in use, extended a chunk at a time (one write of zeros
and one flush per chunk) from inside a write transaction: LMDB's writer lock is held, so no other
process writes pages meanwhile, and nothing of the transaction is written yet. Only bytes past the
file's end are ever written, which no committed page uses; LMDB never reads past its last page, so
the zeros cost disk space (at most `LOW_WATER` + `MAX_CHUNK`) and nothing else. A crash during an
extension leaves zeros or a shorter tail: either is what the file could hold anyway.

Real zeros, not `fallocate`: a preallocated extent is "unwritten" until written, and converting
it is itself a journalled change (measured: half the gain). Where the disk is nearly full, or a
write of zeros fails, nothing is extended (a failed one is cut back) and LMDB grows the file as
it always did.
"""

from __future__ import annotations

import os
from typing import Final

from .disk_space import free_bytes

LOW_WATER: Final = 512 << 10  # fewer zeros than this past the last page in use: extend (more than most transactions write)
MIN_CHUNK: Final = 2 << 20  # an extension writes at least this much, an eighth of the file up to
MAX_CHUNK: Final = 8 << 20  # this much: its stall stays a few ms
SPARE_AFTER: Final = 64 << 20  # free disk space an extension must leave, for LMDB's own writes
_ZEROS: Final = memoryview(bytes(1 << 20))

_flush = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync


class ZeroAhead:
    """The zeros ahead of one environment's data file. `before_write` is called by the storage
    at the start of each durable write transaction, with LMDB's last page in use."""

    def __init__(self, data_file: str, page_size: int) -> None:
        self.data_file = data_file
        self.page_size = page_size
        # The file's end as last seen or extended (files never shrink), or, after an extension
        # that did not happen, where to look again.
        self.known_end = 0
        self.extensions = 0

    def before_write(self, last_page: int) -> None:
        used = (last_page + 1) * self.page_size
        if used + LOW_WATER <= self.known_end:  # the common case: one comparison a transaction
            return
        try:
            size = os.path.getsize(self.data_file)
        except OSError:
            return
        self.known_end = max(self.known_end, size)
        if size - used >= LOW_WATER:  # another process extended it
            return
        chunk = max(MIN_CHUNK, min(size // 8, MAX_CHUNK))
        # Whatever happens next, the next try waits until the pages in use have grown a chunk:
        # a disk too full for the zeros is not asked again on every transaction.
        self.known_end = size + chunk
        free = free_bytes(self.data_file)
        if free is None or free < chunk + SPARE_AFTER:
            return
        try:
            write_zeros(self.data_file, size, chunk)
        except OSError:
            return
        self.extensions += 1


def write_zeros(path: str, start: int, length: int) -> None:
    """`length` zero bytes written at `start` (the file's end) and flushed, new size included; on
    failure the file is cut back to `start` and the error raised."""
    fd = os.open(path, os.O_WRONLY)
    try:
        try:
            end = start + length
            at = start
            while at < end:
                at += os.pwrite(fd, _ZEROS[: min(len(_ZEROS), end - at)], at)
            _flush(fd)
        except OSError:
            try:
                os.ftruncate(fd, start)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)
