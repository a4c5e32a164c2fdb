"""Several runs of the bench side by side: each target's ratio in each run, met or missed, and in
how many of the runs it was met. A target is judged over runs, not one: a machine's speed moves
between runs (docs/performance.md, "The targets").

    python bench/run.py --json r1.json        # ... as many times as wanted, then
    python -m bench.runs r1.json r2.json r3.json

Each file is what `bench/run.py --json` wrote, a full or a partial (`--only`) run; a target a run
did not measure shows as "-" and is not counted (a target no run measured is not shown). Beside
the targets each run shows huey's rate and the HTTP row's server CPU a request, the two figures
the HTTP target's ratio moves with, and a commit's fdatasync over zeros / scattered pages at the
run's start and end (bench/run.py measures them; "-" in a file written before it did), which the
durable rows move with.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from typing import Any

from bench.peers import HUEY
from bench.run import SERVER_CPU, http_row

HTTP16 = http_row(16)


@dataclass
class Run:
    """What one run's JSON says: its targets' ratios (None: not measured) and whether each met."""

    label: str
    targets: dict[str, tuple[float | None, bool | None]]
    huey: float | None  # jobs/s
    http_cpu_us: int | None  # the HTTP row's server CPU a request
    flush: str  # "zeros/scattered; zeros/scattered us", the start's then the end's; "-" if not measured


def load(path: str) -> Run:
    """Read one `bench/run.py --json` file; ValueError says what is wrong with it."""
    try:
        with open(path) as f:
            data: Any = json.load(f)
    except OSError as e:
        raise ValueError(f"{path}: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    try:
        rows = {row["name"]: row for row in data["rows"]}
        targets = {_name(t["name"]): (_ratio(t["ratio"]), t["met"]) for t in data["targets"]}
        huey = [_number(x) for x in rows.get(HUEY, {}).get("samples", [])]
        found = SERVER_CPU.search(rows.get(HTTP16, {}).get("note", ""))
        flush = "; ".join(f"{_us(f['zeros'])}/{_us(f['scattered'])}" for f in data.get("flush", {}).values())
    except (KeyError, TypeError, AttributeError):
        raise ValueError(f"{path}: not what `bench/run.py --json` writes (rows and targets)") from None
    if any(met not in (None, True, False) or (ratio is None) != (met is None) for ratio, met in targets.values()):
        raise ValueError(f"{path}: a target's `met` is not true or false beside its ratio, or null beside none")
    return Run(path, targets, statistics.median(huey) if huey else None, int(found.group(1)) if found else None,
               f"{flush} us" if flush else "-")


def _name(value: Any) -> str:
    if isinstance(value, str):
        return value
    raise TypeError(value)


def _us(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise TypeError(value)


def _ratio(value: Any) -> float | None:
    return None if value is None else _number(value)


def _number(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise TypeError(value)


def table(runs: list[Run]) -> str:
    """The runs as a Markdown table, a line per run, then a line of counts: met in N of M."""
    # A target no run measured is left out: a partial run names its claim target "at 0 queued"
    names = list(dict.fromkeys(name for run in runs for name, (ratio, _) in run.targets.items() if ratio is not None))
    out = ["| run | huey jobs/s | HTTP server CPU a request | fdatasync zeros/scattered, start; end | " + " | ".join(names) + " |",
           "|---|---:|---:|---:|" + "---:|" * len(names)]
    for run in runs:
        cells = [run.label, f"{run.huey:,.0f}" if run.huey is not None else "-", f"{run.http_cpu_us} us" if run.http_cpu_us is not None else "-",
                 run.flush]
        for name in names:
            ratio, met = run.targets.get(name, (None, None))
            cells.append("-" if ratio is None else f"{ratio:.2f}x" + ("" if met else " missed"))
        out.append("| " + " | ".join(cells) + " |")
    counts = []
    for name in names:
        judged = [met for run in runs if (met := run.targets.get(name, (None, None))[1]) is not None]
        counts.append(f"{sum(judged)} of {len(judged)}" if judged else "-")
    out.append("| met in | | | | " + " | ".join(counts) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", metavar="JSON", help="what bench/run.py --json wrote, one file a run")
    a = ap.parse_args(argv)
    try:
        runs = [load(path) for path in a.files]
    except ValueError as e:
        print(f"bench.runs: {e}", file=sys.stderr)
        return 2
    print(table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
