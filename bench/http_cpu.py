"""Where the HTTP server's CPU goes per request: one `stdbmod serve` driven by the load generator
of bench/http_load.py (the durable lifecycle over seed 000's routes), reporting the server's CPU
time per request split by thread (the event loop, the writer, the scheduler), and the client's.
On a shared machine, CPU per request is steadier than requests/s. Each thread's waits per request
(voluntary context switches: it blocked on a queue, a lock, the GIL or I/O) and the calls per
commit (from /metrics) show how the stages take turns (docs/performance.md, "Twenty-second round").

    python -m bench.http_cpu JOBS WORKERS [--py-spy OUT]   # OUT.txt: raw stacks, else an SVG
    python -m bench.http_cpu JOBS WORKERS --fronts N       # `serve --workers N`: each process

With --py-spy, py-spy records the server (GIL holders only, every thread) while the load runs.
With --fronts, the writer process and each HTTP front are reported apart, thread by thread.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

from .http_load import ROOT, _process_cpu
from .servers import free_port, wait_port


def _threads(pid: int) -> dict[str, tuple[str, float, int]]:
    """Each thread of `pid`: its name, CPU seconds and voluntary context switches so far (Linux
    /proc). A thread switches voluntarily each time it blocks: on a queue, a lock, the GIL, I/O."""
    out: dict[str, tuple[str, float, int]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                waits = next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches:"))
        except (OSError, StopIteration):
            continue
        fields = stat.rpartition(")")[2].split()
        out[tid] = (stat[stat.index("(") + 1 : stat.rindex(")")], (int(fields[11]) + int(fields[12])) / tick, waits)
    return out


def _calls_per_commit(port: int, token: str) -> tuple[float, int] | None:
    """Calls per commit and commits so far, from the server's /metrics (None without it): how
    well concurrent requests shared their commits."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read().decode()
    except OSError:  # prometheus-client not installed: a 404
        return None
    found = dict(re.findall(r"^stdbmod_commit_batch_size_(sum|count) (\S+)$", text, re.M))
    if "count" not in found or not float(found["count"]):
        return None
    return float(found["sum"]) / float(found["count"]), int(float(found["count"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jobs", type=int)
    ap.add_argument("workers", type=int)
    ap.add_argument("--py-spy", dest="py_spy", metavar="OUT")
    ap.add_argument("--fronts", type=int, default=0, help="serve --workers N: HTTP in N front processes")
    a = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": ROOT}
    with tempfile.TemporaryDirectory(prefix="stdbmod-http-cpu-") as d:
        data, port = os.path.join(d, "data"), free_port()
        server = subprocess.Popen([sys.executable, "-m", "stdbmod.http", "--data", data, "--port", str(port), "--log-level", "warning",
                                   "--workers", str(a.fronts)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        spy = None
        try:
            wait_port(port, server, "stdbmod serve")
            with open(os.path.join(data, "owner.token")) as f:
                token = f.read().strip()
            if a.py_spy:
                fmt = "raw" if a.py_spy.endswith(".txt") else "flamegraph"
                spy = subprocess.Popen(["py-spy", "record", "--gil", "--threads", "-r", "500", "-f", fmt, "-o", a.py_spy, "--pid", str(server.pid)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            pids = [server.pid, *_children(server.pid, a.fronts)]
            before, cpu0 = {pid: _threads(pid) for pid in pids}, _process_cpu(server.pid)
            gen = subprocess.run([sys.executable, "-m", "bench.http_load", "gen", str(port), token, str(a.jobs), str(a.workers)],
                                 env=env, cwd=ROOT, capture_output=True, text=True)
            after, cpu1 = {pid: _threads(pid) for pid in pids}, _process_cpu(server.pid)
            shared = _calls_per_commit(port, token)
        finally:
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait()
            server.send_signal(signal.SIGTERM)
            server.wait(30)
    if gen.returncode != 0:
        raise SystemExit(f"load generator failed:\n{gen.stderr[-2000:]}")
    m = json.loads(gen.stdout.strip().splitlines()[-1])
    requests = 3 * m["jobs"]
    # each thread's CPU seconds and waits during the load (a thread started meanwhile from zero)
    zero = ("", 0.0, 0)
    spent = {pid: {tid: (t1 - before[pid].get(tid, zero)[1], w1 - before[pid].get(tid, zero)[2]) for tid, (_, t1, w1) in after[pid].items()}
             for pid in pids}
    used = {pid: {tid: cpu for tid, (cpu, _) in threads.items()} for pid, threads in spent.items()}
    assert cpu0 is not None and cpu1 is not None
    total = cpu1 - cpu0  # the server and its fronts, threads that ended meanwhile included
    print(f"{a.workers} workers: {m['jobs'] / m['elapsed']:.0f} jobs/s, {requests / m['elapsed']:.0f} requests/s")
    print(f"server CPU {total / requests * 1e6:.0f} us/request; client CPU {m['client_cpu'] / requests * 1e6:.0f} us/request")
    if shared is not None:  # the whole run's, start-up's few commits included
        print(f"calls per commit {shared[0]:.1f} ({shared[1]} commits)")
    # /proc names every Python thread "python" (py-spy shows the runtime's names). One process:
    # the main thread is the event loop, then come the runtime's writer and scheduler, started
    # in that order. With fronts the writer process's main thread only waits; each front's main
    # thread is its event loop.
    for pid in pids:
        if a.fronts:
            role = "writer process" if pid == server.pid else f"front pid {pid}"
            print(f" {role}: {sum(used[pid].values()) / requests * 1e6:.0f} us/request")
        for i, tid in enumerate(sorted(used[pid], key=int)):
            if used[pid][tid] > 0 or i <= 1:  # the event loop and the writer always: below a clock tick (10 ms) a short run counts 0
                label = {0: "event loop (main thread)" if pid != server.pid or not a.fronts else "main thread",
                         1: "thread 1 (the writer)" if pid == server.pid else "thread 1"}.get(i, f"thread {i}")
                print(f"  {label}: {used[pid][tid] / requests * 1e6:.0f} us/request, {spent[pid][tid][1] / requests:.2f} waits/request")


def _children(pid: int, n: int) -> list[int]:
    """The `n` HTTP fronts of the writer `pid`, once all have started (Linux /proc)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                found = [int(p) for p in f.read().split()]
        except OSError:
            found = []
        if len(found) >= n:
            return found
        if time.monotonic() > deadline:
            raise SystemExit(f"the server started {len(found)} of its {n} HTTP fronts within 30 s")
        time.sleep(0.05)


if __name__ == "__main__":
    main()
