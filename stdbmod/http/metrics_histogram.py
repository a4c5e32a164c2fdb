"""`LocalHistogram`: a labelled histogram of one process, observed in a few instructions and
scraped as prometheus-client's own `Histogram` would be (the same families, samples and `le`
labels: tests/dashboard/test_metrics_histogram.py holds the two texts equal).

prometheus-client's `Histogram.observe` is interpreted Python: a lock for the sum, a scan of the
bucket bounds, a lock for the bucket; ~8,000 instructions an observation. The server makes two or
three a request (the request's, its reducer call's, a share of its commit's), on the feed's
drain, which holds the GIL the writer and the event loop need. Here an observation is a bisect
and two additions under one lock, and the buckets are made cumulative only at a scrape, through
prometheus-client's `HistogramMetricFamily` (its documented way to expose values kept elsewhere).

An HTTP front of `serve --workers N` keeps prometheus-client's `Histogram`: its values must live
in the multiprocess directory the writer reads (metrics_fronts.py).
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString


class Series:
    """One label set's buckets (not cumulative; the last one is +Inf's) and sum."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0
        self.lock = threading.Lock()  # a scrape reads from another thread than the drain

    def observe(self, value: float) -> None:
        # bisect_left: the first bound >= value, as prometheus-client's `value <= bound`
        i = bisect_left(self.bounds, value)
        with self.lock:
            self.counts[i] += 1
            self.total += value

    def read(self) -> tuple[list[int], float]:
        with self.lock:
            return list(self.counts), self.total


class LocalHistogram:
    """A collector for `CollectorRegistry.register`: `labels(*values)` gives a series to
    `observe`, as prometheus-client's `Histogram.labels` gives a child."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]) -> None:
        bounds = tuple(float(b) for b in buckets)
        if list(bounds) != sorted(bounds) or len(set(bounds)) != len(bounds):
            raise ValueError(f"{name}: buckets must be in increasing order")
        if bounds and bounds[-1] == float("inf"):
            bounds = bounds[:-1]  # +Inf is always the last bucket
        self.name = name
        self.documentation = documentation
        self.labelnames = list(labelnames)
        self.bounds = bounds
        self.les = [floatToGoString(b) for b in bounds] + ["+Inf"]  # type: ignore[no-untyped-call]
        self._series: dict[tuple[str, ...], Series] = {}
        self._lock = threading.Lock()
        if not self.labelnames:
            self.labels()  # an unlabelled histogram shows from the start, as prometheus-client's does

    def labels(self, *values: str) -> Series:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: {len(self.labelnames)} label values expected, got {len(values)}")
        series = self._series.get(values)
        if series is None:
            with self._lock:
                series = self._series.setdefault(values, Series(self.bounds))
        return series

    def observe(self, value: float) -> None:
        """An unlabelled histogram's observation."""
        self.labels().observe(value)

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        with self._lock:
            series = list(self._series.items())
        for values, s in series:
            counts, total = s.read()
            cumulative = 0
            buckets: list[tuple[str, float]] = []
            for le, n in zip(self.les, counts):
                cumulative += n
                buckets.append((le, cumulative))
            family.add_metric(list(values), buckets, total)
        yield family
