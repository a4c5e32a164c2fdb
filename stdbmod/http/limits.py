"""`ConnectionLimits`: what `stdbmod serve` allows one client connection (the size of a request's
head, how long it may take to arrive, how long an idle connection stays open) and how many
connections it holds at once. guard.py enforces them; docs/reliability.md lists them."""

from __future__ import annotations

import dataclasses
import resource
from dataclasses import dataclass

FD_RESERVE = 64  # descriptors kept for everything but client connections: LMDB, listeners, the loop, logs


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int = 1000
    header_timeout: float = 10.0  # seconds for a request's head to arrive whole; the longest pause in a body
    keep_alive_timeout: int = 5  # seconds an idle keep-alive connection stays open (uvicorn's)
    max_request_line: int = 8192  # bytes of the request target (path and query): 414 beyond
    max_header_bytes: int = 32768  # bytes of all header names and values: 431 beyond
    max_headers: int = 100  # 431 beyond

    @property
    def max_head(self) -> int:
        """The most bytes a head may take on the wire: the target, the headers, and their framing
        (method, version, ": ", CRLFs)."""
        return self.max_request_line + self.max_header_bytes + 4 * self.max_headers + 64


DEFAULT_LIMITS = ConnectionLimits()




def fit_descriptors(limits: ConnectionLimits) -> tuple[ConnectionLimits, str | None]:
    """Raise this process's soft limit on open files to its hard limit, and lower the connection
    cap to leave `FD_RESERVE` descriptors free: past the limit, `accept` fails and every new
    client is turned away, which the cap exists to prevent. Returns the limits to use and, when
    the cap was lowered, a line saying so."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = limits.max_connections + FD_RESERVE
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return limits, None
    fitted = max(1, soft - FD_RESERVE)
    note = f"at most {fitted} connections (--max-connections {limits.max_connections} exceeds the open-file limit {soft}; `ulimit -n` raises it)"
    return dataclasses.replace(limits, max_connections=fitted), note
