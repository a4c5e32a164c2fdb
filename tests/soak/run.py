"""The kill -9 soak: a real server under mixed load from several client processes, killed with
SIGKILL at random moments and restarted, with every check after every restart.

    python -m tests.soak.run --kills 500            # the long run (docs/reliability.md)
    python -m tests.soak.run --kills 20 --seed 3    # a quick one

After each kill, with the server down: LMDB's verify; indexes and the schedule queue
agree with the rows; the task invariants (one status and the fields it implies, attempts within
max_attempts, one task per idempotency key, a lease timer exactly for running tasks, the history
cap); the commit log replays to the live state; and the clients' histories against the commit
log: nothing acknowledged is missing, nothing is there that nobody asked for, no task completed
twice, no 5xx. Exit status 0 only if every check passed after every restart.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from stdbmod import Database
from stdbmod.retry import create_retry_module
from tests.http.servers import Server, call, env, new_identity, start_server
from tests.reliability.checks import lmdb_problems
from tests.reliability.invariants import TransitionChecker, retry_invariants

from .history import Follower, HistoryChecker

HISTORY_CAP = 50


@dataclass
class Report:
    kills: int = 0
    seconds: float = 0.0
    invoked: int = 0
    acked_writes: int = 0
    unknown: int = 0
    unsent: int = 0
    refused: int = 0
    reads: int = 0
    commit_records: int = 0
    completions: int = 0
    reruns: int = 0
    tasks: dict[str, int] = field(default_factory=dict)
    data_mb: float = 0.0
    restart_seconds_max: float = 0.0
    check_seconds_max: float = 0.0
    problems: list[str] = field(default_factory=list)

    def text(self) -> str:
        return json.dumps(asdict(self), indent=2)


class Soak:
    def __init__(self, work: Path, clients: int, seed: int, up: tuple[float, float], log: bool) -> None:
        self.work = work
        self.data = work / "data"
        self.n_clients = clients
        self.rng = random.Random(seed)
        self.seed = seed
        self.up = up
        self.log = log
        self.port = 0  # the first start takes a free port; restarts keep it
        self.module = create_retry_module().module
        self.stop_file = work / "stop"
        self.histories = [str(work / f"client{i}.jsonl") for i in range(clients + 1)]
        self.checker = HistoryChecker(self.histories)
        self.follower: Follower | None = None
        self.transitions = TransitionChecker()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.report = Report()

    def say(self, text: str) -> None:
        if self.log:
            print(text, file=sys.stderr, flush=True)

    # --- the server and the clients ---------------------------------------------------------------

    def start(self) -> Server:
        t = time.monotonic()
        server = start_server(self.data, port=self.port or None)
        self.port = server.port
        self.report.restart_seconds_max = max(self.report.restart_seconds_max, time.monotonic() - t)
        return server

    def start_clients(self, server: Server) -> None:
        owner = server.owner_token()
        owner_id = httpx.get(f"{server.base}/v1/database/retry", headers={"Authorization": f"Bearer {owner}"}).json()["owner_identity"]
        assert call(server.base, owner, "set_history_cap", HISTORY_CAP).status_code == 200
        for i in range(self.n_clients + 1):
            admin = i == self.n_clients
            if admin:
                ident, token = owner_id, owner
            else:
                ident, token = new_identity(server.base)
                assert call(server.base, owner, "grant_worker", ident).status_code == 200
            cmd = [sys.executable, "-m", "tests.soak.client", server.base, token, ident, self.histories[i], "--id", str(i),
                   "--seed", str(self.seed * 100 + i), "--stop", str(self.stop_file)]
            if admin:
                cmd.append("--admin")
            with open(self.work / f"client{i}.log", "wb") as out:
                self.procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env()))

    def stop_clients(self) -> None:
        self.stop_file.touch()
        for i, p in enumerate(self.procs):
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            text = (self.work / f"client{i}.log").read_text(errors="replace")
            if p.returncode != 0 or "Traceback" in text:
                self.report.problems.append(f"client {i} exited {p.returncode}: {text[-800:]}")

    # --- the checks -----------------------------------------------------------------------------

    def check(self, server: Server) -> list[str]:
        t = time.monotonic()
        output = server.output()
        problems = [f"server log: {line}" for line in output.splitlines() if "Traceback" in line or "Exception" in line][:5]
        problems += [f"lmdb: {p}" for p in lmdb_problems(self.data)]
        with Database.open(self.data, self.module) as db:
            problems += db.check_integrity()
            problems += retry_invariants(db)
            problems += self.transitions.feed(db)
            if self.follower is None:
                scratch = Database.create(self.work / "replay", self.module, owner=db.owner, name=db.name, identity=db.identity,
                                          run_init=False, durable=False)
                self.follower = Follower(scratch)
            problems += self.follower.follow(db)
            problems += self.checker.check(db)
            with db.read() as v:
                counts: dict[str, int] = {}
                for task in v.db.task.iter():
                    counts[task.status.value] = counts.get(task.status.value, 0) + 1
            self.report.tasks = counts
        self.report.check_seconds_max = max(self.report.check_seconds_max, time.monotonic() - t)
        return problems

    # --- the run ----------------------------------------------------------------------------------

    def run(self, kills: int) -> Report:
        started = time.monotonic()
        server = self.start()
        self.start_clients(server)
        try:
            for k in range(kills):
                lo, hi = self.up
                # a third of the kills come right after a restart, while the clients reconnect
                pause = self.rng.uniform(0, 0.05) if self.rng.random() < 0.33 else self.rng.uniform(lo, hi)
                time.sleep(pause)
                server.proc.send_signal(signal.SIGKILL)
                server.proc.wait()
                self.report.kills += 1
                problems = self.check(server)
                if problems:
                    self.report.problems += [f"after kill {k + 1}: {p}" for p in problems]
                    break
                if (k + 1) % 10 == 0 or k + 1 == kills:
                    f = self.checker.figures()
                    self.say(f"kill {k + 1}/{kills}: {f.acked_writes} acknowledged writes, {f.unknown} unknown, "
                             f"{f.records} commit records, tasks {self.report.tasks}")
                server = self.start()
        finally:
            self.stop_clients()
            if server.proc.poll() is None:
                server.proc.send_signal(signal.SIGKILL)
                server.proc.wait()
            if not self.report.problems:
                self.report.problems += [f"final: {p}" for p in self.check(server)]
            if self.follower is not None:
                self.follower.scratch.close()
        f = self.checker.figures()
        r = self.report
        r.invoked, r.acked_writes, r.unknown, r.unsent, r.refused, r.reads = f.invoked, f.acked_writes, f.unknown, f.unsent, f.refused, f.reads
        r.commit_records = f.records
        r.completions, r.reruns = self.transitions.completions, self.transitions.reruns
        r.data_mb = round(os.path.getsize(self.data / "data.mdb") / (1 << 20), 1)
        r.seconds = round(time.monotonic() - started, 1)
        return r


def soak(work: Path, kills: int, clients: int = 3, seed: int = 1, up: tuple[float, float] = (0.1, 1.0), log: bool = False) -> Report:
    return Soak(work, clients, seed, up, log).run(kills)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kills", type=int, default=500)
    p.add_argument("--clients", type=int, default=3, help="worker clients (one admin client runs besides)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--min-up", type=float, default=0.1, help="seconds of load before a kill, at least")
    p.add_argument("--max-up", type=float, default=1.5)
    p.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temporary directory)")
    a = p.parse_args()
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="stdbmod-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        report = soak(work, a.kills, a.clients, a.seed, (a.min_up, a.max_up), log=True)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(report.text())
    return 0 if not report.problems else 1


if __name__ == "__main__":
    sys.exit(main())
