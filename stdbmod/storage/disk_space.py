"""How much room the file system holding a path has left for this process."""

from __future__ import annotations

import os


def free_bytes(path: str) -> int | None:
    """Bytes free for this process's writes under `path` (root may use the reserved blocks), or
    None when the file system cannot be asked."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize
