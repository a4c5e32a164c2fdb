"""The kill -9 soak, quick version: a real server under mixed load from four client processes,
SIGKILLed at random moments two dozen times; every check after every restart (see
tests/soak/run.py; the long run is `python -m tests.soak.run --kills 500`)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.soak.run import soak

KILLS = int(os.environ.get("STDBMOD_SOAK_KILLS", "24"))


def test_kill9_soak(tmp_path: Path) -> None:
    report = soak(tmp_path, kills=KILLS, clients=3, seed=11, up=(0.05, 0.4))
    assert report.problems == [], report.text()
    assert report.kills == KILLS
    assert report.acked_writes >= 10 * KILLS, report.text()  # the load was real
    assert sum(report.tasks.values()) > 0 and report.tasks.get("completed", 0) > 0, report.text()
