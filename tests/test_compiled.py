"""The optional compiled build's tooling (stdbmod/compiled.py): a stale build refuses to run,
clean removes every compiled file, and where CI built it the suite really runs compiled."""

from __future__ import annotations

import gc
import importlib
import os
import re
import shutil
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Any

import pytest

from stdbmod import compiled, compiled_training, special
from stdbmod.retry import TaskStatus, create_retry_module
from stdbmod.runtime.database import Database

SUFFIX = EXTENSION_SUFFIXES[0]


def _package(tmp_path: Path) -> Path:
    """A stand-in package tree holding the hot modules' sources."""
    for m in compiled.HOT:
        src = tmp_path / f"{m}.py"
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text("")
        os.utime(src, (1_000, 1_000))
    return tmp_path


def test_a_build_older_than_its_source_refuses_to_run(tmp_path: Path) -> None:
    pkg = _package(tmp_path)
    so = pkg / f"runtime/core{SUFFIX}"
    so.write_bytes(b"")
    os.utime(so, (2_000, 2_000))
    compiled.check(str(pkg))  # built after its source: fine
    assert compiled.compiled(str(pkg)) == ["runtime/core"]
    os.utime(pkg / "runtime/core.py", (3_000, 3_000))  # the source edited since
    with pytest.raises(compiled.StaleBuild, match=r"stdbmod/runtime/core\.py changed after it was compiled") as e:
        compiled.check(str(pkg))
    assert isinstance(e.value, ImportError)


def test_no_build_is_pure_python(tmp_path: Path) -> None:
    pkg = _package(tmp_path)
    compiled.check(str(pkg))
    assert compiled.compiled(str(pkg)) == []


def test_clean_removes_the_extensions_and_their_library_only(tmp_path: Path) -> None:
    pkg = _package(tmp_path)
    made = [pkg / f"keys{SUFFIX}", pkg / f"storage/lmdb_storage{SUFFIX}", pkg / f"_native__mypyc{SUFFIX}", pkg / f"keys__mypyc{SUFFIX}"]
    for path in made:
        path.write_bytes(b"")
    other = pkg / f"runtime/sql{SUFFIX}"  # not a hot module: not ours to remove
    other.write_bytes(b"")
    assert sorted(compiled.clean(str(pkg))) == sorted(str(p.relative_to(pkg)) for p in made)
    assert not any(p.exists() for p in made) and other.exists()
    assert all((pkg / f"{m}.py").exists() for m in compiled.HOT)


def test_a_module_compiled_by_an_earlier_build_is_checked_and_cleaned(tmp_path: Path) -> None:
    """A version that compiles fewer modules must not run an earlier build's extension of one it
    no longer compiles: the check sees it, and clean removes it."""
    pkg = _package(tmp_path)
    (pkg / "runtime").mkdir(exist_ok=True)
    (pkg / "runtime/sql.py").write_text("")  # not hot now
    so = pkg / f"runtime/sql{SUFFIX}"
    so.write_bytes(b"")
    os.utime(pkg / "runtime/sql.py", (3_000, 3_000))
    os.utime(so, (2_000, 2_000))  # built before the source it shadows changed
    with pytest.raises(compiled.StaleBuild, match=r"stdbmod/runtime/sql\.py changed after it was compiled"):
        compiled.check(str(pkg))
    assert compiled.clean(str(pkg)) == [f"runtime/sql{SUFFIX}"]
    compiled.check(str(pkg))


def test_the_command_says_its_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert compiled.main(["nonsense"]) == 2
    assert "usage: python -m stdbmod.compiled build [--no-profile] | clean | status" in capsys.readouterr().err
    assert compiled.main(["status"]) == 0
    assert "hot modules compiled" in capsys.readouterr().out


def test_building_without_mypyc_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "mypyc.build", None)  # as if mypy were not installed
    assert compiled.main(["build"]) == 2
    err = capsys.readouterr().err
    assert err == "error: the compiled build needs mypy and setuptools: pip install 'stdbmod[compiled]' (mypyc.build is missing)\n"


@pytest.mark.skipif(os.environ.get("STDBMOD_EXPECT_COMPILED") != "1", reason="only where CI built the compiled build")
def test_every_hot_module_runs_compiled() -> None:
    for m in compiled.HOT:
        mod = importlib.import_module("stdbmod." + m.replace("/", "."))
        assert mod.__file__ is not None and mod.__file__.endswith(SUFFIX), f"{m} runs from {mod.__file__}"
    assert sys.modules["stdbmod.runtime.core"].__loader__.__class__.__name__ == "ExtensionFileLoader"


@pytest.mark.skipif(not special.NATIVE, reason="the value classes are native classes only in the compiled build")
def test_the_value_classes_stay_out_of_the_cycle_collector() -> None:
    # mypyc_attr(acyclic=True) in special.py: a completed task carries five Timestamps, and
    # tracked ones made the collector run and walk them (docs/architecture.md)
    values = [special.Timestamp(1), special.TimeDuration(2), special.Identity(bytes(32)), special.ConnectionId(bytes(16))]
    assert [gc.is_tracked(v) for v in values] == [False] * 4
    was_enabled = gc.isenabled()
    gc.disable()  # no collection in between to reset the young count: a tracked class would count each of the 1,000
    try:
        before = gc.get_count()[0]
        kept = [special.Timestamp(i) for i in range(1_000)]
        assert gc.get_count()[0] - before < 10
    finally:
        if was_enabled:
            gc.enable()
    assert kept[999].micros == 999


def test_the_training_workload_completes_every_task_it_enqueues(tmp_path: Path) -> None:
    # the profile-guided stage lays the library out by what this ran: it must run the lifecycle
    assert compiled_training.train(str(tmp_path / "db"), lifecycles=30, batch=7) == 60
    with Database.open(str(tmp_path / "db"), create_retry_module("retry").module) as db, db.read() as view:
        statuses = [t.status for t in view.db.task.iter()]
    assert len(statuses) == 60 and set(statuses) == {TaskStatus.COMPLETED}


def test_a_failed_training_run_gives_no_profile_and_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a tree whose training module fails, standing in for the tree being built (its root is first on the path)
    (tmp_path / "stdbmod").mkdir()
    (tmp_path / "stdbmod/__init__.py").write_text("")
    (tmp_path / "stdbmod/compiled_training.py").write_text("raise SystemExit('no training here')")
    assert compiled._train(str(tmp_path), str(tmp_path / "work")) is False
    assert "the profile's training run failed, so the build has no profile" in capsys.readouterr().err


def test_a_training_run_that_hangs_gives_no_profile_and_says_why(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def hangs(cmd: list[str], **kw: Any) -> None:
        raise subprocess.TimeoutExpired(cmd, kw["timeout"])

    monkeypatch.setattr(subprocess, "run", hangs)
    assert compiled._train("/nowhere", "/nowhere/work") is False
    err = capsys.readouterr().err
    assert "the profile's training run failed, so the build has no profile" in err and "timed out after 600 seconds" in err


def test_the_profile_flags_are_gccs_and_replace_each_other_between_stages(monkeypatch: pytest.MonkeyPatch) -> None:
    import setuptools

    class Ext:
        extra_compile_args = ["-DKEEP"]
        extra_link_args: list[str] = []

    seen: list[tuple[list[str], list[str], list[str]]] = []

    def fake_setup(**kw: Any) -> None:
        [ext] = kw["ext_modules"]
        seen.append((list(ext.extra_compile_args), list(ext.extra_link_args), list(kw["script_args"])))

    monkeypatch.setattr(setuptools, "setup", fake_setup)
    e = Ext()
    compiled._compile([e], "/w", "instrumented", [*compiled.DIRECT_CALLS, *compiled.PROFILE_GENERATE], [*compiled.LINK_DIRECT, *compiled.PROFILE_GENERATE])
    compiled._compile([e], "/w", "profiled", [*compiled.DIRECT_CALLS, *compiled.PROFILE_USE], compiled.LINK_DIRECT, force=True)
    assert seen[0][0] == ["-DKEEP", "-fno-plt", "-fno-semantic-interposition", "-fprofile-generate", "-fprofile-update=atomic"]
    assert seen[1][:2] == (
        ["-DKEEP", "-fno-plt", "-fno-semantic-interposition", "-fprofile-use", "-fprofile-partial-training", "-Wno-missing-profile"],
        ["-Wl,-Bsymbolic-functions"],
    )
    # the same objects' directory (the profile is found beside them), every object compiled again
    assert seen[0][2][seen[0][2].index("--build-temp") + 1] == seen[1][2][seen[1][2].index("--build-temp") + 1] == "/w/o"
    assert "--force" in seen[1][2] and "--force" not in seen[0][2]


@pytest.mark.skipif(os.environ.get("STDBMOD_EXPECT_COMPILED") != "1", reason="only where CI built the compiled build")
@pytest.mark.skipif(not compiled._gcc() or shutil.which("objdump") is None, reason="the direct calls are GCC's and GNU ld's; objdump reads them")
def test_the_library_calls_its_own_functions_directly() -> None:
    # -Wl,-Bsymbolic-functions and -fno-plt: mypyc's runtime helpers (CPy_*) and the modules'
    # functions are called without the PLT (docs/performance.md, "Thirty-eighth round")
    lib = Path(compiled.__file__).parent / f"{compiled.LIBRARY}{SUFFIX}"
    asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(lib)], capture_output=True, text=True, check=True).stdout
    calls = [line for line in asm.splitlines() if "\tcall " in line]
    assert any("<CPy_AddTraceback>" in c for c in calls)  # the helper is there, called directly
    ours = [c for c in calls if re.search(r"<_?(CPy|Py)\w*@plt>", c)]  # the C runtime's own (__cxa_finalize) aside
    assert not ours, ours[:5]
