"""Reading an strace log for the durability order: is every answer sent after its commit is on
disk? LMDB's commit is: data pages (pwrite64/writev), fdatasync of the data file, then the meta
page written through a second descriptor opened O_DSYNC. An answer may leave only after both."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

_LINE = re.compile(r"^(\d+) +(\w+)\((.*)$")
_OPEN = re.compile(r'openat\(AT_FDCWD, "([^"]*data\.mdb)", ([A-Z_|]+)[^)]*\) = (\d+)')


@dataclass
class Event:
    index: int
    tid: int
    syscall: str
    rest: str  # everything after the opening parenthesis, result included

    @property
    def fd(self) -> int | None:
        m = re.match(r"(\d+)[,)]", self.rest)
        return int(m.group(1)) if m else None

    @property
    def ok(self) -> bool:
        return not re.search(r"= -1 E", self.rest) and "<unfinished" not in self.rest


def events(trace: str) -> list[Event]:
    """The syscalls of an `strace -f` log, in order, with resumed lines joined to their start."""
    out: list[Event] = []
    pending: dict[int, Event] = {}
    for line in trace.splitlines():
        resumed = re.match(r"^(\d+) +<\.\.\. (\w+) resumed>(.*)$", line)
        if resumed:
            tid = int(resumed.group(1))
            ev = pending.pop(tid, None)
            if ev is not None:
                ev.rest = ev.rest.replace(" <unfinished ...>", "") + resumed.group(3)
                out.append(ev)
            continue
        m = _LINE.match(line)
        if not m:
            continue
        ev = Event(0, int(m.group(1)), m.group(2), m.group(3))
        if ev.rest.endswith("<unfinished ...>"):
            pending[ev.tid] = ev
        else:
            out.append(ev)
    for i, ev in enumerate(out):  # completion order: a syscall counts when it returned
        ev.index = i
    return out


@dataclass
class Descriptors:
    data: set[int]
    meta_dsync: set[int]  # meta-page descriptors opened with O_DSYNC
    meta_plain: set[int]  # ... and without (eatmydata strips the flag)


def descriptors(evs: list[Event]) -> Descriptors:
    d = Descriptors(set(), set(), set())
    for ev in evs:
        if ev.syscall != "openat":
            continue
        m = _OPEN.match("openat(" + ev.rest)
        if not m:
            continue
        flags, fd = m.group(2), int(m.group(3))
        if "O_RDWR" in flags:
            d.data.add(fd)
        elif "O_DSYNC" in flags or "O_SYNC" in flags:
            d.meta_dsync.add(fd)
        else:
            d.meta_plain.add(fd)
    return d


@dataclass
class Verdict:
    answers: int = 0  # answers whose transaction wrote something: each must follow its sync
    no_ops: int = 0  # answers whose transaction wrote nothing (LMDB commits those without I/O)
    problems: list[str] = field(default_factory=list)


def violations(trace: str, is_request: Callable[[Event], object], is_answer: Callable[[Event], object], *, paired: bool = False) -> Verdict:
    """Each answer whose transaction wrote pages must follow, after the latest request before it,
    an fdatasync of the data file and then a successful write of the meta page through an O_DSYNC
    descriptor. `paired`: one answer per request (HTTP); other answers (a health check) are
    not requests of interest and are skipped."""
    evs = events(trace)
    fds = descriptors(evs)
    v = Verdict()
    if not fds.meta_dsync:
        v.problems.append("the meta page is not written through an O_DSYNC descriptor")
    meta_fds = fds.meta_dsync | fds.meta_plain
    start: int | None = None
    for ev in evs:
        if is_request(ev):
            start = ev.index
            continue
        if not is_answer(ev):
            continue
        if start is None:
            if not paired:
                v.problems.append(f"answer without a request: {ev.rest[:60]}")
            continue
        window = evs[start : ev.index]
        if paired:
            start = None
        wrote = [e for e in window if e.syscall in ("pwrite64", "writev") and e.fd in fds.data | meta_fds]
        synced = [e.index for e in window if e.syscall in ("fdatasync", "fsync") and e.fd in fds.data and e.ok]
        meta = [e.index for e in window if e.syscall == "pwrite64" and e.fd in fds.meta_dsync and e.ok]
        if not wrote and not synced:
            v.no_ops += 1
            continue
        v.answers += 1
        if not synced:
            v.problems.append(f"answered with no fdatasync of the data file since the request: {ev.rest[:40]}")
        elif not any(m > synced[-1] for m in meta):
            v.problems.append(f"answered before an O_DSYNC meta-page write followed the fdatasync: {ev.rest[:40]}")
    return v
