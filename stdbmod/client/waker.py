"""Waking an idle worker the moment work arrives, from the server's subscription stream.

While the worker runs, one WebSocket to `/v1/database/{db}/subscribe` (SpacetimeDB's
`v1.json.spacetimedb` protocol, the worker's token) subscribes to the tasks enqueued from now on
for its queues: a one-off query reads the newest task id (a walk of the key that reads one row),
then `SELECT * FROM task WHERE id > <newest> AND status = 'queued' AND in_module = false [AND
queue ...]`, whose initial rows are only what came in between, however long the backlog. Every
committed transaction that inserts into it wakes the claim loop at once; the claims themselves
stay HTTP (the socket only wakes). Idle polling stays as the bound for what no insert announces:
a retry whose backoff ends, a lease that expires, a queue resumed.

Where the socket cannot be had (no `websockets` installed, a proxy without WebSocket support,
an identity that may not read tasks), the worker polls as before; a lost socket is reconnected
with backoff and wakes the loop once, since wake-ups may have been missed meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from .retrying import IdleBackoff

log = logging.getLogger("stdbmod.worker")

PROTOCOL = "v1.json.spacetimedb"
NEWEST = "SELECT id FROM task ORDER BY id DESC LIMIT 1"
RECONNECT_MAX = 30.0  # seconds between two tries at most


def wake_query(newest: int, queues: Sequence[str] | None) -> str:
    query = f"SELECT * FROM task WHERE id > {int(newest)} AND status = 'queued' AND in_module = false"
    if queues:
        names = " OR ".join("queue = '" + q.replace("'", "''") + "'" for q in queues)
        query += f" AND ({names})"
    return query


def socket_url(url: str, database: str) -> str:
    base = url.rstrip("/")
    scheme, _, rest = base.partition("://")
    return ("wss" if scheme == "https" else "ws") + "://" + rest + f"/v1/database/{database}/subscribe"


def inserts_tasks(message: dict[str, Any]) -> bool:
    """Whether a server message brings rows of the query: a committed transaction that inserted
    some, or a subscription whose initial rows are not empty."""
    update = message.get("TransactionUpdate")
    if isinstance(update, dict):
        return _has_inserts(update.get("status", {}).get("Committed"))
    return _has_inserts(message.get("SubscribeApplied"))


def _has_inserts(body: Any) -> bool:
    if isinstance(body, dict):
        return any(bool(v) if k == "inserts" else _has_inserts(v) for k, v in body.items())
    if isinstance(body, list):
        return any(_has_inserts(v) for v in body)
    return False


class Refused(Exception):
    """The server will not let this identity subscribe: the worker polls only."""


class Waker:
    def __init__(self, url: str, database: str, token: str | None, queues: Sequence[str] | None, wake: Callable[[], None]) -> None:
        self.url = socket_url(url, database)
        self.token, self.queues, self.wake = token, queues, wake
        self.listening = asyncio.Event()  # subscribed: inserts wake the loop (tests wait for it)

    async def run(self) -> None:
        """Until cancelled: keep a subscription open, reconnecting with backoff."""
        try:
            from websockets.asyncio.client import connect
        except ImportError:
            log.info("websockets is not installed: the worker polls only (pip install 'stdbmod[client]')")
            return
        backoff = IdleBackoff(RECONNECT_MAX, first=0.5)
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        while True:
            try:
                async with connect(self.url, subprotocols=[PROTOCOL], additional_headers=headers, open_timeout=30) as ws:  # type: ignore[list-item]
                    await self._session(ws)
                    backoff.reset()
            except asyncio.CancelledError:
                raise
            except Refused as e:
                log.warning("no wake-ups from the server (%s): the worker polls only", e)
                return
            except Exception as e:  # noqa: BLE001 - any failure of the socket: poll, and try again later
                log.debug("the wake-up socket failed (%s); polling until it reconnects", e)
            finally:
                if self.listening.is_set():
                    self.listening.clear()
                    self.wake()  # wake-ups may have been missed while it was down
            await asyncio.sleep(backoff.next())

    async def _session(self, ws: Any) -> None:
        await _next(ws, "IdentityToken")
        await ws.send(json.dumps({"OneOffQuery": {"message_id": "01", "query_string": NEWEST}}))
        answer = await _next(ws, "OneOffQueryResponse")
        error = answer.get("error", {})
        if "some" in error:
            raise Refused(error["some"])
        rows = [json.loads(r) for r in answer["tables"][0]["rows"]] if answer.get("tables") else []
        newest = int(rows[0][0]) if rows else 0
        query = wake_query(newest, self.queues)
        await ws.send(json.dumps({"SubscribeSingle": {"query": query, "request_id": 1, "query_id": {"id": 1}}}))
        while True:
            message = json.loads(await ws.recv())
            if "SubscriptionError" in message:
                raise Refused(str(message["SubscriptionError"].get("error")))
            if "SubscribeApplied" in message:
                self.listening.set()
            if inserts_tasks(message):  # the initial rows: what came in between the newest id and now
                self.wake()


async def _next(ws: Any, kind: str) -> dict[str, Any]:
    """The next message of `kind` (others before it, such as updates, are passed over)."""
    while True:
        message = json.loads(await ws.recv())
        if kind in message:
            body: dict[str, Any] = message[kind]
            return body
