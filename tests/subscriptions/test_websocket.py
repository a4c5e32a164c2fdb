"""The WebSocket protocol (`v1.json.spacetimedb`) against a real server with `websockets`
clients: every message type, tokens and fresh identities, request ids echoed, a failed call sent
only to its caller, commit order with several writers, the visibility matrix for subscriptions
and one-off queries, client_connected / client_disconnected, event tables, bad input."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from ..http.servers import bearer, start_server
from .conftest import Shop
from .wsclient import PROTOCOL, Ws, rows, tables

ORDERS = 'SELECT * FROM "order"'


def test_a_connection_without_a_token_gets_a_fresh_identity_and_token(shop: Shop) -> None:
    with Ws(shop.base, "shop") as first:
        token = first.identity_token["token"]
        assert len(first.identity) == 64 and first.identity.startswith("c200")
        assert set(first.identity_token["connection_id"]) == {"__connection_id__"}
    with Ws(shop.base, "shop", token, query=f"?token={token}", header=False) as again:  # ?token=
        assert again.identity == first.identity and again.identity_token["token"] == token
    with Ws(shop.base, "shop", token) as header:  # Authorization: Bearer
        assert header.identity == first.identity
        assert header.identity_token["connection_id"] != first.identity_token["connection_id"]
    # the minted token works over HTTP too
    assert httpx.get(f"{shop.base}/v1/database/shop", headers=bearer(token)).status_code == 200


@pytest.mark.parametrize(
    ("query", "headers", "protocols", "status"),
    [
        ("", {"Authorization": "Bearer forged"}, [PROTOCOL], 401),
        ("?token=forged", None, [PROTOCOL], 401),
        ("", {"Authorization": "Basic abc"}, [PROTOCOL], 401),
        ("", None, ["v1.bsatn.spacetimedb"], 400),
        ("", None, [], 400),
    ],
)
def test_refused_upgrades_answer_with_an_http_status(shop: Shop, query: str, headers: Any, protocols: list[str], status: int) -> None:
    url = shop.base.replace("http://", "ws://") + "/v1/database/shop/subscribe" + query
    with pytest.raises(InvalidStatus) as e:
        connect(url, subprotocols=protocols or None, additional_headers=headers, open_timeout=30)  # type: ignore[arg-type]
    assert e.value.response.status_code == status
    assert "error" in json.loads(e.value.response.body or b"{}")
    with pytest.raises(InvalidStatus) as e:
        connect(shop.base.replace("http://", "ws://") + "/v1/database/nope/subscribe", subprotocols=[PROTOCOL], open_timeout=30)  # type: ignore[list-item]
    assert e.value.response.status_code == 404


def test_every_subscription_message(shop: Shop) -> None:
    with Ws(shop.base, "shop", shop.owner) as w:
        w.send("SubscribeSingle", query=ORDERS, request_id=11, query_id={"id": 1})
        applied = w.expect("SubscribeApplied")
        assert (applied["request_id"], applied["query_id"], applied["rows"]["table_name"]) == (11, {"id": 1}, "order")
        before = len(rows(applied["rows"]["table_rows"]))
        w.send("SubscribeMulti", query_strings=["SELECT * FROM outbox", "SELECT * FROM task WHERE status = 'queued'"], request_id=12, query_id={"id": 2})
        multi = w.expect("SubscribeMultiApplied")
        assert multi["request_id"] == 12 and set(tables(multi["update"])) == {"outbox", "task"}
        w.call("place_order", "lamp", "b@x", request_id=13)
        update = w.expect("TransactionUpdate")
        assert update["reducer_call"]["request_id"] == 13 and update["reducer_call"]["args"] == '["lamp","b@x"]'
        committed = tables(update["status"]["Committed"])
        assert rows(committed["order"])[0][1:3] == ["lamp", "b@x"]
        assert any(r[4] == "send_receipt" for r in rows(committed["task"])) or "outbox" in committed  # queued, or sent at once
        w.send("Unsubscribe", request_id=14, query_id={"id": 1})
        gone = w.expect("UnsubscribeApplied")
        assert gone["request_id"] == 14 and len(rows(gone["rows"]["table_rows"], "deletes")) == before + 1
        w.send("UnsubscribeMulti", request_id=15, query_id={"id": 2})
        assert w.expect("UnsubscribeMultiApplied")["request_id"] == 15
        w.send("Subscribe", query_strings=[ORDERS], request_id=16)
        initial = w.expect("InitialSubscription")
        assert initial["request_id"] == 16 and len(rows(tables(initial["database_update"])["order"])) == before + 1
        assert set(initial["total_host_execution_duration"]) == {"__time_duration_micros__"}
        w.send("Subscribe", query_strings=["SELECT * FROM outbox"], request_id=17)  # replaces the last one
        assert set(tables(w.expect("InitialSubscription")["database_update"])) == {"outbox"}
        w.call("place_order", "pen", "c@x", request_id=18)
        after = w.expect("TransactionUpdate")
        assert "order" not in tables(after["status"]["Committed"])  # no longer subscribed to orders


def test_one_off_queries(shop: Shop) -> None:
    with Ws(shop.base, "shop", shop.owner) as w:
        w.send("OneOffQuery", message_id="00ff", query_string='SELECT COUNT(*) AS n FROM "order"; SELECT id FROM outbox LIMIT 1')
        answer = w.expect("OneOffQueryResponse")
        assert answer["message_id"] == "00ff" and answer["error"] == {"none": []}
        assert [t["table_name"] for t in answer["tables"]] == ["order", "outbox"]
        assert [json.loads(r) for r in answer["tables"][0]["rows"]][0][0] >= 0
        w.send("OneOffQuery", message_id="01", query_string="SELECT colour FROM outbox")
        bad = w.expect("OneOffQueryResponse")
        assert bad["error"] == {"some": "table outbox has no column 'colour'"} and bad["tables"] == []
        w.send("OneOffQuery", message_id="02", query_string="DELETE FROM outbox")
        assert "a one-off query is a SELECT" in w.expect("OneOffQueryResponse")["error"]["some"]


def test_subscription_errors(shop: Shop) -> None:
    with Ws(shop.base, "shop", shop.owner) as w:
        w.send("SubscribeSingle", query="SELECT id FROM outbox", request_id=1, query_id={"id": 7})
        e = w.expect("SubscriptionError")
        assert e["request_id"] == {"some": 1} and e["query_id"] == {"some": 7} and "whole rows of one table" in e["error"]
        w.send("SubscribeSingle", query="SELECT * FROM outbox", request_id=2, query_id={"id": 7})
        w.expect("SubscribeApplied")
        w.send("SubscribeSingle", query="SELECT * FROM outbox", request_id=3, query_id={"id": 7})
        assert "query_id 7 is already in use" in w.expect("SubscriptionError")["error"]
        w.send("Unsubscribe", request_id=4, query_id={"id": 99})
        assert "no subscription with query_id 99" in w.expect("SubscriptionError")["error"]
        w.send("Subscribe", query_strings=["SELECT * FROM nowhere"], request_id=5)
        e = w.expect("SubscriptionError")
        assert e["query_id"] == {"none": []} and "no table named 'nowhere'" in e["error"]


def test_a_failed_call_is_sent_to_its_caller_only(shop: Shop) -> None:
    with Ws(shop.base, "shop", shop.owner) as caller, Ws(shop.base, "shop") as other:
        for w in (caller, other):
            w.send("SubscribeSingle", query=ORDERS, request_id=1, query_id={"id": 1})
            w.expect("SubscribeApplied")
        caller.call("place_order", "", "nobody", request_id=21)  # refused by the reducer
        failed = caller.expect("TransactionUpdate")
        assert failed["status"] == {"Failed": "an order needs an item and an email address"}
        assert failed["reducer_call"]["request_id"] == 21 and failed["reducer_call"]["reducer_name"] == "place_order"
        caller.call("no_such_reducer", request_id=22)
        assert "no such reducer" in caller.expect("TransactionUpdate")["status"]["Failed"]
        caller.send("CallReducer", reducer="place_order", args="[1]", request_id=23, flags=0)
        assert "place_order" in caller.expect("TransactionUpdate")["status"]["Failed"]
        caller.call("place_order", "cup", "d@x", request_id=24)
        assert caller.expect("TransactionUpdate")["reducer_call"]["request_id"] == 24
        seen = other.expect("TransactionUpdate", others=True)  # the first thing the other one hears is the success
        assert "Committed" in seen["status"] and seen["reducer_call"]["request_id"] == 0


def test_no_success_notify_sends_the_caller_nothing_it_did_not_subscribe_to(shop: Shop) -> None:
    with Ws(shop.base, "shop", shop.owner) as w:
        w.call("place_order", "hat", "e@x", request_id=31, flags=1)  # subscribed to nothing
        w.call("place_order", "", "x", request_id=32, flags=1)  # a failure is always sent
        assert w.expect("TransactionUpdate")["reducer_call"]["request_id"] == 32
        w.call("place_order", "hat", "e@x", request_id=33)  # FullUpdate: an empty Committed
        update = w.expect("TransactionUpdate")
        assert update["reducer_call"]["request_id"] == 33 and update["status"] == {"Committed": {"tables": []}}


def test_updates_come_in_commit_order_with_several_writers(shop: Shop) -> None:
    with Ws(shop.base, "shop", shop.owner) as watcher:
        watcher.send("SubscribeSingle", query=ORDERS, request_id=1, query_id={"id": 1})
        start = len(rows(watcher.expect("SubscribeApplied")["rows"]["table_rows"]))

        def writer(k: int) -> None:
            with Ws(shop.base, "shop", shop.owner) as w:
                for i in range(10):
                    w.call("place_order", f"w{k}-{i}", "x@y", request_id=i + 1)
                    w.expect("TransactionUpdate")

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ids = []
        for _ in range(40):
            ids += [r[0] for r in rows(tables(watcher.expect("TransactionUpdate", others=True)["status"]["Committed"])["order"])]
        assert ids == sorted(ids) and len(ids) == 40  # auto_inc ids follow commit order
        r = httpx.post(f"{shop.base}/v1/database/shop/sql", content=b'SELECT COUNT(*) FROM "order"', headers=bearer(shop.owner))
        assert r.json()[0]["rows"] == [[start + 40]]


@pytest.mark.parametrize("who", ["owner", "admin", "other", "anonymous"])
def test_visibility_matrix(shop: Shop, who: str) -> None:
    token = None if who == "anonymous" else getattr(shop, who)
    with Ws(shop.base, "shop", token) as w:
        w.send("SubscribeSingle", query=ORDERS, request_id=1, query_id={"id": 1})
        w.expect("SubscribeApplied")  # public: anyone
        w.send("SubscribeSingle", query="SELECT * FROM task", request_id=2, query_id={"id": 2})
        w.send("OneOffQuery", message_id="aa", query_string="SELECT * FROM outbox")
        private, one_off = w.recv(), w.expect("OneOffQueryResponse")
        if who in ("owner", "admin"):
            assert "SubscribeApplied" in private and one_off["error"] == {"none": []}
        else:
            assert "private; only the database owner, retry admins and retry workers may query it" in private["SubscriptionError"]["error"]
            assert "private" in one_off["error"]["some"]


def test_bad_messages_close_the_connection_with_a_reason(shop: Shop) -> None:
    for frame, code, reason in [
        ("not json", 1008, "bad message: not JSON"),
        ('{"Hello": {}}', 1008, "unknown message 'Hello'"),
        ('{"Subscribe": {"query_strings": "x", "request_id": 1}}', 1008, "bad message: Subscribe"),
        ('{"CallReducer": {"reducer": "x", "args": "[]", "request_id": -1}}', 1008, "request_id must be a u32"),
        (b"\x00\x01", 1003, "binary frames are not part of v1.json.spacetimedb"),
    ]:
        with Ws(shop.base, "shop") as w:
            w.conn.send(frame)  # type: ignore[arg-type]
            with pytest.raises(ConnectionClosed) as e:
                w.recv()
            assert e.value.rcvd is not None and e.value.rcvd.code == code and reason in e.value.rcvd.reason, (frame, e.value.rcvd)


@pytest.fixture(scope="module")
def lobby(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    server = start_server(tmp_path_factory.mktemp("lobby") / "data", str(Path(__file__).with_name("lobby.py")))
    yield server
    server.stop()


def _sql(server: Any, text: str) -> Any:
    return httpx.post(f"{server.base}/v1/database/lobby/sql", content=text.encode(), headers=bearer(server.owner_token())).json()


def test_client_connected_and_disconnected_run_per_connection(lobby: Any) -> None:
    with Ws(lobby.base, "lobby") as a:
        a.send("SubscribeSingle", query="SELECT * FROM online", request_id=1, query_id={"id": 1})
        online = rows(a.expect("SubscribeApplied")["rows"]["table_rows"])
        assert [o[1]["__identity__"][2:] for o in online] == [a.identity]  # its own connection, already in
        with Ws(lobby.base, "lobby") as b:
            joined = a.expect("TransactionUpdate", others=True)
            assert joined["reducer_call"]["reducer_name"] == "client_connected"
            assert rows(tables(joined["status"]["Committed"])["online"])[0][1]["__identity__"][2:] == b.identity
        left = a.expect("TransactionUpdate", others=True)
        assert left["reducer_call"]["reducer_name"] == "client_disconnected" and len(rows(tables(left["status"]["Committed"])["online"], "deletes")) == 1


def test_a_failing_client_connected_rejects_the_connection(lobby: Any) -> None:
    with Ws(lobby.base, "lobby") as victim:
        token, identity = victim.identity_token["token"], victim.identity
    assert httpx.post(f"{lobby.base}/v1/database/lobby/call/ban", json=[identity], headers=bearer(lobby.owner_token())).status_code == 200
    with pytest.raises(InvalidStatus) as e:
        Ws(lobby.base, "lobby", token)
    assert e.value.response.status_code == 403 and "you are banned" in json.loads(e.value.response.body or b"{}")["error"]
    assert all(r[1]["__identity__"][2:] != identity for r in _sql(lobby, "SELECT * FROM online")[0]["rows"])


def test_event_tables_over_the_wire(lobby: Any) -> None:
    with Ws(lobby.base, "lobby") as listener, Ws(lobby.base, "lobby") as speaker:
        listener.send("SubscribeSingle", query="SELECT * FROM chat", request_id=1, query_id={"id": 1})
        assert rows(listener.expect("SubscribeApplied")["rows"]["table_rows"]) == []
        speaker.call("say", "hello", request_id=5)
        assert speaker.expect("TransactionUpdate")["reducer_call"]["request_id"] == 5
        update = listener.expect("TransactionUpdate", others=True)
        while update["reducer_call"]["reducer_name"] != "say":  # connection events of other tests' clients
            update = listener.expect("TransactionUpdate", others=True)
        (line,) = rows(tables(update["status"]["Committed"])["chat"])
        assert line[2] == "hello" and line[1]["__identity__"][2:] == speaker.identity
    assert _sql(lobby, "SELECT COUNT(*) FROM chat")[0]["rows"] == [[0]]  # never stored


def test_a_message_over_the_size_limit_closes_the_connection(lobby: Any) -> None:
    with Ws(lobby.base, "lobby") as w:
        w.call("say", "x" * (1 << 20))  # the server's limit: its body limit, 1 MiB by default
        with pytest.raises(ConnectionClosed) as e:
            w.recv()
        assert e.value.rcvd is not None and e.value.rcvd.code == 1009
