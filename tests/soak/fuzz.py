"""Schemathesis, long version: positive mode, then negative mode, every check, against a real
server; then the database must be whole (LMDB verify, integrity, invariants, log replay) and the
server's log free of tracebacks. CI runs a shorter mixed-mode pass (tests/http/test_schemathesis.py).

    python -m tests.soak.fuzz --max-examples 300
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.http.servers import start_server
from tests.reliability.checks import after_restart

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "tests" / "http" / "schemathesis.toml"
CLI = Path(sys.executable).with_name("schemathesis")


def fuzz(work: Path, max_examples: int, seed: int, modes: tuple[str, ...] = ("positive", "negative")) -> list[str]:
    problems: list[str] = []
    server = start_server(work / "data")
    try:
        for mode in modes:
            t = time.monotonic()
            run = subprocess.run(
                [str(CLI), "--config-file", str(CONFIG), "run", server.base + "/openapi.json",
                 "--header", f"Authorization: Bearer {server.owner_token()}", "--mode", mode,
                 "--max-examples", str(max_examples), "--seed", str(seed), "--no-color", "--workers", "2", "--request-timeout", "20"],
                capture_output=True, text=True, cwd=work,
            )
            summary = [line for line in run.stdout.splitlines() if "generated" in line or "passed" in line][-1:]
            print(f"schemathesis --mode {mode}: exit {run.returncode} in {time.monotonic() - t:.0f} s; {' '.join(summary).strip()}", file=sys.stderr)
            if run.returncode != 0:
                problems.append(f"schemathesis --mode {mode} failed:\n{run.stdout[-4000:]}")
    finally:
        code = server.stop()
    if code != 0:
        problems.append(f"the server exited {code}")
    log = server.output()
    if "Traceback" in log or "Exception in ASGI" in log:
        problems.append("the server logged a traceback:\n" + log[-3000:])
    problems += after_restart(work / "data", "retry").problems
    return problems


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--max-examples", type=int, default=300)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="stdbmod-fuzz-") as tmp:
        problems = fuzz(Path(tmp), a.max_examples, a.seed)
    for line in problems:
        print(line)
    print("fuzz: ok" if not problems else f"fuzz: {len(problems)} problem(s)")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
