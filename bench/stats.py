"""Results, repetitions and the printed table."""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Row:
    """One line of the table: a measurement repeated `len(samples)` times."""

    section: str
    name: str
    unit: str
    samples: list[float] = field(default_factory=list)
    note: str = ""
    skipped: str = ""  # why there is no number ("not installed", "quick mode")
    higher_is_better: bool = True

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else float("nan")

    @property
    def lo(self) -> float:
        return min(self.samples) if self.samples else float("nan")

    @property
    def hi(self) -> float:
        return max(self.samples) if self.samples else float("nan")


@dataclass
class Target:
    name: str
    ratio: float | None  # None: could not be measured
    need: float
    goal: float | None
    at_most: bool = False  # the ratio must be <= need (else >=)
    detail: str = ""

    @property
    def met(self) -> bool | None:
        if self.ratio is None:
            return None
        return self.ratio <= self.need if self.at_most else self.ratio >= self.need


class SkipRow(Exception):
    """A measurement that cannot run here (a peer not installed, a server missing)."""


def repeat(
    reps: int, fn: Callable[[str], float], base_dir: str | None = None, between: Callable[[], Any] | None = None
) -> list[float]:
    """Run `fn(fresh_dir)` `reps` times; each gets an empty directory, removed afterwards."""
    out: list[float] = []
    for _ in range(reps):
        d = tempfile.mkdtemp(prefix="stdbmod-bench-", dir=base_dir)
        try:
            out.append(fn(d))
        finally:
            shutil.rmtree(d, ignore_errors=True)
        if between is not None:
            between()
    return out


def fmt(v: float) -> str:
    if v != v:  # nan
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


HEADERS = ("measurement", "median", "min", "max", "unit", "reps", "notes")


def table_rows(rows: list[Row]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for r in rows:
        if r.skipped:
            out.append((r.name, "-", "-", "-", r.unit, "0", r.skipped))
        else:
            out.append((r.name, fmt(r.median), fmt(r.lo), fmt(r.hi), r.unit, str(len(r.samples)), r.note))
    return out


def render_text(rows: list[Row], targets: list[Target]) -> str:
    lines: list[str] = []
    sections: dict[str, list[Row]] = {}
    for r in rows:
        sections.setdefault(r.section, []).append(r)
    body = table_rows(rows)
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(HEADERS)]
    widths[-1] = min(widths[-1], 70)

    def line(cells: tuple[str, ...]) -> str:
        parts = [c.ljust(widths[i]) if i in (0, 4, 6) else c.rjust(widths[i]) for i, c in enumerate(cells)]
        return "  ".join(parts).rstrip()

    for section, srows in sections.items():
        lines.append("")
        lines.append(f"== {section}")
        lines.append(line(HEADERS))
        lines.append(line(tuple("-" * w for w in widths)))
        for cells in table_rows(srows):
            lines.append(line(cells))
    if targets:
        lines.append("")
        lines.append("== targets")
        for t in targets:
            lines.append(render_target(t))
    return "\n".join(lines)


def render_target(t: Target) -> str:
    sign = "<=" if t.at_most else ">="
    if t.ratio is None:
        verdict = "NOT MEASURED"
        value = "-"
    else:
        verdict = "MET" if t.met else "MISSED"
        value = f"{t.ratio:.2f}x"
    goal = f" (goal {sign} {t.goal:g}x)" if t.goal is not None else ""
    detail = f"  [{t.detail}]" if t.detail else ""
    return f"{verdict:12s} {t.name}: {value}, need {sign} {t.need:g}x{goal}{detail}"


def render_markdown(rows: list[Row], targets: list[Target]) -> str:
    out: list[str] = []
    sections: dict[str, list[Row]] = {}
    for r in rows:
        sections.setdefault(r.section, []).append(r)
    for section, srows in sections.items():
        out.append(f"**{section}**\n")
        out.append("| " + " | ".join(HEADERS) + " |")
        out.append("|" + "|".join(["---", "---:", "---:", "---:", "---", "---:", "---"]) + "|")
        for cells in table_rows(srows):
            out.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
        out.append("")
    if targets:
        out.append("**targets**\n")
        out.append("| verdict | target | ratio | need | goal | detail |")
        out.append("|---|---|---:|---:|---:|---|")
        for t in targets:
            sign = "<=" if t.at_most else ">="
            verdict = "not measured" if t.met is None else ("met" if t.met else "missed")
            ratio = "-" if t.ratio is None else f"{t.ratio:.2f}x"
            goal = "" if t.goal is None else f"{sign} {t.goal:g}x"
            out.append(f"| {verdict} | {t.name} | {ratio} | {sign} {t.need:g}x | {goal} | {t.detail} |")
    return "\n".join(out)


class Stopwatch:
    def __enter__(self) -> Stopwatch:
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.perf_counter() - self.t0


def render_json(head: str, rows: list[Row], targets: list[Target], flush: dict[str, dict[str, int]]) -> dict[str, Any]:
    """What `bench/run.py --json` writes (bench/runs.py reads it): every sample, every target, and
    the disk's flush floors (bench/flush_probe.py's `floors`) at the run's start and end."""
    return {"machine": head, "flush": flush, "rows": [asdict(r) for r in rows], "targets": [asdict(t) | {"met": t.met} for t in targets]}
