"""stdbmod over HTTP: `stdbmod serve` in its own process, driven by a lean load generator in
another (asyncio, raw HTTP/1.1 on keep-alive connections, no client library), so what is
measured is the server.

Each of W workers owns one connection and runs its share of the lifecycle with seed 000's
routes: POST /api:job-retry/jobs, POST /api:job-retry/jobs/claim, POST
/api:job-retry/jobs/{id}/complete, as the database's owner (an admin).

    python -m bench.http_load gen PORT TOKEN JOBS WORKERS [BATCH]   # the generator; prints JSON
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import cast

import msgspec

from .servers import free_port, wait_port
from .stats import SkipRow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIX = "/api:job-retry"
ENV = {**os.environ, "PYTHONPATH": ROOT}


class _Conn(asyncio.Protocol):
    """One keep-alive connection, one request at a time. A bare Protocol parsing the answers
    itself (header block, Content-Length): the streams API costs several futures and a copy per
    answer, CPU that on 2 cores the generator would take from the server it measures."""

    def __init__(self, token: str) -> None:
        self.head = f"Host: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n".encode()
        self.buf = bytearray()
        self.waiter: asyncio.Future[bytes] | None = None
        self.transport: asyncio.Transport | None = None
        self.lost: Exception | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc or ConnectionError("the server closed the connection")
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(self.lost)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0 or self.waiter is None:
            return
        head = bytes(self.buf[:end])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                self.waiter.set_exception(RuntimeError("chunked responses are not supported by the load generator"))
                return
        if len(self.buf) < end + 4 + length:
            return
        body = bytes(self.buf[end + 4 : end + 4 + length])
        del self.buf[: end + 4 + length]
        status = int(head[9:12])
        if status != 200:
            self.waiter.set_exception(RuntimeError(f"HTTP {status}: {body[:300]!r}"))
        else:
            self.waiter.set_result(body)

    async def post(self, path: bytes, body: bytes) -> bytes:
        if self.lost is not None:
            raise self.lost
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (path, self.head, len(body), body))
        try:
            return await self.waiter
        except RuntimeError as e:
            raise RuntimeError(f"POST {path.decode()}: {e}") from None


class _Job(msgspec.Struct):
    id: int


class _Claim(msgspec.Struct):
    claimed: bool
    job: _Job | None = None


_claim_decoder = msgspec.json.Decoder(_Claim)


async def _worker(port: int, token: str, jobs: int, k: int) -> None:
    transport, c = await asyncio.get_running_loop().create_connection(lambda: _Conn(token), "127.0.0.1", port)
    claim_body = json.dumps({"worker_id": f"w{k}"}).encode()
    enqueue, claim = f"{PREFIX}/jobs".encode(), f"{PREFIX}/jobs/claim".encode()
    try:
        for i in range(jobs):
            await c.post(enqueue, b'{"job_type": "bench", "payload": {"n": %d}}' % i)
            got = _claim_decoder.decode(await c.post(claim, claim_body))
            if not got.claimed or got.job is None:
                raise RuntimeError("a claim found nothing, though every worker enqueues before it claims")
            await c.post(b"%s/jobs/%d/complete" % (PREFIX.encode(), got.job.id), b'{"result": {"ok": true}}')
    finally:
        transport.close()


class _Jobs(msgspec.Struct):
    jobs: list[_Job]


_jobs_decoder = msgspec.json.Decoder(_Jobs)


async def _batch_worker(port: int, token: str, jobs: int, k: int, batch: int) -> None:
    """The lifecycle through the batch routes: enqueue_many, claim_many, complete_many of
    `batch` jobs each."""
    transport, c = await asyncio.get_running_loop().create_connection(lambda: _Conn(token), "127.0.0.1", port)
    p = PREFIX.encode()
    try:
        for first in range(0, jobs, batch):
            n = min(batch, jobs - first)
            items = ",".join('{"job_type": "bench", "payload": {"n": %d}}' % (first + i) for i in range(n))  # noqa: UP031 (JSON's braces)
            await c.post(p + b"/jobs/enqueue_many", b'{"jobs": [%s]}' % items.encode())
            got = _jobs_decoder.decode(await c.post(p + b"/jobs/claim_many", b'{"limit": %d, "worker_id": "w%d"}' % (n, k)))
            if len(got.jobs) != n:
                raise RuntimeError(f"claim_many took {len(got.jobs)} of {n}, though every worker enqueues before it claims")
            done = ",".join('{"id": %d, "result": {"ok": true}}' % j.id for j in got.jobs)  # noqa: UP031 (JSON's braces)
            await c.post(p + b"/jobs/complete_many", b'{"jobs": [%s]}' % done.encode())
    finally:
        transport.close()


async def _generate(port: int, token: str, jobs: int, workers: int, batch: int = 0) -> float:
    per = jobs // workers
    t0 = time.perf_counter()
    if batch:
        await asyncio.gather(*(_batch_worker(port, token, per, k, batch) for k in range(workers)))
    else:
        await asyncio.gather(*(_worker(port, token, per, k) for k in range(workers)))
    return time.perf_counter() - t0


def generate(port: int, token: str, jobs: int, workers: int, batch: int = 0) -> dict[str, float]:
    try:
        import uvloop  # installed with stdbmod (uvicorn[standard]); the leaner loop
    except ImportError:
        elapsed = asyncio.run(_generate(port, token, jobs, workers, batch))
    else:
        elapsed = uvloop.run(_generate(port, token, jobs, workers, batch))
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"jobs": jobs // workers * workers, "elapsed": elapsed, "client_cpu": ru.ru_utime + ru.ru_stime}


@contextmanager
def stdbmod_server(path: str, *options: str) -> Iterator[tuple[int, str, int]]:
    """A fresh `stdbmod serve` on a free loopback port (with `options`, more `serve` flags):
    yields its port, the owner's token and its pid."""
    try:
        import stdbmod.http  # noqa: F401
    except ImportError:
        raise SkipRow("stdbmod.http is not on this branch") from None
    data = os.path.join(path, "data")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "stdbmod.http", "--data", data, "--port", str(port), "--log-level", "warning", *options],
        env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        wait_port(port, server, "stdbmod serve")
        with open(os.path.join(data, "owner.token")) as f:
            yield port, f.read().strip(), server.pid
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def generate_in_process(module: str, *args: object) -> dict[str, float]:
    """Run `python -m MODULE gen ARGS...` (a load generator) and read the JSON it prints last."""
    gen = subprocess.run([sys.executable, "-m", module, "gen", *map(str, args)], env=ENV, cwd=ROOT, capture_output=True, text=True)
    if gen.returncode != 0:
        raise RuntimeError(f"load generator failed:\n{gen.stderr[-2000:]}")
    return cast(dict[str, float], json.loads(gen.stdout.strip().splitlines()[-1]))


def run(path: str, jobs: int, workers: int, batch: int = 0, options: tuple[str, ...] = ()) -> float:
    """Jobs/s of `workers` HTTP workers against a fresh `stdbmod serve` (with `batch`: through the
    batch routes, `batch` jobs per request; with `options`, more `serve` flags: `--workers 2`)."""
    with stdbmod_server(path, *options) as (port, token, pid):
        cpu0 = _process_cpu(pid)
        m = generate_in_process("bench.http_load", port, token, jobs, workers, batch)
        cpu1 = _process_cpu(pid)
    LAST_CLIENT_CPU.append(m["client_cpu"] / m["elapsed"])
    if cpu0 is not None and cpu1 is not None:
        requests = 3 * (m["jobs"] // batch if batch else m["jobs"])
        LAST_SERVER_CPU_US.append((cpu1 - cpu0) / requests * 1e6)
    return float(m["jobs"] / m["elapsed"])


LAST_CLIENT_CPU: list[float] = []  # the generator's CPU use / wall time, per run (1.0 = one core)
LAST_SERVER_CPU_US: list[float] = []  # the server's CPU time (all its threads) per request, in us


def _process_cpu(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` and its live children so far (Linux /proc;
    None elsewhere): `serve --workers N`'s fronts are its children. The machine may be shared,
    so CPU per request says more about the server than requests/s."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(c) for c in f.read().split()]
    except OSError:
        return None
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + sum(_process_cpu(c) or 0.0 for c in children)

if __name__ == "__main__":
    if sys.argv[1] != "gen":
        raise SystemExit("usage: python -m bench.http_load gen PORT TOKEN JOBS WORKERS [BATCH]")
    port_, token_, jobs_, workers_ = int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    batch_ = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    print(json.dumps(generate(port_, token_, jobs_, workers_, batch_)))
