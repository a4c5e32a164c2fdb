"""Servers the peers need, started on loopback in a scratch directory and stopped afterwards:
redis-server (append-only file, fsync on every write) and PostgreSQL (fsync and synchronous
commit on, its defaults)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

from .stats import SkipRow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SkipRow(f"{what} exited at start (code {proc.returncode})")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise SkipRow(f"{what} did not start within {timeout:.0f}s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def redis_server(workdir: str) -> Iterator[int]:
    """A redis-server with appendonly yes, appendfsync always; yields its port."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise SkipRow("redis-server not installed")
    port = free_port()
    args = [exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", workdir, "--appendonly", "yes",
            "--appendfsync", "always", "--save", "", "--daemonize", "no", "--protected-mode", "yes"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc, "redis-server")
        yield port
    finally:
        _stop(proc)


def _pg_bin() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return os.path.dirname(found[-1])
    exe = shutil.which("initdb")
    return os.path.dirname(exe) if exe else None


@contextmanager
def postgres_server(workdir: str) -> Iterator[str]:
    """A throwaway PostgreSQL cluster on 127.0.0.1 (fsync=on, synchronous_commit=on); yields a
    conninfo string. As root it runs as the `postgres` system user, which PostgreSQL requires."""
    bindir = _pg_bin()
    if bindir is None:
        raise SkipRow("PostgreSQL not installed")
    data = os.path.join(workdir, "pg")
    os.makedirs(data)
    prefix: list[str] = []
    if os.geteuid() == 0:
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            raise SkipRow("running as root and there is no postgres user") from None
        os.chown(workdir, pw.pw_uid, pw.pw_gid)
        os.chown(data, pw.pw_uid, pw.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    r = subprocess.run([*prefix, f"{bindir}/initdb", "-D", data, "-U", "bench", "--auth=trust", "-E", "UTF8"],
                       capture_output=True)
    if r.returncode != 0:
        raise SkipRow(f"initdb failed: {r.stderr.decode(errors='replace').strip()[-200:]}")
    port = free_port()
    proc = subprocess.Popen(
        [*prefix, f"{bindir}/postgres", "-D", data, "-h", "127.0.0.1", "-p", str(port), "-k", data,
         "-c", "fsync=on", "-c", "synchronous_commit=on", "-c", "full_page_writes=on"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc, "postgres")
        deadline = time.monotonic() + 30
        while subprocess.run([f"{bindir}/pg_isready", "-h", "127.0.0.1", "-p", str(port)], capture_output=True).returncode != 0:
            if time.monotonic() > deadline:
                raise SkipRow("postgres did not become ready")
            time.sleep(0.1)
        yield f"host=127.0.0.1 port={port} user=bench dbname=postgres"
    finally:
        _stop(proc)
