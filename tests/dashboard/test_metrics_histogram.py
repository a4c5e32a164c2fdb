"""`LocalHistogram` scrapes exactly as prometheus-client's own `Histogram` given the same
observations: the same text, byte for byte, whatever the values and label sets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, disable_created_metrics, generate_latest

from stdbmod.http.metrics import CALL_BUCKETS, HTTP_BUCKETS, local_histogram
from stdbmod.http.metrics_histogram import LocalHistogram

disable_created_metrics()  # type: ignore[no-untyped-call]  # as metrics.Metrics does: no `_created` series

LABELS = st.sampled_from([("a", "ok"), ("a", "error"), ("b\\n\"x", "ok"), ("", "panic")])
# bounds themselves (each must land in its own bucket), values between them, beyond the last
VALUES = st.one_of(st.sampled_from([0.0, *CALL_BUCKETS]), st.floats(min_value=0, max_value=10, allow_nan=False))


def twins(labelnames: list[str], buckets: tuple[float, ...]) -> tuple[CollectorRegistry, Histogram, CollectorRegistry, LocalHistogram]:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    h = Histogram("t_seconds", "Doc with \\ and\nnewline.", labelnames, buckets=buckets, registry=theirs)
    return theirs, h, ours, local_histogram(ours, "t_seconds", "Doc with \\ and\nnewline.", labelnames, buckets)


@given(st.lists(st.tuples(LABELS, VALUES), max_size=60))
def test_a_labelled_histogram_scrapes_as_prometheus_clients(observed: list[tuple[tuple[str, str], float]]) -> None:
    theirs, h, ours, local = twins(["reducer", "outcome"], CALL_BUCKETS)
    for labels, value in observed:
        h.labels(*labels).observe(value)
        local.labels(*labels).observe(value)
    assert generate_latest(ours) == generate_latest(theirs)


@given(st.lists(st.integers(min_value=0, max_value=2000), max_size=60))
def test_an_unlabelled_histogram_scrapes_as_prometheus_clients_from_the_start(sizes: list[int]) -> None:
    theirs, h, ours, local = twins([], (1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
    assert generate_latest(ours) == generate_latest(theirs)  # zeros before any observation
    for n in sizes:
        h.observe(n)
        local.observe(n)
    assert generate_latest(ours) == generate_latest(theirs)


def test_a_series_shows_once_its_labels_are_named_as_prometheus_clients_does() -> None:
    theirs, h, ours, local = twins(["route", "method", "status"], HTTP_BUCKETS)
    h.labels("/jobs", "POST", "200")
    local.labels("/jobs", "POST", "200")
    assert b'le="+Inf",method="POST",route="/jobs",status="200"} 0.0' in generate_latest(ours)
    assert generate_latest(ours) == generate_latest(theirs)


def test_a_wrong_label_count_or_unordered_buckets_are_refused() -> None:
    _, _, _, local = twins(["reducer", "outcome"], CALL_BUCKETS)
    with pytest.raises(ValueError, match="2 label values expected, got 1"):
        local.labels("a")
    with pytest.raises(ValueError, match="increasing"):
        local_histogram(CollectorRegistry(), "u", "d", [], (2.0, 1.0))


def test_a_second_histogram_of_one_name_is_refused_by_the_registry() -> None:
    r = CollectorRegistry()
    local_histogram(r, "dup_seconds", "d", [], CALL_BUCKETS)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        local_histogram(r, "dup_seconds", "d", [], CALL_BUCKETS)
