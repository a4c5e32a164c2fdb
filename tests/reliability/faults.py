"""Running the driver under strace's syscall fault injection, and reading what it said.

strace counts `when=N` per thread, and every commit happens on the database's writer thread, so
"the N-th fdatasync" means the N-th commit of the workload. Setup happens in an untraced run;
each injected run starts from a fresh copy of the set-up database.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

from .workloads import Outcome, Workload, save, units

ROOT = Path(__file__).resolve().parents[2]
DATA_SYSCALLS = ("fdatasync", "pwrite64", "writev")  # how LMDB writes: pages, the sync, the meta page


@cache
def strace_problem() -> str | None:
    """Why strace fault injection cannot run here, or None."""
    exe = shutil.which("strace")
    if exe is None:
        return "strace is not installed (Debian: apt-get install -y strace)"
    probe = subprocess.run([exe, "-f", "-qq", "-o", os.devnull, "-e", "inject=getpid:error=EIO:when=1", "true"], capture_output=True)
    if probe.returncode != 0:
        return f"strace cannot trace here (ptrace not permitted?): {probe.stderr.decode(errors='replace').strip()}"
    return None


def eatmydata_problem() -> str | None:
    return None if shutil.which("eatmydata") else "eatmydata is not installed (Debian: apt-get install -y eatmydata)"


needs_strace = pytest.mark.skipif(strace_problem() is not None, reason=strace_problem() or "")


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), e.get("PYTHONPATH")]))
    return e


def driver_cmd(data: Path, workload: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tests.reliability.driver", str(data), str(workload), *extra]


class Fixture:
    """A workload saved to disk and a database set up for it, copied fresh for every run."""

    def __init__(self, w: Workload, where: Path, *extra: str) -> None:
        self.workload = w
        self.where = where
        self.file = save(w, where / "workload.json")
        self.pristine = where / "pristine"
        self.extra = extra
        subprocess.run(driver_cmd(self.pristine, self.file, "--setup", *extra), env=env(), check=True, timeout=120)
        self.runs = 0

    def fresh(self) -> Path:
        self.runs += 1
        data = self.where / f"run{self.runs}"
        shutil.copytree(self.pristine, data)
        return data


@dataclass
class Run:
    data: Path
    rc: int
    out: str
    trace: str

    @property
    def killed(self) -> bool:
        return "killed by SIGKILL" in self.trace

    @property
    def injected(self) -> bool:
        return "(INJECTED)" in self.trace or self.killed


def run(fx: Fixture, inject: str | None, trace: tuple[str, ...] = DATA_SYSCALLS, prefix: tuple[str, ...] = (), timeout: float = 120) -> Run:
    """Run the workload on a fresh copy, under strace with `inject` (e.g. "fdatasync:signal=SIGKILL:when=3")."""
    data = fx.fresh()
    log = fx.where / f"run{fx.runs}.trace"
    cmd = ["strace", "-f", "-qq", "-o", str(log), "-e", f"trace={','.join(trace)}"]
    if inject is not None:
        cmd += ["-e", f"inject={inject}"]
    cmd += [*prefix, *driver_cmd(data, fx.file, *fx.extra)]
    p = subprocess.run(cmd, env=env(), capture_output=True, timeout=timeout)
    text = log.read_text(errors="replace") if log.exists() else ""
    return Run(data, p.returncode, p.stdout.decode(errors="replace"), text)


# --- what the driver said ------------------------------------------------------------------------


@dataclass
class Said:
    """The driver's protocol lines (see driver.py), parsed."""

    started: list[int] = field(default_factory=list)
    done: set[int] = field(default_factory=set)
    answers: dict[tuple[int, int], Outcome] = field(default_factory=dict)
    panicked: bool = False
    ended: bool = False

    @property
    def in_flight(self) -> int | None:
        """The step that started and did not finish, if any."""
        if self.started and self.started[-1] not in self.done:
            return self.started[-1]
        return None

    def answered_in(self, step: int) -> int:
        return sum(1 for (s, _) in self.answers if s == step)

    def acknowledged(self) -> list[tuple[int, int]]:
        return sorted(k for k, o in self.answers.items() if o.kind == "ack")


_KIND = {"A": "ack", "N": "nak", "E": "err"}


def parse(out: str) -> Said:
    said = Said()
    for line in out.splitlines():
        parts = line.split()
        if not parts:
            continue
        tag = parts[0]
        if tag == "S":
            said.started.append(int(parts[1]))
        elif tag == "D":
            said.done.add(int(parts[1]))
        elif tag in _KIND:
            said.answers[(int(parts[1]), int(parts[2]))] = Outcome(_KIND[tag], parts[3] if len(parts) > 3 else "")
        elif tag == "P":
            said.panicked = True
        elif tag == "END":
            said.ended = True
    return said


def check_complete(w: Workload, said: Said) -> list[str]:
    """A run that was not killed answered every call of every step."""
    problems = []
    for i, step in enumerate(w.steps):
        for j in range(units(step)):
            if (i, j) not in said.answers:
                problems.append(f"step {i} unit {j} was never answered")
    return problems
