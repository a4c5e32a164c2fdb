"""The optional compiled build: the reducer call's hot path compiled with mypyc, in place.

    pip install -e '.[compiled]'          # mypy (mypyc) and setuptools; a C compiler is needed
    python -m stdbmod.compiled build      # a .so beside each, one shared library; with GCC, guided by a profile
    python -m stdbmod.compiled build --no-profile   # one compile instead of two and a training run
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
from typing import Any

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


def build(profile: bool = True) -> list[str]:
    """Compile the hot modules in place: an extension beside each, and their shared library.
    With GCC on Linux, the library calls its own functions directly and, with `profile`, is
    compiled twice: instrumented, run on `compiled_training`'s workload, then laid out by what
    ran (docs/performance.md, "Thirty-eighth round")."""
    import tempfile

    from mypyc.build import mypycify  # main() says what to install when these are missing

    clean()
    root = os.path.dirname(PACKAGE)
    paths = [os.path.join("stdbmod", m + ".py") for m in HOT]
    gcc = _gcc()
    with tempfile.TemporaryDirectory() as work, contextlib.chdir(root):
        # one group, so one shared library (stdbmod/_native__mypyc): compiled per module
        # (separate=True) the calls between modules cost more than the interpreter saved,
        # 8% more CPU a call on this machine (docs/performance.md)
        ext = mypycify(paths, opt_level="3", group_name=GROUP, target_dir=os.path.join(work, "c"))
        cflags, ldflags = (list(DIRECT_CALLS), LINK_DIRECT) if gcc else ([], [])
        if gcc and profile:
            _compile(ext, work, "instrumented", cflags + PROFILE_GENERATE, ldflags + PROFILE_GENERATE)
            profiled = _train(root, work)
            _compile(ext, work, "profiled" if profiled else "plain", cflags + (PROFILE_USE if profiled else []), ldflags, force=True)
        else:
            _compile(ext, work, "plain", cflags, ldflags)
    return compiled()


# GCC on Linux (ELF): the library's calls to its own functions (mypyc's runtime, each module's
# functions) bound at link time instead of through the PLT, and libpython's through the GOT
# without a PLT stub: fewer indirect jumps, less code in the instruction cache.
DIRECT_CALLS = ("-fno-plt", "-fno-semantic-interposition")
LINK_DIRECT = ["-Wl,-Bsymbolic-functions"]
# Atomic counters: the writer thread runs most of the workload. Partial training: what the
# workload never runs (the HTTP modules' routes, errors) is optimized as without a profile.
PROFILE_GENERATE = ["-fprofile-generate", "-fprofile-update=atomic"]
PROFILE_USE = ["-fprofile-use", "-fprofile-partial-training", "-Wno-missing-profile"]
_ADDED = {*DIRECT_CALLS, *LINK_DIRECT, *PROFILE_GENERATE, *PROFILE_USE}  # what a stage sets, so the next replaces it


def _gcc() -> bool:
    """Whether extensions are compiled by GCC for ELF (the flags above are GCC's and GNU ld's)."""
    import subprocess
    import sysconfig

    if not sys.platform.startswith("linux"):
        return False
    cc = (os.environ.get("CC") or str(sysconfig.get_config_var("CC") or "cc")).split()
    try:
        out = subprocess.run([cc[0], "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "Free Software Foundation" in out


def _compile(ext: list[Any], work: str, stage: str, cflags: list[str], ldflags: list[str], force: bool = False) -> None:
    """Build the extensions in place with these flags; the objects stay in work/o, so the
    profile that the instrumented stage's run writes beside them is found by the next stage."""
    from setuptools import setup

    for e in ext:
        e.extra_compile_args = [a for a in e.extra_compile_args if a not in _ADDED] + cflags
        e.extra_link_args = [a for a in e.extra_link_args if a not in _ADDED] + ldflags
    args = ["-q", "build_ext", "--inplace", "--build-temp", os.path.join(work, "o"), "--build-lib", os.path.join(work, "lib-" + stage)]
    setup(name="stdbmod-compiled", ext_modules=ext, script_args=args + (["--force"] if force else []))


def _train(root: str, work: str) -> bool:
    """Run the training workload on the instrumented build in a process of its own (the profile
    is written when it exits); False if it failed, and why on stderr."""
    import subprocess

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "stdbmod.compiled_training", os.path.join(work, "training")]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=root, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:  # a hung or unstartable run: the plain build, not a traceback
        why = str(e)
    else:
        if r.returncode == 0:
            return True
        why = r.stderr[-2000:]
    print(f"warning: the profile's training run failed, so the build has no profile:\n{why}", file=sys.stderr)
    return False


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args in (["build"], ["build", "--no-profile"]):
        try:
            done = build(profile=args == ["build"])
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
    print("usage: python -m stdbmod.compiled build [--no-profile] | clean | status", file=sys.stderr)
    return 2


__all__ = ["HOT", "StaleBuild", "build", "check", "clean", "compiled", "main"]

if __name__ == "__main__":
    raise SystemExit(main())
