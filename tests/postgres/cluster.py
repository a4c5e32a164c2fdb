"""`stdbmod serve` nodes on one PostgreSQL schema, as processes, for the multi-node tests."""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psycopg

from stdbmod.local import place
from stdbmod.storage.postgres.coordination import LEADER_CLASS
from tests.http.servers import ROOT, announced_port, env, wait_ready
from tests.postgres import server


@dataclass
class Node:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """kill -9: no shutdown of any kind."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


_STARTS = itertools.count(1)


def start_node(url: str, home: Path, *, wait: bool = True) -> Node:
    log = home.parent / f"node-{home.name}-{next(_STARTS)}.log"
    home.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "stdbmod.http", "--data", url, "--port", "0", "--log-level", "warning"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env(home), cwd=ROOT)
    node = Node(proc, 0, log)
    if wait:
        try:
            node.port = announced_port(log, node.alive)
            wait_ready(node.base, node.alive, log)
        except BaseException:
            node.kill()
            raise
    return node


def owner_token(url: str) -> str:
    raw = place.read_file(url, "owner.token")
    assert raw is not None
    return raw.decode().strip()


def leader_pid(schema_lock: int) -> int | None:
    """The process (a node) whose session holds the schedules' lock, from pg_stat_activity."""
    with psycopg.connect(server.DSN, autocommit=True) as conn:
        row = conn.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s::oid AND l.objid = %s::oid",
            (LEADER_CLASS, schema_lock & 0xFFFFFFFF),
        ).fetchone()
    if row is None or not str(row[0]).startswith("stdbmod-lead-"):
        return None
    return int(str(row[0]).rsplit("-", 1)[1])
