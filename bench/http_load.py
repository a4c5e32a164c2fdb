"""stdbmod over HTTP: `stdbmod serve` in its own process, driven by a lean load generator in
another (asyncio, raw HTTP/1.1 on keep-alive connections, no client library), so what is
measured is the server.

Each of W workers owns one connection and runs its share of the lifecycle with seed 000's
routes: POST /api:job-retry/jobs, POST /api:job-retry/jobs/claim, POST
/api:job-retry/jobs/{id}/complete, as the database's owner (an admin).

    python -m bench.http_load gen PORT TOKEN JOBS WORKERS   # the generator; prints JSON
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

import msgspec

from .servers import free_port, wait_port
from .stats import SkipRow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIX = "/api:job-retry"


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, token: str) -> None:
        self.r = reader
        self.w = writer
        self.head = f"Host: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n"

    async def post(self, path: str, body: bytes) -> bytes:
        self.w.write(f"POST {path} HTTP/1.1\r\n{self.head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        head = await self.r.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = -1
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
            elif name.lower() == b"transfer-encoding":
                raise RuntimeError("chunked responses are not supported by the load generator")
        data = await self.r.readexactly(length) if length > 0 else b""
        if status != 200:
            raise RuntimeError(f"POST {path}: HTTP {status}: {data[:300]!r}")
        return data


class _Job(msgspec.Struct):
    id: int


class _Claim(msgspec.Struct):
    claimed: bool
    job: _Job | None = None


_claim_decoder = msgspec.json.Decoder(_Claim)


async def _worker(port: int, token: str, jobs: int, k: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    c = _Conn(reader, writer, token)
    claim_body = json.dumps({"worker_id": f"w{k}"}).encode()
    try:
        for i in range(jobs):
            await c.post(f"{PREFIX}/jobs", b'{"job_type": "bench", "payload": {"n": %d}}' % i)
            got = _claim_decoder.decode(await c.post(f"{PREFIX}/jobs/claim", claim_body))
            if not got.claimed or got.job is None:
                raise RuntimeError("a claim found nothing, though every worker enqueues before it claims")
            await c.post(f"{PREFIX}/jobs/{got.job.id}/complete", b'{"result": {"ok": true}}')
    finally:
        writer.close()


async def _generate(port: int, token: str, jobs: int, workers: int) -> float:
    per = jobs // workers
    t0 = time.perf_counter()
    await asyncio.gather(*(_worker(port, token, per, k) for k in range(workers)))
    return time.perf_counter() - t0


def generate(port: int, token: str, jobs: int, workers: int) -> dict[str, float]:
    elapsed = asyncio.run(_generate(port, token, jobs, workers))
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"jobs": jobs // workers * workers, "elapsed": elapsed, "client_cpu": ru.ru_utime + ru.ru_stime}


def run(path: str, jobs: int, workers: int) -> float:
    """Jobs/s of `workers` HTTP workers against a fresh `stdbmod serve`."""
    try:
        import stdbmod.http  # noqa: F401
    except ImportError:
        raise SkipRow("stdbmod.http is not on this branch") from None
    data = os.path.join(path, "data")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": ROOT}
    server = subprocess.Popen(
        [sys.executable, "-m", "stdbmod.http", "--data", data, "--port", str(port), "--log-level", "warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        wait_port(port, server, "stdbmod serve")
        with open(os.path.join(data, "owner.token")) as f:
            token = f.read().strip()
        cpu0 = _process_cpu(server.pid)
        gen = subprocess.run(
            [sys.executable, "-m", "bench.http_load", "gen", str(port), token, str(jobs), str(workers)],
            env=env, cwd=ROOT, capture_output=True, text=True,
        )
        if gen.returncode != 0:
            raise RuntimeError(f"load generator failed:\n{gen.stderr[-2000:]}")
        cpu1 = _process_cpu(server.pid)
        m = json.loads(gen.stdout.strip().splitlines()[-1])
        LAST_CLIENT_CPU.append(m["client_cpu"] / m["elapsed"])
        if cpu0 is not None and cpu1 is not None:
            LAST_SERVER_CPU_US.append((cpu1 - cpu0) / (3 * m["jobs"]) * 1e6)
        return float(m["jobs"] / m["elapsed"])
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


LAST_CLIENT_CPU: list[float] = []  # the generator's CPU use / wall time, per run (1.0 = one core)
LAST_SERVER_CPU_US: list[float] = []  # the server's CPU time (all its threads) per request, in us


def _process_cpu(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` so far (Linux /proc; None elsewhere). The
    machine may be shared, so CPU per request says more about the server than requests/s."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

if __name__ == "__main__":
    if sys.argv[1] != "gen":
        raise SystemExit("usage: python -m bench.http_load gen PORT TOKEN JOBS WORKERS")
    port_, token_, jobs_, workers_ = int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    print(json.dumps(generate(port_, token_, jobs_, workers_)))
