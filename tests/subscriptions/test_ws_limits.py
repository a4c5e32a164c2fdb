"""The WebSocket server's bounds, against a real server (uvicorn on a loopback port) with real
clients: a client too far behind is cut off with a clear reason while a fast one keeps up, and
the writer never waits for it; a connection cap; an idle timeout for connections that subscribe
to nothing."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.client import ClientProtocol
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.frames import Frame, Opcode
from websockets.protocol import State
from websockets.uri import parse_uri

from stdbmod import Database, Identity
from stdbmod.http import SigningKey, create_app
from stdbmod.http.subscribe.connection import Limits

from ..http.servers import ThreadServer
from .lobby import lobby
from .wsclient import PROTOCOL, Ws, wait_until

OWNER = Identity.from_claims("test", "owner")
LINE = "x" * 32_000  # big enough that the TCP buffers fill long before the writer is done


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Database, ThreadServer]]:
    db = Database.create(tmp_path / "db", lobby, owner=OWNER, durable=False)
    app = create_app(db, key=SigningKey.generate(), run_scheduler=False, ws_limits=Limits(max_connections=4, max_queued=20, idle_timeout=1.5))
    with ThreadServer(app) as server:
        yield db, server
    db.close()


class SlowClient:
    """A WebSocket client (the `websockets` library's sans-I/O protocol over a plain socket with
    a small receive buffer) that subscribes and then reads nothing until told to."""

    def __init__(self, base: str, query: str) -> None:
        host, port = base.removeprefix("http://").split(":")
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect((host, int(port)))
        self.sock.settimeout(30)
        url = base.replace("http://", "ws://") + "/v1/database/lobby/subscribe"
        self.proto = ClientProtocol(parse_uri(url), subprotocols=[PROTOCOL], max_size=None)  # type: ignore[list-item]
        self.proto.send_request(self.proto.connect())
        self._flush()
        while self.proto.state is not State.OPEN:
            self.proto.receive_data(self.sock.recv(65536))
        self.proto.send_text(json.dumps({"SubscribeSingle": {"query": query, "request_id": 1, "query_id": {"id": 1}}}).encode())
        self._flush()

    def _flush(self) -> None:
        for data in self.proto.data_to_send():
            self.sock.sendall(data)

    def read_to_the_end(self) -> tuple[int, Any]:
        """Read what the server sent: (how many text messages, the close frame it ended with)."""
        texts = 0
        while self.proto.close_rcvd is None:
            data = self.sock.recv(1 << 20)
            if not data:
                break
            self.proto.receive_data(data)
            texts += sum(1 for e in self.proto.events_received() if isinstance(e, Frame) and e.opcode is Opcode.TEXT)
        self.sock.close()
        return texts, self.proto.close_rcvd


def test_a_slow_client_is_cut_off_while_a_fast_one_keeps_up(served: tuple[Database, ThreadServer]) -> None:
    db, server = served
    slow = SlowClient(server.base, "SELECT * FROM chat")
    fast = Ws(server.base, "lobby")
    fast.send("SubscribeSingle", query="SELECT * FROM chat", request_id=1, query_id={"id": 1})
    fast.expect("SubscribeApplied")
    n = 400
    got: list[int] = []

    def read() -> None:
        while len(got) < n:
            update = fast.expect("TransactionUpdate", others=True)
            got.append(len(update["status"]["Committed"]["tables"][0]["updates"][0]["inserts"]))

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(n):  # the writer never waits for the slow one: every call returns
        db.call("say", f"{i} {LINE}", sender=OWNER)
        # the test keeps to the fast client's pace (a client reading as fast as commits come)
        assert wait_until(lambda i=i: len(got) >= i - 5 or not reader.is_alive())
    reader.join(60)
    assert len(got) == n and set(got) == {1}  # the fast one got every commit
    messages, close = slow.read_to_the_end()
    assert close is not None and close.code == 1008, (messages, close)
    assert "too far behind: more than 20 messages" in close.reason and messages < n / 2
    fast.close()


def test_a_connection_cap(served: tuple[Database, ThreadServer]) -> None:
    _, server = served
    clients = [Ws(server.base, "lobby") for _ in range(4)]
    with pytest.raises(InvalidStatus) as e:
        Ws(server.base, "lobby")
    assert e.value.response.status_code == 503 and b"try again later" in (e.value.response.body or b"")
    clients.pop().close()
    for _ in range(50):  # the server counts the closed one out once its handler ends
        try:
            clients.append(Ws(server.base, "lobby"))
            break
        except InvalidStatus:
            threading.Event().wait(0.1)
    assert len(clients) == 4
    for c in clients:
        c.close()


def test_an_idle_connection_subscribed_to_nothing_is_closed(served: tuple[Database, ThreadServer]) -> None:
    _, server = served
    with Ws(server.base, "lobby") as idle, Ws(server.base, "lobby") as busy:
        busy.send("SubscribeSingle", query="SELECT * FROM chat", request_id=1, query_id={"id": 1})
        busy.expect("SubscribeApplied")
        with pytest.raises(ConnectionClosed) as e:
            idle.recv(timeout=30)
        assert e.value.rcvd is not None and e.value.rcvd.code == 1000 and "idle: no message and no subscription for 1.5 s" in e.value.rcvd.reason
        busy.call("say", "still here", request_id=2)
        assert busy.expect("TransactionUpdate")["reducer_call"]["request_id"] == 2  # a subscriber is not idle


