"""The HTTP/1.1 connections of `stdbmod serve`: uvicorn's httptools protocol with bounded request
heads, a deadline for each head, and a cap on the connections of one server.

uvicorn and httptools bound none of these themselves: httptools buffers a header value (uvicorn
the URL) that never ends, a connection that never sends a request stays open forever (uvicorn's
keep-alive timer only starts after a first response), and `limit_concurrency` counts stalled
connections too, so under such an attack it answers every legitimate request with a 503. This
runs below the ASGI app, so all of it happens before authentication, on every route.

- Heads: a request target longer than `max_request_line` bytes is a 414; more than `max_headers`
  headers, or more than `max_header_bytes` bytes of names and values, a 431. Both answer JSON and
  close the connection. Memory per connection stays within the limits plus one socket read,
  whatever the client sends.
- Deadlines: a request's head must be complete `header_timeout` seconds after the connection
  opened or began waiting for its next request (a slow sender gets a 408 and is closed), and its
  body may not pause longer than that between two reads (the connection is closed; the handler
  sees the client gone). An idle keep-alive connection closes after uvicorn's `timeout_keep_alive`
  (or `header_timeout`, if shorter): one timer a connection does both, where uvicorn would arm a
  keep-alive timer of its own after every response. It is not cancelled when a head arrives, nor
  armed again for the next wait: a wait moves its due time (`_head_due`), and a timer that fires
  before it (or during a request) re-arms itself for what is left, or lapses. So a busy
  keep-alive connection arms its timer about once a keep-alive timeout, not once a request.
- The cap: past `max_connections` open connections of one server, a new one makes room by
  closing the connection that has waited longest without a request in progress (idle keep-alive
  connections and unfinished heads go first, requests being served never); with none to close,
  the newcomer gets a 503. So a flood of stalled connections cannot keep a legitimate client
  out, and the file descriptors in use stay below the process's limit (`serve` keeps the cap
  below it).

A refused client gets its answer reliably: the server stops writing (FIN), reads and drops what
the client still sends for at most `LINGER_SECONDS`, then closes, so the client's unsent bytes
do not turn into a reset that would discard the answer.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any, ClassVar

import httptools
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from .. import codec
from .._mypyc import mypyc_attr
from .coalesce import Coalescing
from .limits import DEFAULT_LIMITS, ConnectionLimits

LINGER_SECONDS = 2.0
LINGER_BYTES = 1 << 20
# uvloop arms a timer in whole milliseconds, so one can fire up to half of one before its due
# time: what is left of a wait below this is not worth a timer of its own
TIMER_SLACK = 0.001
WARN_EVERY = 60.0  # seconds between two warnings that the cap is reached (a flood would log a line per connection)


class HeadTooLarge(Exception):
    """Raised from httptools' callbacks to stop parsing: the head breaks a limit."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# connections of each server waiting for a request (none in progress), the longest-waiting first
_waiting: weakref.WeakKeyDictionary[ServerState, dict[GuardedProtocol, None]] = weakref.WeakKeyDictionary()
# when each server last warned that its cap was reached
_warned: weakref.WeakKeyDictionary[ServerState, float] = weakref.WeakKeyDictionary()


@mypyc_attr(allow_interpreted_subclasses=True)  # protocol() subclasses it per server
class GuardedProtocol(HttpToolsProtocol):
    """Use `protocol(limits)`: a subclass that holds the limits."""

    limits: ClassVar[ConnectionLimits] = DEFAULT_LIMITS

    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any], _loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._waiting = _waiting.setdefault(server_state, {})
        self._head_timer: asyncio.TimerHandle | None = None
        self._awaiting = False  # waiting for a request's head (the head timer's wait is on)
        self._head_due = 0.0  # when the wait ends (loop time): the idle limit, then the head's deadline
        self._head_deadline = 0.0  # when the awaited head must be whole (loop time)
        self._in_head = False  # a request's head has begun and is not complete
        self._streamed = 0  # bytes received while the head stayed incomplete, after its first read
        self._header_bytes = 0
        self._refused = False
        self._lingered = 0
        self._body_timer: asyncio.TimerHandle | None = None
        self._last_read = 0.0
        self._out: Coalescing  # connection_made makes it

    # --- the connection's life -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._out = Coalescing(transport, self.loop)
        if len(self.connections) > self.limits.max_connections:
            room = self._make_room()
            self._warn_full(room)
            if not room:
                self._refuse(503, "too many connections; try again later")
                return
        self._wait_for_request()

    def _warn_full(self, room: bool) -> None:
        now = self.loop.time()
        if now - _warned.get(self.server_state, -WARN_EVERY) >= WARN_EVERY:
            _warned[self.server_state] = now
            done = "closing the connections idle longest to admit new ones" if room else "every one is busy: refusing new ones (503)"
            self.logger.warning("%d connections open (--max-connections): %s", len(self.connections) - 1, done)

    def connection_lost(self, exc: Exception | None) -> None:
        self._end_head_wait()
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().connection_lost(exc)

    def _make_room(self) -> bool:
        """Close the connection that has waited longest without a request in progress."""
        for oldest in self._waiting:
            oldest._end_head_wait()
            oldest.transport.close()
            return True
        return False

    def _wait_for_request(self, idle_limit: float | None = None) -> None:
        """Wait for the next request's head: within `header_timeout`, and idle (no byte of it)
        for at most `idle_limit` (after a response: the keep-alive timeout)."""
        self._waiting.pop(self, None)
        self._waiting[self] = None  # the end: the most recent
        if not self._awaiting:
            self._arm_head_timer(self.limits.header_timeout if idle_limit is None else min(idle_limit, self.limits.header_timeout))

    def _arm_head_timer(self, delay: float) -> None:
        """Start a wait for a head that ends in `delay` seconds: the timer is armed only if it is
        not already, or would fire too late."""
        loop = self.loop
        now = loop.time()
        self._awaiting = True
        self._head_deadline = now + self.limits.header_timeout
        due = self._head_due = now + delay
        timer = self._head_timer
        if timer is not None:
            if timer.when() <= due:
                return  # it fires first and re-arms itself for what is left
            timer.cancel()
        self._head_timer = loop.call_later(delay, self._head_timed_out)

    def _head_arrived(self) -> None:
        """The awaited head is whole: the wait is over (its timer left to lapse), and the
        connection has a request in progress, so it is no longer one the cap may close."""
        self._in_head = False
        self._awaiting = False
        self._waiting.pop(self, None)

    def _stop_waiting(self) -> None:
        self._waiting.pop(self, None)

    def _end_head_wait(self) -> None:
        """No head is awaited any more: the connection leaves the cap's idle set and its timer is
        cancelled."""
        self._stop_waiting()
        self._awaiting = False
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or not self._awaiting:
            return  # no wait on (a request is being served): the next wait arms a timer
        left = self._head_due - self.loop.time()
        if left > TIMER_SLACK:  # the wait was moved on since this timer was armed
            self._head_timer = self.loop.call_later(left, self._head_timed_out)
            return
        if self._in_head:
            left = self._head_deadline - self.loop.time()
            if left > 0:  # the keep-alive wait ended with a head begun: it has until its deadline
                self._head_due = self._head_deadline
                self._head_timer = self.loop.call_later(left, self._head_timed_out)
                return
            self._refuse(408, f"the request's head did not arrive within {self.limits.header_timeout:g} seconds")
        else:
            self._stop_waiting()
            self.transport.close()

    def on_response_complete(self) -> None:
        # uvicorn's, spelled out (compiled), with the guard's head timer as the keep-alive timer:
        # one timer armed and cancelled a request instead of two
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:  # the next request was read while this one was served: start it
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        elif self.cycle.response_complete:
            self._wait_for_request(self.timeout_keep_alive)

    # --- reading ---------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._refused:
            self._linger(len(data))
            return
        head_was_open = self._in_head  # (uvicorn's keep-alive timer is never armed: the head timer is it)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as e:
            if isinstance(e.__context__, HeadTooLarge):
                self._refuse(e.__context__.status, e.__context__.message)
            else:
                self._bad_request()
            return
        except httptools.HttpParserError:
            self._bad_request()
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if self._in_head and head_was_open:
            # httptools keeps an unfinished header to itself: count what arrives while it lasts
            self._streamed += len(data)
            if self._streamed > self.limits.max_head:
                self._refuse(431, f"the request's headers are larger than {self.limits.max_header_bytes} bytes")
        elif self._body_pending():
            self._last_read = self.loop.time()
            if self._body_timer is None:  # only for a body still coming: most requests arrive in one read
                self._body_timer = self.loop.call_later(self.limits.header_timeout, self._body_check)

    def _body_pending(self) -> bool:
        cycle = self.cycle
        return cycle is not None and cycle.more_body and not cycle.response_complete and not cycle.disconnected

    def _body_check(self) -> None:
        """Close a connection whose request body stopped arriving; reading paused by flow control
        (the handler has not taken what came) is not the client's pause."""
        self._body_timer = None
        if not self._body_pending() or self.transport.is_closing():
            return
        if self.flow.read_paused:
            self._last_read = self.loop.time()
        idle = self.loop.time() - self._last_read
        if idle < self.limits.header_timeout:
            self._body_timer = self.loop.call_later(max(self.limits.header_timeout - idle, 0.1), self._body_check)
            return
        self.transport.close()

    def _bad_request(self) -> None:
        self.logger.warning("Invalid HTTP request received.")
        self._refuse(400, "invalid HTTP request")

    # uvicorn's on_message_begin, on_url and on_header, spelled out here (tests/http/test_guard_head.py
    # holds them to uvicorn's): every request's head runs them, and compiled they cost a third of
    # what calling uvicorn's interpreted ones did.

    def on_message_begin(self) -> None:
        self.url = b""
        self.expect_100_continue = False
        headers: list[tuple[bytes, bytes]] = []
        self.headers = headers
        self.scope = {  # type: ignore[typeddict-item]
            "type": "http",
            "asgi": {"version": self.asgi_version, "spec_version": "2.3"},
            "http_version": "1.1",
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,  # type: ignore[typeddict-item]
            "root_path": self.root_path,
            "headers": headers,
            "state": self.app_state.copy(),
        }
        self._in_head = True
        self._streamed = self._header_bytes = 0
        if not self._awaiting:  # a pipelined request, begun while another is served
            self._arm_head_timer(self.limits.header_timeout)

    def on_url(self, url: bytes) -> None:
        whole = self.url + url
        self.url = whole
        if len(whole) > self.limits.max_request_line:
            raise HeadTooLarge(414, f"the request target is longer than {self.limits.max_request_line} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        # each read of the protocol's attributes is a generic lookup (a class derived from
        # uvicorn's), four headers a request: the count is the list's length, each read once
        headers = self.headers
        limits = self.limits
        size = self._header_bytes + len(name) + len(value)
        self._header_bytes = size
        if len(headers) >= limits.max_headers:
            raise HeadTooLarge(431, f"more than {limits.max_headers} request headers")
        if size > limits.max_header_bytes:
            raise HeadTooLarge(431, f"the request's headers are larger than {limits.max_header_bytes} bytes")
        name = name.lower()
        value = value.rstrip(b" \t")  # llhttp keeps trailing whitespace, which RFC 9110 excludes from the value
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._head_arrived()
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.transport is self.transport:  # a new request's (an upgrade makes none)
            cycle.transport = self._out  # type: ignore[assignment]

    # --- refusing --------------------------------------------------------------------------------

    def _refuse(self, status: int, message: str) -> None:
        """Answer `status` with a JSON message, then close (see the module's docstring)."""
        self._refused = True
        self._in_head = False
        self._end_head_wait()
        if self.transport.is_closing():
            return
        self._out.flush()  # what a response had written goes first
        body = codec.json_encoder.encode({"error": message})
        head = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [b"content-type: application/json\r\ncontent-length: ", str(len(body)).encode(), b"\r\nconnection: close\r\n\r\n"]
        self.transport.write(b"".join(head) + body)
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.flow.resume_reading()
            self.loop.call_later(LINGER_SECONDS, self.transport.close)
        else:
            self.transport.close()

    def _linger(self, received: int) -> None:
        self._lingered += received
        if self._lingered > LINGER_BYTES:
            self.transport.close()


def protocol(limits: ConnectionLimits) -> type[GuardedProtocol]:
    """The protocol class to give uvicorn (`Config(http=...)`) for these limits."""
    return type("GuardedProtocol", (GuardedProtocol,), {"limits": limits})

