"""A WebSocket client for the tests: the `websockets` library's, speaking v1.json.spacetimedb."""

from __future__ import annotations

import json
import time
from typing import Any

from websockets.sync.client import ClientConnection, connect

PROTOCOL = "v1.json.spacetimedb"


class Ws:
    def __init__(self, base: str, db: str, token: str | None = None, *, query: str = "", header: bool = True, max_queue: int | None = 16) -> None:
        url = base.replace("http://", "ws://") + f"/v1/database/{db}/subscribe{query}"
        headers = {"Authorization": f"Bearer {token}"} if token and header else None
        self.conn: ClientConnection = connect(url, subprotocols=[PROTOCOL], additional_headers=headers, max_queue=max_queue, open_timeout=30)  # type: ignore[list-item]
        self.identity_token = self.expect("IdentityToken")

    @property
    def identity(self) -> str:
        return str(self.identity_token["identity"]["__identity__"])[2:]

    def send(self, kind: str, **body: Any) -> None:
        self.conn.send(json.dumps({kind: body}))

    def recv(self, timeout: float = 30.0) -> dict[str, Any]:
        message: dict[str, Any] = json.loads(self.conn.recv(timeout=timeout))
        assert len(message) == 1, message
        return message

    def expect(self, kind: str, timeout: float = 30.0, others: bool = False) -> dict[str, Any]:
        """The next message of `kind`, past the updates of transactions this client did not ask
        for (the scheduler's, other clients'), unless `others`."""
        while True:
            message = self.recv(timeout)
            update = message.get("TransactionUpdate")
            if update is not None and kind != "TransactionUpdate":
                continue
            mine = update is None or update["reducer_call"]["request_id"] != 0 or update["caller_connection_id"] == self.identity_token["connection_id"]
            if not (others or mine):
                continue
            assert kind in message, message
            body: dict[str, Any] = message[kind]
            return body

    def nothing(self, within: float = 0.3) -> bool:
        """True if no message arrives in `within` seconds (used only after a message that must
        have come later, so the wait is not the test's only evidence)."""
        try:
            self.conn.recv(timeout=within)
        except TimeoutError:
            return True
        return False

    def call(self, reducer: str, *args: Any, request_id: int = 1, flags: int = 0) -> None:
        self.send("CallReducer", reducer=reducer, args=json.dumps(list(args)), request_id=request_id, flags=flags)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Ws:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def rows(table_update: dict[str, Any], which: str = "inserts") -> list[Any]:
    """The decoded rows of a TableUpdate."""
    return [json.loads(r) for u in table_update["updates"] for r in u[which]]


def tables(database_update: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["table_name"]: t for t in database_update["tables"]}


def wait_until(pred: Any, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return False
