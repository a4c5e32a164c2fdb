"""How a handler's exception is reported: its type and message first, then the innermost part of
its traceback, bounded so the whole fits the server's 10,000-character `error` field."""

from __future__ import annotations

import traceback

MAX_HEAD = 2_000
MAX_TRACEBACK = 6_000
MAX_LINE = 300  # a huge message must not push the frames out
ELIDED = "...\n"


def exception_name(exc: BaseException) -> str:
    t = type(exc)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def headline(exc: BaseException) -> str:
    """`ValueError: bad input`, cut to MAX_HEAD characters."""
    text = str(exc)
    head = f"{exception_name(exc)}: {text}" if text else exception_name(exc)
    return head if len(head) <= MAX_HEAD else head[: MAX_HEAD - 3] + "..."


def describe(exc: BaseException) -> str:
    """The `error` a failed attempt reports: the headline, a blank line, the traceback's tail (the
    innermost frames, where the failure is)."""
    lines = "".join(traceback.format_exception(exc)).rstrip("\n").split("\n")
    tb = "\n".join(line if len(line) <= MAX_LINE else line[: MAX_LINE - 3] + "..." for line in lines)
    if len(tb) > MAX_TRACEBACK:
        tail = tb[-(MAX_TRACEBACK - len(ELIDED)):]
        tb = ELIDED + tail[tail.find("\n") + 1:]  # from a whole line on
    return f"{headline(exc)}\n\n{tb}"
