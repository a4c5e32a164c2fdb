"""`LanedProtocol`: the guarded protocol (guard.py) serving the job routes' lanes (lanes.py) itself;
every other request goes to the ASGI app as before. `serve` builds it with `laned`."""

from __future__ import annotations

from time import perf_counter
from typing import Any, ClassVar, Final

from starlette.requests import Request
from starlette.responses import Response
from uvicorn.protocols.http.httptools_impl import STATUS_LINE

from .._mypyc import mypyc_attr
from .errors import log as http_log
from .guard import GuardedProtocol
from .lanes import Lane, Lanes, log
from .limits import ConnectionLimits

# The bytes of "?" and "%" as ints: CPython looks for a bytes needle in bytes only after trying it
# as an int and clearing the TypeError that raises (~2,000 instructions a check, two a request)
_QUERY: Final = 0x3F
_PERCENT: Final = 0x25


class _Pending:
    """What uvicorn's protocol sees as the connection's cycle while a lane serves a request: it
    reads `response_complete` (to queue a pipelined request behind it, or to close an idle
    connection at shutdown), sets `keep_alive` (shutdown) and `disconnected`, and wakes
    `message_event` (the client went away); the guard reads `more_body` (a body still coming)."""

    __slots__ = ("response_complete", "disconnected", "keep_alive", "more_body", "body", "message_event")

    def __init__(self, keep_alive: bool) -> None:
        self.response_complete = False
        self.disconnected = False
        self.keep_alive = keep_alive
        self.more_body = True
        self.body = bytearray()
        self.message_event = self

    def set(self) -> None:
        """`message_event.set()`: nothing waits on it."""


@mypyc_attr(allow_interpreted_subclasses=True)  # laned() subclasses it per server
class LanedProtocol(GuardedProtocol):
    """The guarded protocol with the job routes' lanes; `laned` makes one for some limits."""

    lanes: ClassVar[Lanes]
    body_limit: ClassVar[int]
    unlaned: ClassVar[type[GuardedProtocol]]
    _chosen: Lane  # the lane of the request whose body is being read

    def on_headers_complete(self) -> None:
        chosen = self._lane()
        if chosen is None:
            super().on_headers_complete()
            return
        self._head_arrived()
        self._chosen = chosen
        self.cycle = _Pending(self.parser.should_keep_alive())  # type: ignore[assignment]

    def _lane(self) -> Lane | None:
        """The lane of the request whose head just ended, its scope set for it; None: the ASGI way."""
        parser = self.parser
        cycle: Any = self.cycle  # a uvicorn cycle or a lane's _Pending (compiled: no cast to either)
        if parser.get_method() != b"POST" or parser.get_http_version() != "1.1" or parser.should_upgrade():
            return None
        if cycle is not None and not cycle.response_complete:  # pipelined: uvicorn queues it in order
            return None
        url = self.url
        if _QUERY in url or _PERCENT in url or not url.isascii() or self.expect_100_continue:
            return None
        length: bytes | None = None
        for name, value in self.headers:
            if name == b"content-length":
                length = value
            elif name == b"transfer-encoding":
                return None
        if length is None or not length.isdigit() or int(length) > self.body_limit:
            return None  # the ASGI way answers 400 or 413 (inputs.read_body)
        path = url.decode("ascii")
        found = self.lanes.match(path)
        if found is None:
            return None
        scope = self.scope
        scope["method"] = "POST"
        scope["path"] = path
        scope["raw_path"] = url
        scope["query_string"] = b""
        scope["path_params"] = found[1]  # type: ignore[typeddict-unknown-key]
        return found[0]

    def connection_lost(self, exc: Exception | None) -> None:
        cycle: Any = self.cycle
        if isinstance(cycle, _Pending) and cycle.more_body and not cycle.response_complete:
            # what the ASGI way logs then (errors.on_client_gone); nothing was called
            http_log.warning("client disconnected before sending the whole body: POST %s", self.scope["path"])
        super().connection_lost(exc)

    def on_body(self, body: bytes) -> None:
        cycle: Any = self.cycle
        if isinstance(cycle, _Pending):
            if not cycle.response_complete:
                cycle.body += body
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        cycle: Any = self.cycle
        if not isinstance(cycle, _Pending):
            super().on_message_complete()
            return
        if cycle.response_complete:
            return
        cycle.more_body = False
        # the scope now: a request pipelined behind this one gets its own at its first byte
        task = self.loop.create_task(self._serve(cycle, self.scope, self._chosen, perf_counter()))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    async def _serve(self, cycle: _Pending, scope: Any, lane: Lane, started: float) -> None:
        request = Request(scope, _Body(bytes(cycle.body)))
        status = 500
        try:
            response = await self.lanes.answer(lane, request)
            status = response.status_code
            if not cycle.disconnected:
                if self.flow.write_paused:
                    await self.flow.drain()
                self._send(cycle, response)
        except Exception as exc:  # an error handler failed: what uvicorn does then
            log.error("Exception in ASGI application\n", exc_info=exc)
            if not cycle.disconnected:
                self._send(cycle, Response(b"Internal Server Error", 500, media_type="text/plain"))
        finally:
            observe = self.lanes.observe
            if observe is not None:
                observe(lane.template, "POST", status, perf_counter() - started)
            cycle.response_complete = True
            self.on_response_complete()

    def _send(self, cycle: _Pending, response: Response) -> None:
        out = [STATUS_LINE[response.status_code]]
        for name, value in self.server_state.default_headers:
            out += [name, b": ", value, b"\r\n"]
        for name, value in response.raw_headers:
            out += [name, b": ", value, b"\r\n"]
        if not cycle.keep_alive:
            out.append(b"connection: close\r\n")
        out.append(b"\r\n")
        self.transport.write(b"".join(out) + response.body)
        if not cycle.keep_alive:
            self.transport.close()


class _Body:
    """The request's `receive`: its whole body in one message, then a disconnect."""

    __slots__ = ("body",)

    def __init__(self, body: bytes) -> None:
        self.body: bytes | None = body

    async def __call__(self) -> dict[str, Any]:
        body = self.body
        if body is None:
            return {"type": "http.disconnect"}
        self.body = None
        return {"type": "http.request", "body": body, "more_body": False}


def laned(base: type[GuardedProtocol], lanes: Lanes, body_limit: int) -> type[LanedProtocol]:
    """`base` (guard.protocol's class for some limits) with `lanes`."""
    limits: ConnectionLimits = base.limits
    return type("LanedProtocol", (LanedProtocol,), {"limits": limits, "lanes": lanes, "body_limit": body_limit, "unlaned": base})


def without_lanes(http: Any) -> Any:
    """uvicorn's `http` setting `http` without lanes: for a second server beside the app's (the
    metrics port), which must not answer the job routes."""
    if isinstance(http, type) and issubclass(http, LanedProtocol):
        return http.unlaned
    return http
