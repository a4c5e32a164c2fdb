"""`POST /v1/database/{db}/sql` and `GET /v1/database/{db}/identity` against a real server:
SpacetimeDB's answer shape, the visibility matrix, DML for the owner only, clear 4xx errors."""

from __future__ import annotations

import httpx
import pytest

from .conftest import Shop

WHO = ["owner", "admin", "other", "anonymous"]


def sql(shop: Shop, text: str, who: str = "owner") -> httpx.Response:
    return httpx.post(f"{shop.base}/v1/database/shop/sql", content=text.encode(), headers=shop.headers(who))


def test_the_database_identity_as_hex(shop: Shop) -> None:
    r = httpx.get(f"{shop.base}/v1/database/shop/identity")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    info = httpx.get(f"{shop.base}/v1/database/shop", headers=shop.headers("owner")).json()
    assert r.text == info["database_identity"] and len(r.text) == 64
    assert httpx.get(f"{shop.base}/v1/database/{r.text}/identity").text == r.text  # by identity too
    assert httpx.get(f"{shop.base}/v1/database/nope/identity").status_code == 404


def test_answers_in_spacetimedbs_shape(shop: Shop) -> None:
    assert httpx.post(f"{shop.base}/v1/database/shop/call/place_order", json=["book", "a@x"], headers=shop.headers("owner")).status_code == 200
    r = sql(shop, 'SELECT id, item, placed_at FROM "order" WHERE item = \'book\'; SELECT COUNT(*) AS n FROM "order"')
    assert r.status_code == 200, r.text
    first, second = r.json()
    assert first["schema"] == {
        "elements": [
            {"name": {"some": "id"}, "algebraic_type": {"I64": []}},
            {"name": {"some": "item"}, "algebraic_type": {"String": []}},
            {
                "name": {"some": "placed_at"},
                "algebraic_type": {"Product": {"elements": [{"name": {"some": "__timestamp_micros_since_unix_epoch__"}, "algebraic_type": {"I64": []}}]}},
            },
        ]
    }
    (row,) = first["rows"]
    assert row[1] == "book" and set(row[2]) == {"__timestamp_micros_since_unix_epoch__"}
    assert second["rows"] == [[1]] and set(first) == {"schema", "rows", "total_duration_micros", "stats"}


@pytest.mark.parametrize("who", WHO)
def test_visibility_matrix(shop: Shop, who: str) -> None:
    public = sql(shop, 'SELECT * FROM "order"', who)
    assert public.status_code == 200, public.text
    for private in ("SELECT * FROM outbox", "SELECT * FROM task", 'SELECT o.* FROM "order" o JOIN task t ON o.task_id = t.id'):
        r = sql(shop, private, who)
        if who in ("owner", "admin"):  # the owner, and the retry module's admins
            assert r.status_code == 200, r.text
        else:
            assert r.status_code == 403, r.text
            assert "is private; only the database owner" in r.json()["error"] and "retry admins" in r.json()["error"]


@pytest.mark.parametrize("who", WHO)
def test_dml_is_the_owners(shop: Shop, who: str) -> None:
    r = sql(shop, "UPDATE \"order\" SET item = 'changed' WHERE id = 0", who)
    if who == "owner":
        assert r.status_code == 200 and r.json()[0]["stats"] == {"rows_inserted": 0, "rows_deleted": 0, "rows_updated": 0}
    else:
        assert r.status_code == 403 and "only the database owner may change rows with SQL" in r.json()["error"]


def test_dml_answers_its_counts_and_is_in_the_commit_log(shop: Shop) -> None:
    r = sql(shop, "INSERT INTO outbox (order_id, \"to\", subject) VALUES (9, 'x@y', 'hi'), (9, 'z@y', 'hi'); DELETE FROM outbox WHERE \"to\" = 'z@y'")
    assert r.status_code == 200, r.text
    assert [s["stats"] for s in r.json()] == [
        {"rows_inserted": 2, "rows_deleted": 0, "rows_updated": 0},
        {"rows_inserted": 0, "rows_deleted": 1, "rows_updated": 0},
    ]
    assert [s["rows"] for s in r.json()] == [[], []] and r.json()[0]["schema"] == {"elements": []}


@pytest.mark.parametrize(
    ("text", "status", "message"),
    [
        ("SELECT * FROM nowhere", 400, "no table named 'nowhere'"),
        ("SELECT colour FROM outbox", 400, "table outbox has no column 'colour'"),
        ("SELECT * FROM order", 400, "SQL syntax error"),  # a keyword: quote it
        ("DROP TABLE outbox", 400, "only SELECT, INSERT, UPDATE and DELETE are supported, not DROP"),
        ("", 400, "the query is empty"),
        ("INSERT INTO retry_admin (identity, added_at, added_by) VALUES ('00', 0, '00')", 400, "retry_admin.identity: '00' is not a Identity"),
    ],
)
def test_bad_sql_is_a_4xx_with_a_message(shop: Shop, text: str, status: int, message: str) -> None:
    r = sql(shop, text)
    assert r.status_code == status and message in r.json()["error"], r.text


def test_a_broken_constraint_is_a_409(shop: Shop) -> None:
    r = sql(shop, "SELECT identity FROM retry_admin")
    admin_hex = r.json()[0]["rows"][0][0]["__identity__"][2:]
    r = sql(shop, f"INSERT INTO retry_admin (identity, added_at, added_by) VALUES ('{admin_hex}', 0, '{admin_hex}')")
    assert r.status_code == 409 and "duplicate value" in r.json()["error"], r.text


def test_bodies_are_bounded_and_must_be_utf8(shop: Shop) -> None:
    r = httpx.post(f"{shop.base}/v1/database/shop/sql", content=b"\xff\xfe", headers=shop.headers("owner"))
    assert r.status_code == 400 and "UTF-8" in r.json()["error"]
    r = httpx.post(f"{shop.base}/v1/database/shop/sql", content=b"SELECT * FROM outbox WHERE id = 1 " + b"OR id = 1 " * 200_000, headers=shop.headers("owner"))
    assert r.status_code == 413
    r = httpx.post(f"{shop.base}/v1/database/shop/sql", content=b"SELECT 1", headers={"Authorization": "Bearer forged"})
    assert r.status_code == 401
