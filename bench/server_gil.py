"""What an HTTP server's own work takes from the GIL: one bare app (bench/bare_apps.py) with a
fixed amount of Python work a request, under uvicorn (httptools, uvloop: `serve`'s stack) and
under Granian's RSGI interface, driven by `wrk` at 16 connections with a small JSON POST, each
server's CPU a request split by thread (/proc).

    python -m bench.server_gil [--work-us 100] [--seconds 8] [--connections 16] [--rounds 2]

uvicorn parses, routes and writes on the thread that runs Python; Granian does its HTTP work on
threads of its own, without the GIL. With the app's Python work held fixed, requests/s shows what
each server's share of the GIL costs a closed loop such as the HTTP target's (docs/performance.md,
"Twenty-sixth round"). Needs `wrk` (Debian: apt-get install wrk) and `pip install granian`.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time

from .bare_apps import work
from .http_cpu import _threads
from .http_load import ROOT
from .servers import _stop, free_port, wait_port

BODY = '{"job_type":"email","payload":{"i":1}}'


def _loops_for(us: float) -> int:
    """How many of `work`'s additions take `us` microseconds here."""
    n = 10_000
    start = time.perf_counter()
    for _ in range(100):
        work(n)
    per_loop = (time.perf_counter() - start) / (100 * n)
    return max(int(us / 1e6 / per_loop), 0)


def _command(server: str, port: int) -> list[str]:
    if server == "uvicorn":
        return [sys.executable, "-m", "uvicorn", "bench.bare_apps:asgi_app", "--loop", "uvloop", "--http", "httptools",
                "--port", str(port), "--no-access-log", "--log-level", "warning"]
    return [sys.executable, "-m", "granian", "--interface", "rsgi", "--workers", "1", "--runtime-mode", "st", "--loop", "uvloop",
            "--port", str(port), "--log-level", "warning", "bench.bare_apps:rsgi_app"]


def _pids(root: int) -> list[int]:
    """`root` and its children: Granian serves from a worker process."""
    try:
        with open(f"/proc/{root}/task/{root}/children") as f:
            return [root, *map(int, f.read().split())]
    except OSError:
        return [root]


def _measure(server: str, loops: int, seconds: float, connections: int, script: str) -> tuple[float, list[tuple[str, float]]]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": ROOT, "BARE_WORK_LOOPS": str(loops)}
    proc = subprocess.Popen(_command(server, port), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_port(port, proc, server)
        time.sleep(0.5)  # Granian's worker starts after its port is bound
        pids = _pids(proc.pid)
        before = {(p, t): v for p in pids for t, v in _threads(p).items()}
        out = subprocess.run(
            ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "-s", script, f"http://127.0.0.1:{port}/"],
            capture_output=True, text=True, check=True,
        ).stdout
        after = {(p, t): v for p in pids for t, v in _threads(p).items()}
    finally:
        _stop(proc)
    rate = float(next(line for line in out.splitlines() if line.startswith("Requests/sec:")).split()[1])
    requests = rate * seconds
    threads = []
    for key, (name, cpu, _) in after.items():
        spent = cpu - before.get(key, (name, 0.0, 0))[1]
        if spent > 0.01 * seconds:
            threads.append((f"pid {key[0]} thread {key[1]} ({name})", spent / requests * 1e6))
    return rate, sorted(threads, key=lambda t: -t[1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work-us", type=float, default=100.0, help="the app's Python work a request, in microseconds (calibrated here)")
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--rounds", type=int, default=2, help="alternating runs of each server")
    a = p.parse_args(argv)
    missing = [what for what, ok in (("wrk", shutil.which("wrk")), ("granian", importlib.util.find_spec("granian"))) if not ok]
    if missing:
        print(f"server_gil: needs {' and '.join(missing)} (apt-get install wrk; pip install granian)", file=sys.stderr)
        return 2
    if a.seconds <= 0 or a.connections < 1 or a.rounds < 1 or a.work_us < 0:
        print("server_gil: --seconds, --connections and --rounds must be positive, --work-us not negative", file=sys.stderr)
        return 2
    loops = _loops_for(a.work_us)
    print(f"{a.work_us:g} us of Python work a request ({loops:,} loops), {a.connections} connections, {a.seconds:g} s a run")
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(f"wrk.method = 'POST'\nwrk.body = '{BODY}'\nwrk.headers['Content-Type'] = 'application/json'\n")
    try:
        for _ in range(a.rounds):
            for server in ("uvicorn", "granian"):
                rate, threads = _measure(server, loops, a.seconds, a.connections, f.name)
                print(f"{server}: {rate:,.0f} requests/s")
                for name, us in threads:
                    print(f"  {name}: {us:.1f} us/request")
    finally:
        os.unlink(f.name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
