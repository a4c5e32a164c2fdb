"""The seed lifecycle over HTTP with no socket: `serve`'s app and protocol (uvicorn's httptools
protocol with the guard, Starlette, the job routes, the writer thread, the metrics feed) driven
over an in-memory transport, one connection, one request at a time, fsync off.

    python -m bench.http_drive LIFECYCLES

`bench/instructions.py --http` runs it under callgrind twice and takes the difference: the
instructions of one request of the job routes, every thread's, without the kernel's share
(loopback's send and receive, the fsync) and without the load generator. A server's CPU a request
moves by a third between runs on a shared machine (docs/performance.md); this count does not, so
it is the figure to compare before and after a change to the request path.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

import msgspec
from uvicorn.server import ServerState

from stdbmod import Database
from stdbmod.http.app import create_app
from stdbmod.http.limits import DEFAULT_LIMITS
from stdbmod.http.routes_jobs import PREFIX
from stdbmod.http.serve import _tune_gc, start, uvicorn_config


class _Transport(asyncio.Transport):
    """Keeps what the server writes and settles `answer` once a whole response is there. One
    request at a time never fills a buffer, so uvicorn never pauses or resumes its reading."""

    def __init__(self) -> None:
        super().__init__()
        self.buffer = b""
        self.answer: asyncio.Future[bytes] | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.buffer += bytes(data)
        head_end = self.buffer.find(b"\r\n\r\n")
        if head_end < 0 or self.answer is None:
            return
        head = self.buffer[:head_end].lower()
        at = head.index(b"content-length: ") + len(b"content-length: ")
        end = head.find(b"\r\n", at)  # none: the head's last line
        length = int(head[at : end if end >= 0 else None])
        if len(self.buffer) >= head_end + 4 + length:
            if not self.buffer.startswith(b"HTTP/1.1 200"):
                self.answer.set_exception(RuntimeError(self.buffer[:300].decode(errors="replace")))
            else:
                self.answer.set_result(self.buffer[head_end + 4 : head_end + 4 + length])
            self.buffer = b""

    def close(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)


class _Job(msgspec.Struct):
    id: int


class _Claim(msgspec.Struct):
    claimed: bool
    job: _Job | None = None


class _Done(msgspec.Struct):
    status: str


async def drive(lifecycles: int, data: Path, lanes: bool = True) -> int:
    """Run the lifecycles; the number of jobs whose completion answered `completed`. `lanes`:
    the job routes' lanes (serve's default, http/lanes.py), else every request the ASGI way."""
    loaded, key, lock = start(data, None)
    with open(data / "owner.token") as f:
        token = f.read().strip()
    app = create_app(lambda: Database.open(data, loaded.module, durable=False), key=key, metrics=True, dashboard=False)
    config = uvicorn_config(
        app, host="127.0.0.1", port=0, log_level="warning", access_log=False, limits=DEFAULT_LIMITS, body_limit=1 << 20,
        lanes=app.state.lanes if lanes else None,
    )
    config.load()
    head = f"Host: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n".encode()
    claim_decoder = msgspec.json.Decoder(_Claim)
    done_decoder = msgspec.json.Decoder(_Done)
    completed = 0
    loop = asyncio.get_running_loop()
    try:
        async with app.router.lifespan_context(app):
            _tune_gc()
            protocol = config.http_protocol_class(config=config, server_state=ServerState(), app_state={})  # type: ignore[call-arg]
            transport = _Transport()
            protocol.connection_made(transport)

            async def post(path: bytes, body: bytes) -> bytes:
                transport.answer = loop.create_future()
                protocol.data_received(b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (path, head, len(body), body))
                return await transport.answer

            enqueue, claim = f"{PREFIX}/jobs".encode(), f"{PREFIX}/jobs/claim".encode()
            for i in range(lifecycles):
                await post(enqueue, b'{"job_type": "bench", "payload": {"n": %d}}' % i)
                got = claim_decoder.decode(await post(claim, b'{"worker_id": "w0"}'))
                if got.job is None:
                    raise RuntimeError("a claim found nothing after an enqueue")
                done = await post(b"%s/jobs/%d/complete" % (PREFIX.encode(), got.job.id), b'{"result": {"ok": true}}')
                completed += done_decoder.decode(done).status == "completed"
            protocol.connection_lost(None)
    finally:
        if lock is not None:
            lock.release()
    return completed


def run(lifecycles: int, lanes: bool = True) -> int:
    """`drive` on a fresh database, on uvloop's event loop where `serve` would use it."""
    loop_run: Any = asyncio.run
    with contextlib.suppress(ImportError):
        import uvloop

        loop_run = uvloop.run
    with tempfile.TemporaryDirectory() as d:
        return int(loop_run(drive(lifecycles, Path(os.path.join(d, "data")), lanes)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("lifecycles", type=int, help="enqueue, claim and complete this many jobs, one request at a time")
    p.add_argument("--no-lanes", action="store_true", help="every request the ASGI way, as before the job routes' lanes")
    a = p.parse_args(argv)
    if a.lifecycles < 1:
        p.error("LIFECYCLES must be at least 1")
    completed = run(a.lifecycles, not a.no_lanes)
    print(f"{3 * a.lifecycles} requests answered, {completed} jobs completed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
