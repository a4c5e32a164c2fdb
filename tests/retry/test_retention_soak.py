"""The short retention soak (tests/soak/retention.py has the long one): 20,000 task lifecycles,
completed and dead tasks kept 5 minutes of a manual clock, the commit log bounded as
`serve --log-keep` bounds it; once the window has filled, the data file does not grow any more
(LMDB reuses the pages that pruning frees), and the rows kept are one window's worth."""

from __future__ import annotations

from pathlib import Path

from tests.soak.retention import run


def test_the_data_file_is_flat_after_warm_up(tmp_path: Path) -> None:
    soak = run(tmp_path / "db", 20_000, per_round=100, seconds_per_round=10, keep_seconds=300, log_keep=500)
    assert soak.rounds == 200
    warm = soak.warm(0.5)  # 100 rounds: the 300 s window (30 rounds) has filled and been pruned many times over
    after = soak.sizes[100:]
    assert max(after) <= warm * 1.01, (warm, max(after))
    assert soak.sizes[-1] <= warm * 1.01
    assert soak.sizes[10] < warm  # it did grow while the window filled: the size is measured
    # one window's worth kept: 30 rounds of 100 (the sweep fires at each oldest task's limit)
    assert 2_800 <= soak.kept <= 3_200, soak.kept
