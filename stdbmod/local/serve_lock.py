"""One server per data directory: `stdbmod serve` holds ``DIR/serve.lock`` while it runs.

Two servers on one LMDB directory would each run the schedules (backoff timers, the lease sweep,
in-module attempts), each keep subscribers that never hear of the other's commits, and each mint
tokens; so the second is refused at start, naming the process that holds the lock. The lock is
an `flock` on the file, which the kernel releases when its process ends however it ends (kill -9
included): a file left behind never stops the next server, it only names the last holder.

The CLI does not take it: `stdbmod call`, `tick`, `tasks requeue` and the rest may write while a
server runs (LMDB serializes writers across processes, and each commit is atomic), see
docs/reliability.md. A PostgreSQL URL takes no lock: several nodes serving one database is what
it is for (docs/scaling.md).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ..errors import StdbError
from ..storage import private

LOCK_NAME = "serve.lock"


class AlreadyServed(StdbError):
    """Another process serves this data directory."""

    status_code = 409


class ServeLock:
    """The held lock; `release` (or the process's end) lets the next server in."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None


def hold(data_dir: str | os.PathLike[str]) -> ServeLock:
    """Take DIR/serve.lock for this process, or raise AlreadyServed naming its holder."""
    path = Path(data_dir) / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, private.FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise AlreadyServed(f"{data_dir} is already served by process {holder} (it holds {path}); stop that server first") from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return ServeLock(fd, path)
