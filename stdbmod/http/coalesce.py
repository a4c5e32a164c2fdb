"""`Coalescing`: a connection's transport as a response sees it, one send where uvicorn makes two.

uvicorn writes a response's status line and headers when the app sends `http.response.start`, and
its body when the app sends `http.response.body`: two `send` system calls per answer, and on
loopback each one also runs the receiver's TCP stack and wakes it. Over a third of the event loop's
time in one process went to them (py-spy, bench/http_cpu.py). Here the first write of a step is
held and the next one goes out with it, so a whole answer is one send. A held write goes out by
itself at the loop's next step at the latest, so a streamed answer's headers are not kept waiting
for a body that comes later, and `close` sends it before closing.
"""

from __future__ import annotations

import asyncio


class Coalescing:
    """What uvicorn's response cycle uses of a transport (`write`, `close`, `is_closing`)."""

    __slots__ = ("transport", "loop", "held")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self.loop = loop
        self.held: bytes | None = None  # None: nothing held and no flush scheduled

    def write(self, data: bytes) -> None:
        held = self.held
        if held is None:
            self.held = data
            self.loop.call_soon(self.flush)
        elif held:
            self.held = b""
            self.transport.write(held + data)
        else:
            self.transport.write(data)

    def flush(self) -> None:
        """Send what is held; dropped if the connection is closing (its client is gone)."""
        held, self.held = self.held, None
        if held and not self.transport.is_closing():
            self.transport.write(held)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()
