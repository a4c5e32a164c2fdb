"""What the optional compiled build (stdbmod/compiled.py; docs/performance.md, "The compiled
build") needs at run time: the modules it compiles, the check that refuses a stale build (run
when stdbmod is imported), and mypyc's class options. mypyc reads `mypyc_attr` at compile time;
at run time it does nothing, so the pure-Python install does not need mypy_extensions."""

from __future__ import annotations

import glob
import os
import sys
from collections.abc import Callable
from importlib.machinery import EXTENSION_SUFFIXES
from typing import Any, TypeVar

from .errors import StdbError

_C = TypeVar("_C")

try:
    from mypy_extensions import mypyc_attr
except ImportError:  # pragma: no cover - only without mypy installed

    def mypyc_attr(*attrs: str, **kwattrs: Any) -> Callable[[_C], _C]:  # type: ignore[misc]
        return lambda cls: cls


# The hot path of a reducer call: its way in (calls), the job, the writer and its batch, the
# clock, the transaction's reads and writes with index maintenance, key encodings, rows' stored form, the context,
# the commit log's encoding, the storage's transaction interface (storage/txn.py: calls through
# it are C calls) and LMDB, schedule rows, the retry module's transitions and
# everything its worker reducers run after the role check (workers, queues, retention,
# singletons: its Structs live in retry/tables.py for that), the special value types (Timestamp, Identity: native classes, so a time's
# arithmetic, comparisons and construction are C calls; -4.2% instructions a lifecycle call), and the subscriptions' check of
# each commit (runtime/quiet.py), on every call's path while anyone subscribes. Since the
# twenty-third round also the HTTP job routes' own modules (render, inputs, routes, routing, the
# coalescing writer, the token cache, the request metrics, the guarded protocol: -3% instructions
# a request, `bench/instructions.py --http`), since the twenty-eighth the lanes and the answers'
# hand-over, since the twenty-ninth the metrics feed's drain; http/context.py stays interpreted (compiled, its
# connection hooks' async context manager crashed a test, and it saved 0.2%).
# Left interpreted: modules declaring msgspec Structs (mypyc turns a `Literal` annotation into
# `type` and drops a Struct's class options: runtime/records.py, types.py), the schema's
# dataclasses, the `Database` class (settable class attributes), and module code whose reducers
# are introspected (retry/reducers.py: claim, complete and their batch forms are each one call into
# retry/workers.py after the role check).
HOT = (
    "special",
    "keys",
    "codec",
    "rowformat",
    "runtime/transaction",
    "runtime/core",
    "runtime/writer",
    "runtime/jobs",
    "runtime/calls",
    "runtime/clock",
    "runtime/commitlog",
    "runtime/context",
    "runtime/tables",
    "runtime/schedules",
    "runtime/quiet",
    "storage/txn",
    "storage/lmdb_storage",
    "retry/transitions",
    "retry/claim",
    "retry/roles",
    "retry/limits",
    "retry/workers",
    "retry/singletons",
    "retry/queues",
    "retry/retention",
    "http/render",
    "http/inputs",
    "http/routes_jobs",
    "http/routing",
    "http/coalesce",
    "http/tokencache",
    "http/metrics",
    "http/guard",
    "http/lanes",
    "http/laned_protocol",
    "http/answers",
    "http/metrics_feed",
    "http/metrics_histogram",
)

PACKAGE = os.path.dirname(os.path.abspath(__file__))


class StaleBuild(StdbError, ImportError):
    """A compiled module is older than its source."""


def built_modules(package: str = PACKAGE) -> list[str]:
    """The modules this Python imports compiled: each extension with its source beside it
    (paths relative to the package, no suffix). Those of the build that made them, which need
    not be today's `HOT`: a version that compiles fewer modules must not run the others' old code."""
    suffix = EXTENSION_SUFFIXES[0]
    found = []
    for path in glob.glob(os.path.join(glob.escape(package), "**", "*" + suffix), recursive=True):
        m = os.path.relpath(path, package)[: -len(suffix)].replace(os.sep, "/")
        if os.path.exists(os.path.join(package, m + ".py")):
            found.append(m)
    return sorted(found)


def check(package: str = PACKAGE) -> None:
    """Refuse to run a compiled module whose source changed after it was built."""
    suffix = EXTENSION_SUFFIXES[0]
    for m in built_modules(package):
        if os.stat(os.path.join(package, m + ".py")).st_mtime > os.stat(os.path.join(package, m + suffix)).st_mtime:
            raise StaleBuild(
                f"stdbmod/{m}.py changed after it was compiled: run `python -m stdbmod.compiled build`"
                " again, or `python -m stdbmod.compiled clean` for pure Python"
            )


# On import of stdbmod (its __init__ imports this module first), except for the build command
# itself, which must be able to rebuild or clean a stale build
_argv = sys.orig_argv
if not any(a == "-m" and _argv[i + 1 : i + 2] == ["stdbmod.compiled"] for i, a in enumerate(_argv)):
    check()

__all__ = ["HOT", "PACKAGE", "StaleBuild", "built_modules", "check", "mypyc_attr"]
