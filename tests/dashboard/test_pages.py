"""The jobs pages' reads: keyset pages along an index, every filter, the bounded search, and the
admin check in the same snapshot."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stdbmod import Database, Identity, ManualClock
from stdbmod.http.dashboard import Cursor, JobFilter, NotAllowed, reads
from stdbmod.retry import NewTask, TaskStatus, create_retry_module

ADMIN = Identity.from_claims("test", "admin")
N = 600


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    """N tasks over three queues and two job types, a second apart; a few dead, a few running."""
    clock = ManualClock()
    db = Database.create(tmp_path_factory.mktemp("pages") / "db", create_retry_module().module, owner=ADMIN, clock=clock, durable=False)
    for i in range(N):
        needle = "needle" if i % 97 == 0 else "hay"
        db.call("enqueue_many", [NewTask(f"t{i % 2}", f"q{i % 3}", {"i": i, "word": needle}, 1, 0, None, 0, None)], sender=ADMIN)
        clock.advance(1)
    for _ in range(20):
        c = db.call("claim", "q1", "w", sender=ADMIN)
        db.call("fail", c.id, f"boom {c.id}", sender=ADMIN)  # one attempt allowed: dead
    for _ in range(5):
        db.call("claim", "q2", "w", sender=ADMIN)
    yield db
    db.close()


def _all(db: Database, f: JobFilter, per_page: int = 25, budget: int = reads.BUDGET) -> tuple[list[int], int]:
    """Every page, following the cursors: the ids seen, and how many pages."""
    ids: list[int] = []
    before: Cursor | None = None
    pages = 0
    while True:
        page = reads.jobs(db, ADMIN, f, before, per_page=per_page, budget=budget)
        pages += 1
        assert page.examined <= budget
        ids += [t.id for t in page.items]
        if page.next is None:
            return ids, pages
        before = page.next


def _expected(db: Database, f: JobFilter) -> list[int]:
    with db.read() as view:
        return sorted((t.id for t in view.db.task.iter() if f.matches(t)), reverse=True)


@pytest.mark.parametrize(
    "f",
    [
        JobFilter(),
        JobFilter(status=TaskStatus.DEAD),
        JobFilter(status=TaskStatus.QUEUED, queue="q1"),
        JobFilter(job_type="t1"),
        JobFilter(queue="q2", job_type="t0"),
        JobFilter(status=TaskStatus.RUNNING),
        JobFilter(search="NEEDLE"),
        JobFilter(search="boom 4"),
    ],
    ids=repr,
)
def test_pages_list_every_match_once_newest_first(db: Database, f: JobFilter) -> None:
    ids, _ = _all(db, f)
    assert ids == _expected(db, f)
    assert ids


def test_the_time_filter_walks_the_created_at_index(db: Database) -> None:
    with db.read() as view:
        first = view.db.task.id.find(1).created_at
    since, until = first.micros + 100_000_000, first.micros + 250_000_000
    from stdbmod.types import Timestamp

    f = JobFilter(since=Timestamp(since), until=Timestamp(until), queue="q0")
    ids, _ = _all(db, f, per_page=7)
    assert ids == _expected(db, f) and len(ids) == 50  # 151 seconds, every third in q0
    page = reads.jobs(db, ADMIN, f, per_page=7)
    assert page.next is not None and page.next.created is not None  # the cursor carries the time
    assert Cursor.parse(page.next.encode()) == page.next


def test_a_search_reads_at_most_its_budget_per_page_and_continues(db: Database) -> None:
    f = JobFilter(search="needle")
    page = reads.jobs(db, ADMIN, f, per_page=25, budget=100)
    assert page.examined == 100 and page.searched_out and page.next is not None
    assert len(page.items) <= 2  # ids 1..600 hold a needle every 97 ids
    ids, pages = _all(db, f, per_page=25, budget=100)
    assert ids == _expected(db, f) and pages == 6  # 600 rows, 100 a page


def test_a_non_admin_reads_nothing(db: Database) -> None:
    stranger = Identity.from_claims("test", "stranger")
    with pytest.raises(NotAllowed):
        reads.jobs(db, stranger, JobFilter())
    with pytest.raises(NotAllowed):
        reads.job(db, stranger, 1)
    with pytest.raises(NotAllowed):
        reads.roles(db, stranger)
    with pytest.raises(NotAllowed):
        reads.check(db, stranger)


def test_a_cursor_that_is_not_one_is_refused() -> None:
    for bad in ("x", "1.y", ""):
        with pytest.raises(ValueError):
            Cursor.parse(bad)
