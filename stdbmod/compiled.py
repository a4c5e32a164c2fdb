"""The optional compiled build: the reducer call's hot path compiled with mypyc, in place.

    pip install -e '.[compiled]'          # mypy (mypyc) and setuptools; a C compiler is needed
    python -m stdbmod.compiled build      # ~45 s on 2 cores: a .so beside each, one shared library
    python -m stdbmod.compiled status     # which modules run compiled
    python -m stdbmod.compiled clean      # back to pure Python

The code is the same; only how CPython runs it changes (docs/performance.md, "The compiled
build"). A compiled module older than its source would run code that is no longer there, so
`import stdbmod` refuses to start with one (`_mypyc.check`), naming both commands that fix it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES

from ._mypyc import HOT, PACKAGE, StaleBuild, built_modules, check

GROUP = "stdbmod._native"  # the shared library's module: stdbmod/_native__mypyc
LIBRARY = "_native__mypyc"


def _built(module: str, package: str) -> list[str]:
    """The compiled files of `module` (relative to the package), any Python version."""
    base = os.path.join(package, module)
    found = [base + s for s in EXTENSION_SUFFIXES if os.path.exists(base + s)]
    return found + [p for p in glob.glob(base + "__mypyc.*") if p not in found]


def compiled(package: str = PACKAGE) -> list[str]:
    """The hot modules this Python imports compiled."""
    suffix = EXTENSION_SUFFIXES[0]
    return [m for m in HOT if os.path.exists(os.path.join(package, m + suffix))]


def clean(package: str = PACKAGE) -> list[str]:
    """Remove every compiled file of the hot modules (today's, and any other an earlier build
    left beside its source) and their library; what was removed."""
    removed = []
    for m in (*sorted({*HOT, *built_modules(package)}), LIBRARY):
        for path in _built(m, package):
            os.remove(path)
            removed.append(os.path.relpath(path, package))
    return removed


def build() -> list[str]:
    """Compile the hot modules in place: an extension beside each, and their shared library."""
    import tempfile

    from mypyc.build import mypycify  # main() says what to install when these are missing
    from setuptools import setup

    clean()
    root = os.path.dirname(PACKAGE)
    paths = [os.path.join("stdbmod", m + ".py") for m in HOT]
    with tempfile.TemporaryDirectory() as work, contextlib.chdir(root):
        # one group, so one shared library (stdbmod/_native__mypyc): compiled per module
        # (separate=True) the calls between modules cost more than the interpreter saved,
        # 8% more CPU a call on this machine (docs/performance.md)
        ext = mypycify(paths, opt_level="3", group_name=GROUP, target_dir=os.path.join(work, "c"))
        setup(
            name="stdbmod-compiled",
            ext_modules=ext,
            script_args=["-q", "build_ext", "--inplace", "--build-temp", os.path.join(work, "o"), "--build-lib", os.path.join(work, "lib")],
        )
    return compiled()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["build"]:
        try:
            done = build()
        except ImportError as e:
            print(f"error: the compiled build needs mypy and setuptools: pip install 'stdbmod[compiled]' ({e.name} is missing)", file=sys.stderr)
            return 2
        print(f"compiled {len(done)} of {len(HOT)} hot modules: {', '.join(done)}")
        return 0 if len(done) == len(HOT) else 1
    if args == ["clean"]:
        print(f"removed {len(clean())} compiled files: stdbmod runs as pure Python")
        return 0
    if args == ["status"]:
        done = compiled()
        print(f"{len(done)} of {len(HOT)} hot modules compiled" + (f": {', '.join(done)}" if done else " (pure Python)"))
        return 0
    print("usage: python -m stdbmod.compiled build | clean | status", file=sys.stderr)
    return 2


__all__ = ["HOT", "StaleBuild", "build", "check", "clean", "compiled", "main"]

if __name__ == "__main__":
    raise SystemExit(main())
