"""Real servers for the HTTP tests: `python -m stdbmod.http` subprocesses on a free loopback port,
or uvicorn in a thread of the test process (when a test must drive the clock or spy on the
writer). Both listen on 127.0.0.1 and speak real HTTP."""

from __future__ import annotations

import itertools
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

ROOT = Path(__file__).resolve().parents[2]
STARTUP_DEADLINE = 30.0


@contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port nothing listens on while the block runs: bound and held, never listened
    on, so a connection is refused and no other process (another suite beside this one) can take it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


def loopback_socket() -> socket.socket:
    """A listening socket on a free loopback port. A port that is picked, closed and then bound
    again may be taken in between by another process (CI runs two suites side by side), and
    a test would then talk to that process: bind once and keep it."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(128)
    return s


LISTENING = re.compile(r"stdbmod: listening on http://[^\s]+:(\d+)$", re.M)
METRICS_LISTENING = re.compile(r"stdbmod: metrics without a token on http://[^\s]+:(\d+)/metrics$", re.M)


def announced_port(log: Path, alive: Callable[[], bool], pattern: re.Pattern[str] = LISTENING) -> int:
    """The port a server started with `--port 0` took, from the line it prints (a bounded wait
    for it to write). Servers of tests take port 0: the kernel picks a port that is free, with
    no gap between picking and binding for another process to take it."""
    deadline = time.monotonic() + STARTUP_DEADLINE
    while time.monotonic() < deadline:
        found = pattern.search(log.read_text(errors="replace"))
        if found:
            return int(found[1])
        if not alive():
            raise RuntimeError(f"the server exited during startup:\n{log.read_text(errors='replace')}")
        time.sleep(0.05)
    raise RuntimeError(f"the server did not say its port within {STARTUP_DEADLINE}s:\n{log.read_text(errors='replace')}")


def serving(log: Path, alive: Callable[[], bool]) -> str:
    """The base URL of a server started with `--port 0` once it answers."""
    base = f"http://127.0.0.1:{announced_port(log, alive)}"
    wait_ready(base, alive, log)
    return base


def env(home: Path | None = None) -> dict[str, str]:
    """The environment of a child process: this worktree's stdbmod, and the CLI's identity in
    `home` (STDBMOD_HOME) rather than the user's config directory."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    if home is not None:
        e["STDBMOD_HOME"] = str(home)
    return e


def wait_ready(base: str, alive: Any, log: Path | None = None) -> None:
    """Poll /v1/ping until it answers (a bounded deadline, not a wait for time to pass)."""
    deadline = time.monotonic() + STARTUP_DEADLINE
    while time.monotonic() < deadline:
        if not alive():
            raise RuntimeError(f"the server exited during startup:\n{log.read_text() if log else ''}")
        try:
            if httpx.get(base + "/v1/ping", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"the server did not answer within {STARTUP_DEADLINE}s:\n{log.read_text() if log else ''}")


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    data: Path
    port: int
    log: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def owner_token(self) -> str:
        return (self.data / "owner.token").read_text().strip()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def output(self) -> str:
        return self.log.read_text()

    def wait_for_output(self, *needles: str, deadline: float = STARTUP_DEADLINE) -> str:
        """The server's output once one of `needles` is in it (a bounded wait for it to write)."""
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            text = self.output()
            if any(n in text for n in needles):
                return text
            time.sleep(0.05)
        raise AssertionError(f"none of {needles} in the server's output:\n{self.output()}")


_STARTS = itertools.count(1)


def start_server(
    data: Path, module: str | None = None, *args: str, wait: bool = True, port: int | None = None, home: Path | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> Server:
    """`python -m stdbmod.http --data DATA` on a free port; the CLI's identity (the owner of what
    it publishes) lives in `home`, by default next to DATA. `preexec_fn` runs in the child before
    the server starts (to lower a resource limit, say)."""
    home = home or data.parent / f"{data.name}-home"
    log = data.parent / f"{data.name}-server-{next(_STARTS)}.log"
    cmd = [sys.executable, "-m", "stdbmod.http", "--data", str(data), "--port", str(port or 0), "--log-level", "warning", *args]
    if module:
        cmd.append(module)
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env(home), cwd=ROOT, preexec_fn=preexec_fn)
    server = Server(proc, data, port or 0, log)
    if wait:
        try:
            server.port = announced_port(log, lambda: proc.poll() is None)
            wait_ready(server.base, lambda: proc.poll() is None, log)
        except BaseException:
            server.stop(signal.SIGKILL)
            raise
    return server


@dataclass
class ThreadServer:
    """uvicorn serving `app` on a loopback port from a thread of this process."""

    app: Any
    _socket: socket.socket = field(default_factory=loopback_socket)

    @property
    def port(self) -> int:
        return int(self._socket.getsockname()[1])

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ThreadServer:
        config = uvicorn.Config(self.app, log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True)
        self._thread.start()
        wait_ready(self.base, self._thread.is_alive)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(20)
        self._socket.close()


# --- identities and roles over HTTP ----------------------------------------------------------------


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def new_identity(base: str) -> tuple[str, str]:
    r = httpx.post(base + "/v1/identity")
    r.raise_for_status()
    body = r.json()
    return body["identity"], body["token"]


def call(base: str, token: str, reducer: str, *args: Any, db: str = "retry") -> httpx.Response:
    return httpx.post(f"{base}/v1/database/{db}/call/{reducer}", json=list(args), headers=bearer(token))


@dataclass
class Roles:
    """Tokens of the owner (the first admin), another admin, a worker, a plain identity."""

    owner: str
    admin: str
    worker: str
    plain: str
    identities: dict[str, str]

    @classmethod
    def create(cls, base: str, owner_token: str, db: str = "retry") -> Roles:
        ids: dict[str, str] = {}
        tokens: dict[str, str] = {}
        for role in ("admin", "worker", "plain"):
            ids[role], tokens[role] = new_identity(base)
        assert call(base, owner_token, "add_admin", ids["admin"], db=db).status_code == 200
        assert call(base, owner_token, "grant_worker", ids["worker"], db=db).status_code == 200
        return cls(owner_token, tokens["admin"], tokens["worker"], tokens["plain"], ids)
