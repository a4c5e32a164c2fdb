"""Worker processes for the process tests: `python -m stdbmod worker tests.client.handlers:worker`
with JSON logs in a file, and the runs its handlers wrote down."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.http.servers import ROOT, env

DEADLINE = 120.0


def wait_for(cond: Callable[[], bool], what: str, deadline: float = DEADLINE) -> None:
    end = time.monotonic() + deadline
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


@dataclass
class Files:
    """Where the handlers write their runs, and the gate file they wait for."""

    runs: Path
    gate: Path

    def runs_seen(self) -> list[tuple[int, int, str]]:
        if not self.runs.exists():
            return []
        out = []
        for line in self.runs.read_text().splitlines():
            job, attempt, by = line.split()
            out.append((int(job), int(attempt), by))
        return out

    def open_gate(self) -> None:
        self.gate.touch()


class WorkerProc:
    def __init__(self, base: str, token: str, files: Files, log: Path, *args: str) -> None:
        self.log = log
        cmd = [sys.executable, "-m", "stdbmod", "worker", "tests.client.handlers:worker", "--url", base, "--json", *args]
        e = env()
        e.update({"STDBMOD_TOKEN": token, "STDBMOD_TEST_RUNS": str(files.runs), "STDBMOD_TEST_GATE": str(files.gate)})
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=e, cwd=ROOT)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = DEADLINE) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(30)

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                out.append({"raw": line})
        return out

    def outcomes(self) -> Counter[str]:
        return Counter(e["outcome"] for e in self.events() if e.get("event") == "job")

    def said(self, text: str) -> bool:
        return any(text in str(e.get("message", e.get("raw", ""))) for e in self.events())
